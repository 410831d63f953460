"""What the crash tests of every broker share: the commands they send, the pipeline looping
beside them, and what "at least once, exactly" means in the ledger afterwards."""

from __future__ import annotations

import threading

from sqlalchemy import Engine, text

from tests.support.ledger import twin_command

THINGS = 1000


def commands(count: int) -> list[dict]:
    """Modifies of whole things: the i-th goes to thing i mod THINGS, each one a new revision."""
    return [
        twin_command("modify", thing=f"org.crash/t{i % THINGS}", path="/", value={"attributes": {"i": i}},
                     correlation_id=f"c-{i}", message_id=f"m-{i}")
        for i in range(count)
    ]


def scalar(engine: Engine, sql: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text(sql)).scalar_one()


def all_carried_out(engine: Engine, expected: int) -> bool:
    return scalar(engine, "SELECT count(*) FROM settlements WHERE carried_out_at IS NOT NULL") == expected


def assert_at_least_once_exactly(engine: Engine, messages: int) -> None:
    """Every message stored, applied, decided and carried out exactly once, never early."""
    assert scalar(engine, "SELECT count(*) FROM signals") == messages, "every message stored exactly once"
    assert scalar(engine, "SELECT count(*) FROM thing_events") == messages, "every change applied exactly once"
    per_thing = messages // THINGS
    assert scalar(engine, f"SELECT count(*) FROM things WHERE revision <> {per_thing}") == 0, "revisions prove it"
    assert scalar(engine, "SELECT count(*) FROM settlements WHERE decision <> 'ack'") == 0
    assert scalar(engine, "SELECT count(*) FROM settlements WHERE carried_out_at IS NULL") == 0
    assert scalar(engine, "SELECT count(*) FROM signals s WHERE NOT EXISTS "
                          "(SELECT 1 FROM settlements st WHERE st.signal_id = s.id)") == 0, "every one decided"
    assert scalar(engine, "SELECT count(*) FROM settlements st JOIN request_results r USING (signal_id, attempt) "
                          "WHERE st.carried_out_at < r.decided_at OR st.carried_out_at < st.decided_at") == 0


class PipelineLoop:
    """The pipeline, run again and again in a thread while the test kills connectors."""

    def __init__(self, run_pipeline) -> None:
        self.run_pipeline, self.runs, self.failures = run_pipeline, 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_pipeline()
                self.runs += 1
            except Exception as problem:  # noqa: BLE001 — reported by the test
                self.failures.append(problem)
                return
            self._stop.wait(0.5)

    def check(self) -> bool:
        """True while the pipeline runs without failing; its failure is raised at once."""
        if self.failures:
            raise self.failures[0]
        return True

    def __enter__(self) -> "PipelineLoop":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(600)
        assert not self.failures, self.failures
