-- builtin_facts as migration 0007 defined it (superseded: the current definition is in objects/).
-- The same facts, one row per (command, built-in label) that is true.
-- version: 0007
CREATE OR REPLACE VIEW builtin_facts AS
SELECT c.signal_id, c.correlation_id, f.label, f.status, f.payload, f.weak, f.fact_at
FROM command_facts c
CROSS JOIN LATERAL (VALUES
    ('twin-persisted'::text, c.persisted_status, c.persisted_payload, false, c.persisted_at),
    ('search-persisted'::text, c.indexed_status, c.indexed_payload, c.indexed_weak, c.indexed_at)
) AS f(label, status, payload, weak, fact_at)
WHERE f.fact_at IS NOT NULL;
