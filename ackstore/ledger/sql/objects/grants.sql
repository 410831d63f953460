-- What each group role may do on the ledger, as the migrations leave it (docs/roles.md maps login
-- roles onto them; tests/test_roles.py shows each grant in use). Every object is the admin role's:
-- its members run the migrations. EXECUTE on a function is everyone's unless revoked here.
-- tests/test_migrations.py proves a migrated database grants exactly this.

-- name: schema
-- The schema: the admin role creates in it, the others only reach into it.
GRANT USAGE, CREATE ON SCHEMA public TO ackstore_admin;
GRANT USAGE ON SCHEMA public TO ackstore_ingest, ackstore_pipeline, ackstore_reporter

-- name: ackstore_ingest
-- Submit, declare, ack, respond, pull, and the connector's writes. UPDATE (received_at) only
-- for the row lock a FOR SHARE takes (a trigger refuses any change of a signal).
GRANT SELECT, INSERT ON signals, attempts, acks, command_responses TO ackstore_ingest;
GRANT UPDATE (received_at) ON signals TO ackstore_ingest;
GRANT INSERT ON queue_apply TO ackstore_ingest;
GRANT SELECT, INSERT, UPDATE ON queue_decide, subscribers, deliveries TO ackstore_ingest;
GRANT SELECT, INSERT, DELETE ON declared_labels TO ackstore_ingest;
GRANT SELECT ON settlements TO ackstore_ingest;
GRANT UPDATE (carried_out_at) ON settlements TO ackstore_ingest;
GRANT SELECT ON request_results, search_index, search_things TO ackstore_ingest;
GRANT SELECT ON current_attempts, thing_events, command_facts, builtin_facts, builtin_acks, request_acks,
                request_answers TO ackstore_ingest

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
GRANT SELECT ON current_attempts, thing_events, command_facts, builtin_facts, builtin_acks, request_acks,
                request_answers TO ackstore_pipeline;
REVOKE EXECUTE ON FUNCTION refresh_statistics(text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION refresh_statistics(text, bigint) TO ackstore_pipeline

-- name: ackstore_reporter
-- The reports and what `show` reads, read-only; of a delivery all but the key its tokens are made
-- with (migration 0015: nothing the reporter runs reads it, and with it one could mint tokens).
GRANT SELECT ON signals, acks, attempts, command_responses, request_results, settlements,
                pipeline_watermarks TO ackstore_reporter;
GRANT SELECT (subscriber_id, signal_id, attempt, event_id, handouts, available_at, leased_at, done_at,
              answered_handout, answered_labels) ON deliveries TO ackstore_reporter;
GRANT SELECT ON current_attempts, thing_events, command_facts, builtin_facts, builtin_acks, request_acks,
                request_answers, signal_timeline, report_settlement_status, report_audit TO ackstore_reporter
