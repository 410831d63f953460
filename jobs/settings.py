"""What every job needs besides the Spark session: the database, the rules' settings, a run id."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ackstore.ledger import heads
from ackstore.ledger.database import ackstore_home, resolve_url
from ackstore.rules.settings import (DEFAULT_RETENTION_DAYS, RETENTION_VARIABLE, Settings, retention_days,
                                     whole_number)
from ackstore.rules.twin import DEFAULT_MAX_THING_BYTES


# How a step's rows are split into Spark tasks (jobs.step.tasks_for). A task costs about 0.1 s of
# CPU whatever it holds (its Python worker's set-up and connection, the JVM's scheduling:
# benchmarks.cost_model), so small work gets one; a task holds its rows in memory at once (tens
# of MB), so a backlog gets more.
MIN_ROWS_PER_TASK = 20_000
MAX_ROWS_PER_TASK = 250_000
# Work that fits one task runs that task in the driver process rather than as a Spark job
# (decisions #110): a Spark job costs ~0.25 s of CPU whatever it holds, more than folding this
# many commands costs.
IN_DRIVER_ROWS = MIN_ROWS_PER_TASK


@dataclass(frozen=True)
class PipelineSettings:
    database_url: str = field(repr=False)  # repr=False: it may hold a password
    rules: Settings = field(default_factory=Settings)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    partitions: int = 4  # JDBC read partitions and fold partitions
    max_thing_bytes: int = DEFAULT_MAX_THING_BYTES
    heads: Path | None = None  # where the seal step appends the seals' heads; None: it does not
    seal_key: Path | None = None  # the Ed25519 private key that signs them; None: unsigned
    archive_root: str = ""  # where the archive job writes Parquet: a folder or a Hadoop URI
    retention_days: float = DEFAULT_RETENTION_DAYS  # how long a seal stays hot before the archive job may move it out
    lock_timeout_ms: int = 5000  # how long a step waits for a writer's lock before deferring to the next pass
    in_driver_rows: int = IN_DRIVER_ROWS  # a step's work up to this many rows runs in the driver, not in a Spark job

    @classmethod
    def from_env(cls, database_url: str | None = None, run_id: str | None = None,
                 origin: str | None = None) -> "PipelineSettings":
        """``$ACKSTORE_DATABASE_URL`` (or the argument, named ``origin`` in errors), the
        ``ACKSTORE_*`` rule settings, ``ACKSTORE_PARTITIONS``, ``ACKSTORE_MAX_THING_BYTES``,
        ``ACKSTORE_LOCK_TIMEOUT_MS`` (how long a step waits for a lock, default 5 000),
        ``ACKSTORE_IN_DRIVER_ROWS`` (work up to this size runs in the driver; 0: always in Spark), and
        where the heads go: ``$ACKSTORE_HEADS`` (default ``$ACKSTORE_HOME/heads/<database>.jsonl``),
        signed with ``$ACKSTORE_SEAL_KEY``; the archive's root ``$ACKSTORE_ARCHIVE`` (default
        ``$ACKSTORE_HOME/archive``) and ``$ACKSTORE_RETENTION_DAYS`` (default 30)."""
        extra = {} if run_id is None else {"run_id": run_id}
        url = resolve_url(database_url, origin)
        return cls(
            database_url=url,
            heads=heads.configured_path(url),
            seal_key=heads.configured_key(),
            archive_root=os.environ.get("ACKSTORE_ARCHIVE") or str(ackstore_home() / "archive"),
            retention_days=retention_days(os.environ.get(RETENTION_VARIABLE, DEFAULT_RETENTION_DAYS)),
            rules=Settings.from_env(),
            partitions=whole_number(os.environ, "ACKSTORE_PARTITIONS", 4, minimum=1),
            # at least 1: PostgreSQL reads 0 as no timeout, which would let a writer's transaction stall a step
            lock_timeout_ms=whole_number(os.environ, "ACKSTORE_LOCK_TIMEOUT_MS", 5000, minimum=1),
            in_driver_rows=whole_number(os.environ, "ACKSTORE_IN_DRIVER_ROWS", IN_DRIVER_ROWS, minimum=0),
            max_thing_bytes=whole_number(os.environ, "ACKSTORE_MAX_THING_BYTES", DEFAULT_MAX_THING_BYTES, minimum=1),
            **extra,
        )
