-- What each group role may do on the ledger, as the migrations leave it (docs/roles.md maps login
-- roles onto them; tests/pipeline/test_roles.py shows each grant in use). Every object is the admin role's:
-- its members run the migrations. EXECUTE on a function is everyone's unless revoked here.
-- tests/ledger/test_migrations.py proves a migrated database grants exactly this.
--
-- The one list of the group roles: every block but ``schema`` and ``definers`` is named by the role
-- it grants to (ackstore.ledger.objects.component_roles reads the names; with the admin role,
-- ackstore.ledger.migrate.ADMIN_ROLE, they are every group role: objects.group_roles). The tests
-- read them from here, and hold docs/roles.md to them (tests/unit/test_docs.py);
-- tests/pipeline/test_roles.py fails on a block that grants to another role, or a role a migrated
-- database grants to that is not here. The fact tables
-- named below (the archive's, the reporter's for verify) are schema.SEALED_TABLES:
-- tests/ledger/test_migrations.py holds them to it.

-- name: schema
-- The schema: the admin role creates in it, the others only reach into it.
GRANT USAGE, CREATE ON SCHEMA public TO ackstore_admin;
GRANT USAGE ON SCHEMA public TO ackstore_ingest, ackstore_pipeline, ackstore_reporter

-- name: definers
-- A SECURITY DEFINER function runs as its owner, the admin role: none is everyone's to call, only
-- the roles' granted below (the write functions, migration 0016; refresh_statistics, 0008).
DO $$
DECLARE definer regprocedure;
BEGIN
  FOR definer IN SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                 WHERE n.nspname = 'public' AND p.prosecdef LOOP
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', definer);
  END LOOP;
END $$

-- name: ackstore_ingest
-- Submit, declare, ack, respond, pull, and the connector's writes: through the write functions
-- alone (intake.sql, answering.sql, pulling.sql, declaring.sql, carrying_out.sql; migration
-- 0016), and the staging table of the bulk intake, all of whose columns but the batch key it may
-- fill. It reads what those paths and `result` and `search` read.
GRANT SELECT ON signals, attempts, acks, command_responses, subscribers, declared_labels, deliveries, settlements,
                request_results, search_index, search_things, things TO ackstore_ingest;  -- things: the HTTP API (0027)
GRANT INSERT (ord, source, api, source_message_id, correlation_id, channel, kind, action, thing_id, topic, path,
              headers, value, requested_acks, response_required, timeout_ms) ON stage_signals TO ackstore_ingest;
GRANT SELECT ON current_attempts, signal_attempts, thing_events, command_facts, builtin_facts, builtin_acks,
                request_acks, request_answers TO ackstore_ingest;
GRANT EXECUTE ON FUNCTION may_act_for, merge_staged_signals, insert_signal, hand_out_live,
                          lock_retransmitted, retransmitted, open_next_attempt, lock_request, store_ack,
                          store_live_response, lock_handout, answer_handout, close_handout, close_decided_handouts,
                          lease_ready, lock_event_position, move_event_position, hand_out_events, close_handouts,
                          declare_subscriber, record_carried_out, record_latest_carried_out TO ackstore_ingest;
-- Who owns a connection (migration 0020).
GRANT EXECUTE ON FUNCTION may_act_for_connection, claim_connection TO ackstore_ingest;
-- A connector's failures, in its connection's log (migration 0022), and that it runs or stopped (0025).
GRANT EXECUTE ON FUNCTION log_connection_event TO ackstore_ingest;
GRANT EXECUTE ON FUNCTION connector_seen, connector_stopped TO ackstore_ingest

-- name: ackstore_pipeline
-- What the steps read and write.
GRANT SELECT ON signals, attempts, subscribers, declared_labels, queue_apply, queue_decide TO ackstore_pipeline;
GRANT SELECT, INSERT ON command_responses, request_results, settlements, ledger_batches, search_marks,
                        validation_passes TO ackstore_pipeline;
GRANT SELECT, INSERT, UPDATE ON acks, things, search_things, pipeline_runs, pipeline_watermarks TO ackstore_pipeline;
GRANT SELECT, INSERT, DELETE ON search_index, queue_settle TO ackstore_pipeline;
GRANT SELECT, INSERT, UPDATE, DELETE ON queue_index TO ackstore_pipeline;
GRANT DELETE ON queue_apply, queue_decide TO ackstore_pipeline;
GRANT SELECT, INSERT, TRUNCATE ON stage_twin_outcomes, stage_search_things, stage_search_rows, stage_results,
                                  stage_weak_acks, stage_settlements TO ackstore_pipeline;
GRANT DELETE ON stage_results TO ackstore_pipeline;
GRANT USAGE ON SEQUENCE ledger_batches_id_seq TO ackstore_pipeline;
GRANT SELECT ON current_attempts, signal_attempts, thing_events, command_facts, builtin_facts, builtin_acks,
                request_acks, request_answers TO ackstore_pipeline;
GRANT EXECUTE ON FUNCTION refresh_statistics(text, bigint) TO ackstore_pipeline;
-- The seal step (migration 0018): it numbers the facts it writes, and seals them.
GRANT USAGE ON SEQUENCE ledger_seq TO ackstore_pipeline;
GRANT SELECT, INSERT ON seals TO ackstore_pipeline;
GRANT INSERT ON seal_leaves TO ackstore_pipeline;  -- written, never read (migration 0026)
GRANT SELECT ON fact_leaves TO ackstore_pipeline;
GRANT EXECUTE ON FUNCTION seal_position() TO ackstore_pipeline;
-- and adds what it sealed to the metrics' totals (migration 0021), each source's or 'other''s: the
-- first connections claimed have series of their own (0025).
GRANT SELECT, INSERT, UPDATE ON metric_totals TO ackstore_pipeline;
GRANT SELECT (id, claimed_at) ON connections TO ackstore_pipeline;
GRANT SELECT, INSERT, DELETE ON metric_awaited_facts TO ackstore_pipeline;
-- The step, facts and sealer locks, and the staging rows a committed COPY left (migration 0020).
GRANT EXECUTE ON FUNCTION lock_step, lock_facts, lock_sealer, clear_abandoned_staged_signals TO ackstore_pipeline;
-- Which migration the ledger is at: a step writes only a ledger at its code's newest (migration 0033).
GRANT SELECT ON alembic_version TO ackstore_pipeline

-- name: ackstore_reporter
-- The reports and what `show` reads, read-only; of a delivery all but the key its tokens are made
-- with (migration 0015: nothing the reporter runs reads it, and with it one could mint tokens).
GRANT SELECT ON signals, acks, attempts, command_responses, request_results, settlements,
                pipeline_watermarks TO ackstore_reporter;
GRANT SELECT (subscriber_id, signal_id, attempt, event_id, handouts, available_at, leased_at, done_at,
              answered_handout, answered_labels) ON deliveries TO ackstore_reporter;
GRANT SELECT ON current_attempts, signal_attempts, thing_events, command_facts, builtin_facts, builtin_acks,
                request_acks, request_answers, signal_timeline, report_settlement_status, report_audit
                TO ackstore_reporter;
-- What `ackstore verify` and `prove` read (migration 0018): every fact table and the seals.
GRANT SELECT ON search_marks, ledger_batches, validation_passes, seals, seal_leaves TO ackstore_reporter;
-- and which seals were archived, and where (migration 0019).
GRANT SELECT ON archives TO ackstore_reporter;
-- What `ackstore metrics` serves and the Ledger page's health strip shows (migration 0021), and
-- the decided attempts whose built-in facts may still come, which its counters read (0025).
GRANT SELECT ON ledger_counters, ledger_gauges TO ackstore_reporter;
GRANT SELECT ON metric_awaited_facts TO ackstore_reporter;
-- `ackstore connection metrics|logs` (migration 0022): a connection's log, and which connections
-- exist (not which login owns each).
GRANT SELECT ON connection_log TO ackstore_reporter;
GRANT SELECT (id, claimed_at) ON connections TO ackstore_reporter

-- name: ackstore_archive
-- The archive job (migration 0019, decisions #102): it reads the facts and their seals, records
-- an archive, and deletes what it holds — the one role that deletes a fact, and only an archived
-- one (the triggers of archiving.sql).
GRANT SELECT, DELETE ON acks, attempts, command_responses, ledger_batches, request_results, search_marks, settlements,
                        signals, validation_passes, seal_leaves TO ackstore_archive;
GRANT SELECT ON seals, pipeline_watermarks TO ackstore_archive;
GRANT SELECT (subscriber_id, signal_id, attempt, event_id, handouts, available_at, leased_at, done_at,
              answered_handout, answered_labels) ON deliveries TO ackstore_archive;
GRANT SELECT, INSERT ON archives TO ackstore_archive;
GRANT SELECT, INSERT, UPDATE ON pipeline_runs TO ackstore_archive;
-- one archive job at a time (migration 0020)
GRANT EXECUTE ON FUNCTION lock_step TO ackstore_archive;
-- and only a ledger at its code's newest migration (migration 0033)
GRANT SELECT ON alembic_version TO ackstore_archive
