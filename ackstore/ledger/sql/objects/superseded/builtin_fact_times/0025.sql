-- builtin_fact_times as migration 0025 defined it (superseded: the current definition is in objects/).
-- One signal's built-in facts, when each became visible, and the fact number of the row that holds
-- it (its response, or the search mark covering its revision): command_facts' joins, for one
-- command, with the numbers the metrics count by.
-- version: 0025
CREATE OR REPLACE FUNCTION builtin_fact_times(signal bigint)
RETURNS TABLE (label text, fact_at timestamptz, seq bigint)
LANGUAGE sql STABLE AS $$
SELECT twin_persisted(), b.committed_at, r.seq
FROM command_responses r
CROSS JOIN LATERAL (SELECT x.committed_at FROM ledger_batches x WHERE x.id = r.batch_id AND x.step = 'apply_twin'
                    LIMIT 1) b
WHERE r.signal_id = builtin_fact_times.signal AND r.event_id IS NOT NULL
UNION ALL
SELECT search_persisted(), mb.committed_at, m.seq
FROM command_responses r
JOIN signals s ON s.id = r.signal_id
JOIN search_marks m ON m.thing_id = s.thing_id AND m.from_revision < r.revision AND r.revision <= m.to_revision
CROSS JOIN LATERAL (SELECT x.committed_at FROM ledger_batches x WHERE x.id = m.batch_id LIMIT 1) mb
WHERE r.signal_id = builtin_fact_times.signal AND r.event_id IS NOT NULL
$$;
