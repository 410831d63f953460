"""
### ackstore_reconcile — the acknowledgement ledger's batch pipeline, every minute

One run applies what arrived, decides what is due, checks the ledger, settles and seals — seven
steps, in order, in one task (`reconcile`):

| step | reads | writes (one transaction per step) |
|---|---|---|
| `apply_twin` | `queue_apply`: twin commands not applied yet | thing states, command responses with their events (`twin-persisted` follows) |
| `index_search` | `queue_index`: things changed since indexed | search index rows, watermarks, one mark per thing (`search-persisted` follows) |
| `weak_acks` | `queue_decide`: undecided requests asking for a declared label | weak acks for labels whose declaring subscribers would not receive the signal |
| `sweep` | `queue_decide`: requests not decided yet | `request_results` (what each requester is told) in a sweep batch |
| `validate` | the sweep batches and settlements past its watermarks: what was decided since the last passed check | nothing on failure; on success the slice's connection requests go to `queue_settle` and the watermarks move |
| `settle` | `queue_settle`: validated results from broker connections | one `settlements` decision per attempt, then `NOTIFY ackstore_settlements` |
| `seal` | the facts numbered since the last seal (`seq`) | one `seals` row and its leaves (an RFC 6962 tree over the rows), then the seal's head appended outside the database (`$ACKSTORE_HEADS`, signed with `$ACKSTORE_SEAL_KEY`); `ackstore verify` checks them (decisions #101) |

The task calls `jobs.pipeline.run_while_behind`: a pass is `jobs.pipeline.run` — exactly what
`ackstore pipeline run` calls — and the task makes another pass while the one before found new
work (commands to apply, requests to decide) and the minute is not up: what arrived during a
pass waits for the next pass, not for the next minute. No pass begins once the next run is due;
the last may end after it, and that run then starts at once and carries on. Pass *k* > 1
records its steps under the run id `<run id>#k`. The task returns every pass's counts by that
id (see its XCom; its log has a line per step). **One task, not seven:** Airflow
spends about a second starting each task (the scheduler's loop, a process, the imports, the
connection), and each step that found work opened a Spark session of its own; in one task the
steps share one process and one session (an idle run: ~7 s as six tasks, see
`benchmarks.scheduled`).

**Why a re-run or a retried task is safe.** Every step reads only its queue (validate: what lies
past its watermarks), stages its rows under this DAG run's id, and merges them in one
transaction that also empties the queue of what it finished (or moves the watermarks); a retried task finds the queue already emptied, or re-stages from
scratch, and never writes a second change, ack, result or decision: a retried task runs every
step again, and those that finished find nothing left to do. The DAG run's id is the
pipeline's run id, so a retried task's stats replace the first try's in `pipeline_runs`.
When `validate` fails, `settle` does not run and nothing is settled: the task fails, and the
failing invariants and sample ids are in its log and in `pipeline_runs`.

**The audit.** The [Ledger page](/plugin/ledger) (*Ledger* in the navigation) shows what this
DAG settled: the settlement status per source, the watermarks, the open work oldest first, the
latency per source over the last 24 hours, and any signal's timeline by its correlation id.

**Where.** The ledger is the Airflow connection `ackstore_ledger`
(`AIRFLOW_CONN_ACKSTORE_LEDGER`), else `$ACKSTORE_DATABASE_URL`. Spark is the Spark Connect
server at `$SPARK_REMOTE` when set (a session costs about 1.3 s), else a local session (about
20 s); it is opened by the first step whose queue holds work, so an idle run opens none.
The task updates the asset `ackstore://settlements`: schedule a DAG on it to react whenever
the ledger has settled something.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import Asset, dag, task

SETTLEMENTS = Asset(name="ackstore_settlements", uri="ackstore://settlements")

# The schedule's interval: a run makes passes while work keeps arriving, and begins none once
# the next run is due.
INTERVAL = timedelta(minutes=1)

DEFAULT_ARGS = {
    "owner": "ackstore",
    "retries": 2,
    "retry_delay": timedelta(seconds=15),
    "execution_timeout": timedelta(minutes=10),
}


def _run_pipeline() -> dict[str, dict[str, dict[str, Any]]]:
    """Every step for this DAG run (the ledger and run id looked up now: ledger_connection.py)."""
    from ledger_connection import settings_of_this_run

    from jobs import pipeline

    return pipeline.run_while_behind(None, settings_of_this_run(), within=INTERVAL.total_seconds())


@dag(
    dag_id="ackstore_reconcile",
    schedule="* * * * *",  # INTERVAL
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(minutes=30),
    default_args=DEFAULT_ARGS,
    tags=["ackstore", "qos-1", "ledger"],
    doc_md=__doc__,
)
def ackstore_reconcile() -> None:
    @task(outlets=[SETTLEMENTS])
    def reconcile() -> dict[str, dict[str, dict[str, Any]]]:
        return _run_pipeline()

    reconcile()


ackstore_reconcile()
