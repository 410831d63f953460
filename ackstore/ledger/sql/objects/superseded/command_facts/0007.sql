-- command_facts as migration 0007 defined it (superseded: the current definition is in objects/).
-- What makes each built-in ack of a twin command true, and when it became visible (its batch's
-- commit, A.2.1), one row per command whose change persisted: twin-persisted is the change
-- apply_twin persisted; search-persisted the index reaching the command's revision — a weak 200
-- when it already held that state (B.8, B.11). Responses from before the lean ledger (batch
-- 'migrated') kept their twin-persisted acks as rows: no fact time here. Joins only (no UNION),
-- so a statement joining it from a few requests reads their rows alone.
-- version: 0007
CREATE OR REPLACE VIEW command_facts AS
SELECT r.signal_id, s.correlation_id,
       CASE WHEN rb.step = 'apply_twin' THEN rb.committed_at END AS persisted_at, r.status AS persisted_status,
       r.payload AS persisted_payload,
       mb.committed_at AS indexed_at, CASE WHEN m.changed THEN 204 ELSE 200 END AS indexed_status,
       CASE WHEN NOT m.changed
            THEN to_jsonb('The search index already held this state of the thing: nothing needed writing.'::text)
       END AS indexed_payload,
       NOT m.changed AS indexed_weak
FROM command_responses r
JOIN signals s ON s.id = r.signal_id
JOIN ledger_batches rb ON rb.id = r.batch_id
LEFT JOIN search_marks m ON m.thing_id = s.thing_id AND m.from_revision < r.revision AND r.revision <= m.to_revision
LEFT JOIN ledger_batches mb ON mb.id = m.batch_id
WHERE r.event_id IS NOT NULL;
