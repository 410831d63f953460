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
-- Every counter: per metric, source and labels, what the seals cover plus what came after.
SELECT metric, source, label, detail, value FROM ledger_counters

-- name: gauges
-- Every gauge: per metric and its one label.
SELECT metric, label, value FROM ledger_gauges

-- name: latency_buckets
-- The latency histograms' bucket bounds, in order (the one list is the SQL function's).
SELECT unnest(latency_buckets()) AS bound
