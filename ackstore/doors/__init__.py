"""Ditto's front doors over the ledger (issue 51): its HTTP API 2 (``app``), spoken to as Ditto's
own clients speak to Ditto. Each request acts as the ledger login it authenticated as (``logins``),
is stored with the requests beside it (``intake``) and held for its decision (``held``); the
mapping between HTTP and the Ditto Protocol is the pure ``ackstore.rules.http_api``."""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8090  # `ackstore serve`'s and `ackstore airflow`'s, as docs/http.md gives it
