-- signal_facts as migration 0019 defined it (superseded: the current definition is in objects/).
-- The facts of one signal, by table and number (NULL: a settlement not carried out yet, not
-- final): the signal, its attempts, acks, response, results, settlements, the search mark that
-- indexed its change, the batches those were written in, and the validation pass that passed
-- each result. What `prove` proves, and what archiving moves out together. A branch per fact
-- table (schema.SEALED_TABLES), by the signal's id for those that name it
-- (schema.SIGNAL_FACT_TABLES): tests/ledger/test_migrations.py; archive_lookups.facts_of spells it as
-- look-ups over the archive too, and tests/pipeline/test_archive_lookups.py holds the two together.
-- version: 0019
CREATE OR REPLACE FUNCTION signal_facts(signal bigint) RETURNS TABLE (fact_table text, seq bigint)
LANGUAGE sql STABLE AS $$
WITH s AS (SELECT g.id, g.seq, g.thing_id FROM signals g WHERE g.id = signal),
r AS (SELECT cr.seq, cr.batch_id, cr.revision FROM command_responses cr WHERE cr.signal_id = signal),
x AS (SELECT rr.seq, rr.batch_id FROM request_results rr WHERE rr.signal_id = signal),
m AS (SELECT mk.seq, mk.batch_id FROM search_marks mk JOIN s ON mk.thing_id = s.thing_id
      JOIN r ON mk.from_revision < r.revision AND r.revision <= mk.to_revision)
SELECT 'signals', s.seq FROM s
UNION ALL SELECT 'attempts', a.seq FROM attempts a WHERE a.signal_id = signal
UNION ALL SELECT 'acks', k.seq FROM acks k WHERE k.signal_id = signal
UNION ALL SELECT 'command_responses', r.seq FROM r
UNION ALL SELECT 'request_results', x.seq FROM x
UNION ALL SELECT 'settlements', st.seq FROM settlements st WHERE st.signal_id = signal
UNION ALL SELECT 'search_marks', m.seq FROM m
UNION ALL SELECT 'ledger_batches', b.seq FROM ledger_batches b
          WHERE b.id IN (SELECT r.batch_id FROM r UNION SELECT x.batch_id FROM x UNION SELECT m.batch_id FROM m)
UNION ALL SELECT 'validation_passes', v.seq FROM x
          CROSS JOIN LATERAL (SELECT p.seq FROM validation_passes p WHERE p.results_upto >= x.batch_id
                              ORDER BY p.results_upto LIMIT 1) v
$$;
