"""What every pipeline step does around its Spark work: one run at a time, clean staging,
a crash point between staging and merge, one merge transaction, and a record of the run.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator

from sqlalchemy import Connection, Engine, Table, func, select, text, true
from sqlalchemy.exc import DBAPIError
from sqlalchemy.dialects.postgresql import insert

from ackstore.ledger import failures, migrate
from ackstore.ledger.database import make_engine
from ackstore.ledger.schema import pipeline_runs
from ackstore import faults
from jobs.settings import MAX_ROWS_PER_TASK, MIN_ROWS_PER_TASK, PipelineSettings
from jobs.spark import Postgres, stage_reads
from jobs.sql import statement, statements

log = logging.getLogger("ackstore.pipeline")


def tasks_for(rows: int, partitions: int) -> int:
    """The Spark tasks ``rows`` are split into: one per MIN_ROWS_PER_TASK rows up to
    ``partitions`` (the parallelism the settings ask for), and more only so that no task holds
    more than MAX_ROWS_PER_TASK; at least one."""
    return max(1, min(partitions, -(-rows // MIN_ROWS_PER_TASK)), -(-rows // MAX_ROWS_PER_TASK))


# The engines of :func:`shared_engines`, by database URL, while a block of it runs.
_SHARED: ContextVar[dict[str, Engine] | None] = ContextVar("ackstore_shared_engines", default=None)


@contextmanager
def shared_engines() -> Iterator[None]:
    """Steps made inside share one engine per database URL: the steps of a pass, and the passes
    of a run, reuse its pooled connections rather than each opening and closing its own (an idle
    pass opened 16, each a backend the server starts and ends: most of the idle pass's CPU).
    Re-entrant; the engines are disposed when the outermost block ends."""
    if _SHARED.get() is not None:
        yield
        return
    engines: dict[str, Engine] = {}
    token = _SHARED.set(engines)
    try:
        yield
    finally:
        _SHARED.reset(token)
        for engine in engines.values():
            engine.dispose()


def engine_for(database_url: str) -> tuple[Engine, bool]:
    """The engine a step (or its early seal) uses, and whether the step owns it (and disposes of it when done)."""
    shared = _SHARED.get()
    if shared is None:
        return make_engine(database_url), True
    if database_url not in shared:
        shared[database_url] = make_engine(database_url)
    return shared[database_url], False


class PipelineBusy(RuntimeError):
    """Another process is running the same step."""


class StagingMismatch(RuntimeError):
    """The ledger changed between staging and merge; the merge was rolled back."""


class Step:
    """One run of one step: its engine, where Spark reads and stages, and its lock."""

    def __init__(self, name: str, settings: PipelineSettings, staging: tuple[Table, ...]) -> None:
        self.name = name
        self.settings = settings
        self.run_id = settings.run_id
        self.staging = staging
        self.postgres = Postgres.from_database_url(settings.database_url)
        self.engine, self._owns_engine = engine_for(settings.database_url)
        self.stats: dict[str, Any] = {}
        self._started = time.perf_counter()

    @contextmanager
    def locked(self) -> Iterator["Step"]:
        """Hold the step's lock for the whole run — a row lock of a transaction kept open on a
        connection of its own, which no other login may take (issue 37) —; clear staging left by
        dead runs. First, refuse a ledger not at this code's newest migration (decisions #145)."""
        try:
            with self.engine.connect() as lock_connection:
                migrate.refuse_unless_at_head(lock_connection)  # the forms it writes are its migration's
                lock_connection.execute(statement("batches", "keep_step_lock"))
                if not lock_connection.execute(statement("batches", "lock_step"), {"step": self.name}).scalar_one():
                    raise PipelineBusy(f"another process is running the {self.name} step")
                try:
                    self._clear_staging()
                    yield self
                finally:
                    lock_connection.rollback()  # the lock ends with its transaction
        finally:
            if self._owns_engine:
                self.engine.dispose()

    def _clear_staging(self) -> None:
        """Empty the staging tables a dead run left rows in (we hold the lock: only such a run's
        rows can be there). An empty one is left alone: a TRUNCATE makes new files, ~12 ms of the
        server's time each, most of what an idle pass cost."""
        with self.engine.begin() as conn:
            left = [table.name for table in self.staging
                    if conn.execute(select(true()).select_from(table).limit(1)).first() is not None]
            if left:  # names from schema.py, not input
                conn.execute(text(f"TRUNCATE {', '.join(left)}"))

    def run_once(
        self,
        spark: Any,
        work: str,
        stage: Callable[[Any, "Step", tuple], None],
        merge: Callable[["Step"], None],
        idle: dict[str, Any],
        first: Callable[["Step"], None] | None = None,
    ) -> dict[str, Any]:
        """The whole step: lock; do what SQL alone can (``first``); ask the job's ``work``
        statement whether anything is left (its first column NULL or false: nothing); stage it
        with Spark; merge it."""
        with self.locked():
            self.stats.update(idle)
            with self.deferrable():
                if first is not None:
                    first(self)
                with self.deferrable():  # what ``first`` committed stands
                    with self.engine.connect() as conn:
                        found = tuple(conn.execute(statement(self.name, work)).one())
                    if found[0] is not None and found[0] is not False:
                        self.timed("spark", lambda: stage(spark, self, found))
                        merge(self)
            return self.record()

    @contextmanager
    def deferrable(self) -> Iterator[None]:
        """Work that gives way when a lock it needs is held past the timeout (a writer's
        transaction left open, say): what it did not commit is still queued, for the next pass,
        and the stats say what was committed before it began, and ``deferred_by_lock``."""
        committed = dict(self.stats)
        try:
            yield
        except DBAPIError as error:
            if failures.sqlstate(error) != failures.LOCK_NOT_AVAILABLE:
                raise
            log.warning("%s deferred: a lock was held past %d ms (%s)", self.name, self.settings.lock_timeout_ms,
                        str(error.orig).strip().splitlines()[0])
            self.stats = {**committed, "deferred_by_lock": True}

    def read(self, spark: Any, query: str, bounds: tuple[int, int]) -> Any:
        """The job's named read ``query``, split into partitions over ``bounds`` of its signal ids
        (as many as :meth:`tasks` gives the ids the bounds span: at most that many rows)."""
        return self.postgres.read(
            spark, statements(self.name)[query], partition_column="signal_id", bounds=bounds,
            partitions=self.tasks(bounds[1] - bounds[0] + 1),
        )

    def tasks(self, rows: int) -> int:
        """How many Spark tasks share ``rows`` of this step's work (:func:`tasks_for`)."""
        return tasks_for(rows, self.settings.partitions)

    def stage(self, frame: Any, table: Table) -> int:
        """Append ``frame``'s rows, tagged with this run's id, to the staging ``table``; how many."""
        from pyspark.sql import functions as F

        return self.postgres.append(frame.withColumn("run_id", F.lit(self.run_id)), table.name)

    def stage_in_tasks(self, spark: Any, rows: int, reads: list[str], columns: Any,
                       outputs: dict[Table, Callable[[Iterator[Any]], Iterator[Any]]]) -> None:
        """Stage what each of ``outputs`` makes of the rows of each query of ``reads``, tagged
        with this run's id: one Spark task per query (:meth:`jobs.spark.Postgres.stage_in_tasks`),
        or, for work of at most ``in_driver_rows`` rows, the same task's function here, on a
        connection of the step's pool (decisions #110): no Spark job, and no session opened."""
        named = {table.name: each for table, each in outputs.items()}
        if rows > self.settings.in_driver_rows:
            self.stats["staged_in"] = "spark"
            self.postgres.stage_in_tasks(spark, reads, columns, named, self.run_id)
            return
        self.stats["staged_in"] = "driver"
        connection = self.engine.raw_connection()
        try:
            with connection.cursor() as cursor:
                stage_reads(cursor, reads, columns, named, self.run_id)
            connection.commit()
        finally:
            connection.close()  # back to the pool, rolled back if the commit was not reached

    def timed(self, label: str, work: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        result = work()
        self.stats[f"{label}_seconds"] = round(time.perf_counter() - started, 3)
        return result

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A transaction that writes the ledger, waiting for a lock at most the settings' lock
        timeout (then the step defers: :meth:`run_once`). Without JIT: a merge's plan is large and runs once,
        and compiling it with inlining and optimization cost more than it saved (≈ 1 s a statement
        at a million rows, measured)."""
        with self.engine.begin() as conn:
            conn.execute(statement("batches", "without_jit"))
            conn.execute(statement("batches", "lock_timeout"), {"ms": self.settings.lock_timeout_ms})
            yield conn

    @contextmanager
    def merge(self) -> Iterator[Connection]:
        """The one transaction that moves staged rows into the ledger."""
        faults.checkpoint(f"{self.name}:staged")
        started = time.perf_counter()
        with self.transaction() as conn:
            yield conn
        self.stats["merge_seconds"] = round(time.perf_counter() - started, 3)
        faults.checkpoint(f"{self.name}:merged")

    def open_batch(self, conn: Connection) -> int:
        """A ledger batch for the facts this merge writes; :meth:`close_batch` ends the merge."""
        return conn.execute(statement("batches", "open")).scalar_one()

    def close_batch(self, conn: Connection, batch_id: int, written: int) -> None:
        """Record the batch as the merge's last write: its time is when its facts became visible.
        A batch that wrote nothing is not recorded (an idle run changes nothing)."""
        if not written:
            return
        conn.execute(statement("batches", "wait_for_decisions"))
        conn.execute(statement("batches", "close"), {"batch_id": batch_id, "step": self.name, "run_id": self.run_id})

    def refresh_statistics(self, conn: Connection, written: dict[Table, int]) -> None:
        """Statistics for the tables this merge wrote so many rows of, or will read so many rows of
        (staged; queued), that plans made with the old ones would be wrong (the function
        ``refresh_statistics`` decides: a tenth of what they know, from 100 rows). A work queue's
        are taken while it holds the work its next statements read, never right after it was
        emptied: the next run's removal would be planned as one row, a nested loop costing the
        square of the run (15 s for 6 000 items)."""
        started = time.perf_counter()
        for table, rows in written.items():
            conn.execute(statement("batches", "refresh_statistics"), {"table": table.name, "written": rows})
        seconds = self.stats.setdefault("statement_seconds", {})
        seconds["refresh_statistics"] = round(seconds.get("refresh_statistics", 0) + time.perf_counter() - started, 3)

    def runner(self, conn: Connection, params: dict[str, Any]) -> Callable[[str], int]:
        """Run named statements of the job in the merge transaction; each one's row count is
        returned and its time goes into the stats (for profiling)."""

        def run(name: str) -> int:
            started = time.perf_counter()
            count = conn.execute(statement(self.name, name), params).rowcount
            self.stats.setdefault("statement_seconds", {})[name] = round(time.perf_counter() - started, 3)
            return count

        return run

    def scalar(self, conn: Connection, name: str, params: dict[str, Any]) -> Any:
        return conn.execute(statement(self.name, name), params).scalar_one()

    def record(self) -> dict[str, Any]:
        self.stats["seconds"] = round(time.perf_counter() - self._started, 3)
        with self.engine.begin() as conn:
            row = insert(pipeline_runs).values(
                run_id=self.run_id, step=self.name, stats=self.stats, finished_at=func.now()
            )
            conn.execute(
                row.on_conflict_do_update(
                    index_elements=[pipeline_runs.c.run_id, pipeline_runs.c.step],
                    set_={"stats": row.excluded.stats, "finished_at": row.excluded.finished_at},
                )
            )
        return dict(self.stats)


def expect_count(what: str, actual: int, expected: int) -> None:
    if actual != expected:
        raise StagingMismatch(f"{what}: {actual} rows changed, {expected} staged; rolled back")
