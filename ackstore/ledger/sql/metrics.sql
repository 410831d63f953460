-- What one scrape of `ackstore metrics` reads (ackstore/ledger/metrics.py), in one snapshot: the
-- views of sql/objects/metrics.sql, which never read the history.

-- name: snapshot
-- One snapshot for the whole scrape, read only: a counter and the gauges beside it agree.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY

-- name: without_jit
-- The planner cannot know how few facts follow the last seal (a parameter, guessed a third of
-- each table), so it costs a scrape as if it read the history and compiles it with JIT: a second
-- spent compiling what then runs in milliseconds.
SET LOCAL jit = off

-- name: counters
-- Every counter: per metric, source and labels, what the seals cover plus what came after; a
-- source past the first :cap connections as 'other', as the seals roll it up (decisions #127).
SELECT c.metric, COALESCE(k.source, 'other') AS source, c.label, c.detail, sum(c.value) AS value
FROM ledger_counters c LEFT JOIN metric_sources(:cap) k ON k.source = c.source
GROUP BY 1, 2, 3, 4

-- name: gauges
-- Every gauge: per metric and its one label (a source's gauges as each source's: the exporter folds
-- those past the first :cap connections, as it knows how each gauge adds up).
SELECT metric, label, value FROM ledger_gauges

-- name: sources
-- The sources with series of their own (metric_sources), and whether any connection is past them.
SELECT k.source, false AS past FROM metric_sources(:cap) k
UNION ALL
SELECT 'other', true WHERE EXISTS (SELECT FROM connections c ORDER BY c.claimed_at, c.id OFFSET :cap LIMIT 1)

-- name: latency_buckets
-- The latency histograms' bucket bounds, in order (the one list is the SQL function's).
SELECT unnest(latency_buckets()) AS bound
