-- refresh_statistics as migration 0008 defined it (superseded by migration 0012: a relative threshold, and a queue's statistics taken while it holds its work).
-- Statistics for what a merge just wrote, so that the next statement or step plans a backlog
-- as one (hash joins) and a minute's work as one (index look-ups): ANALYZE a table the merge
-- grew by a tenth or more (10 000 rows at least; per-minute runs never pay for it). ANALYZE
-- reads a fixed sample, whatever the table's size. SECURITY DEFINER: only a table's owner may
-- analyze it, and the pipeline's role owns none; the tables it may name are listed here.
-- version: 0008
CREATE OR REPLACE FUNCTION refresh_statistics(target text, written bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  known real := (SELECT c.reltuples FROM pg_class c WHERE c.oid = to_regclass(target));
BEGIN
  IF target <> ALL (ARRAY['command_responses', 'things', 'queue_apply', 'queue_index', 'search_index', 'search_things', 'search_marks', 'acks', 'request_results', 'queue_decide', 'settlements', 'queue_settle', 'stage_twin_outcomes', 'stage_search_things', 'stage_search_rows', 'stage_weak_acks', 'stage_results', 'stage_settlements']) THEN
    RAISE EXCEPTION 'refresh_statistics: % is not a table a merge writes', target;
  END IF;
  IF written < 10000 OR (known > 0 AND written * 10 < known) THEN
    RETURN false;
  END IF;
  EXECUTE format('ANALYZE %I', target);
  RETURN true;
END
$$;
