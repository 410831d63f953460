-- What the pipeline's steps share: statistics after a merge, the validation gate's slice.

-- name: refresh_statistics
-- Statistics for a table as a merge's next statements will read it, so that they plan its rows as
-- they are: a backlog of a million as one (hash joins), a minute's work as one (index look-ups).
-- ``written``: how many rows the merge wrote into it, or a work queue holds as it is about to be read.
-- ANALYZE when that is a tenth or more of what the statistics know, or they know of none (a
-- staging table after TRUNCATE; a queue analyzed empty): a few thousand rows planned as one row
-- each side of a join is a nested loop that costs the square of them (removing 6 000 finished
-- items from a queue took 15 s). Under 100 rows that square costs milliseconds: not analyzed.
-- ANALYZE reads a fixed sample, whatever the table's size. SECURITY DEFINER: only a table's
-- owner may analyze it, and the pipeline's role owns none; the tables it may name are listed here.
-- version: 0012
CREATE OR REPLACE FUNCTION refresh_statistics(target text, written bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  known real := (SELECT c.reltuples FROM pg_class c WHERE c.oid = to_regclass(target));
BEGIN
  IF target <> ALL (ARRAY['command_responses', 'things', 'queue_apply', 'queue_index', 'search_index', 'search_things', 'search_marks', 'acks', 'request_results', 'queue_decide', 'settlements', 'queue_settle', 'stage_twin_outcomes', 'stage_search_things', 'stage_search_rows', 'stage_weak_acks', 'stage_results', 'stage_settlements']) THEN
    RAISE EXCEPTION 'refresh_statistics: % is not a table a merge writes', target;
  END IF;
  IF written < 100 OR (known > 0 AND written * 10 < known) THEN
    RETURN false;
  END IF;
  EXECUTE format('ANALYZE %I', target);
  RETURN true;
END
$$;

-- name: awaiting_validation
-- Decided requests the validation gate has not passed yet: their sweep batch is past its
-- watermark (jobs/validate.py names it). A function, not a view: it reads the watermark first
-- and plans the slice with its value, and callers plan with its ROWS (the few requests of a
-- run) — a view's sub-select would be guessed a third of all results, and joined by scans.
-- version: 0007
CREATE OR REPLACE FUNCTION awaiting_validation() RETURNS TABLE (signal_id bigint, attempt integer)
LANGUAGE plpgsql STABLE ROWS 1000 AS $$
DECLARE
  passed bigint := COALESCE((SELECT w.position FROM pipeline_watermarks w WHERE w.name = 'validated_results'), 0);
BEGIN
  RETURN QUERY EXECUTE 'SELECT r.signal_id, r.attempt FROM request_results r WHERE r.batch_id > $1' USING passed;
END
$$;
