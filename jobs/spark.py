"""The Spark side of the jobs: the session, JDBC reads, and COPY staging from its Python workers.

Only the DataFrame API is used, so every job runs on a local session and on Spark Connect
(``SPARK_REMOTE=sc://host:15002``) alike.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ackstore.ledger.database import database_url

JDBC_JAR = os.environ.get("ACKSTORE_JDBC_JAR", "/usr/share/java/postgresql.jar")
REMOTE_VARIABLE = "SPARK_REMOTE"


def spark_session(app_name: str = "ackstore", *, remote: str | None = None, cores: int | None = None) -> Any:
    """A Spark Connect session if ``remote`` / ``$SPARK_REMOTE`` is set, else a local one."""
    from pyspark.sql import SparkSession

    remote = remote or os.environ.get(REMOTE_VARIABLE)
    if remote:
        return SparkSession.builder.remote(remote).appName(app_name).getOrCreate()
    # Python workers must be the venv's interpreter (pyarrow lives there), not python3 from PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    master = f"local[{cores}]" if cores else "local[*]"
    session = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.jars", JDBC_JAR)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(max(2, (cores or os.cpu_count() or 2) * 2)))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", os.environ.get("ACKSTORE_SPARK_DRIVER_MEMORY", "3g"))
        .config("spark.sql.adaptive.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines would drown the job's output
    return session


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def connect_server(work_dir: Path, port: int | None = None, *, start_timeout: float = 180) -> Iterator[str]:
    """A Spark Connect server from the pyspark package (``local[2]``, the JDBC jar) on
    ``port`` (default: a free one), its logs and pid file in ``work_dir``; yields its
    ``sc://`` URL and stops it afterwards. It takes about 20 s to listen."""
    import pyspark

    spark_home = Path(pyspark.__file__).resolve().parent
    port = port or free_port()
    work_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home),
        "SPARK_LOG_DIR": str(work_dir),  # else it writes its logs into the venv
        "SPARK_PID_DIR": str(work_dir),
        "SPARK_IDENT_STRING": f"ackstore-{port}",
        "PYSPARK_PYTHON": sys.executable,  # its Python workers need the venv (pyarrow, ackstore)
    }
    env.pop(REMOTE_VARIABLE, None)
    start = [
        str(spark_home / "sbin" / "start-connect-server.sh"),
        "--master", "local[2]",
        "--jars", JDBC_JAR,
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",  # this machine only, like the API server
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.ui.enabled=false",
    ]
    subprocess.run(start, env=env, check=True, capture_output=True, timeout=120)
    try:
        _wait_for_port(port, start_timeout)
        yield f"sc://127.0.0.1:{port}"
    finally:
        subprocess.run([str(spark_home / "sbin" / "stop-connect-server.sh")], env=env, capture_output=True,
                       timeout=120)


def _wait_for_port(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"Spark Connect did not listen on port {port} within {seconds:.0f} s")


class LazySession:
    """A Spark session opened on first use, so that a step with nothing to do never pays for
    one (a local session costs a task ~26 s, a Spark Connect one ~1.3 s: docs/stack-notes.md)."""

    def __init__(self, app_name: str, *, remote: str | None = None, cores: int | None = None) -> None:
        self._options = {"app_name": app_name, "remote": remote, "cores": cores}
        self._session: Any = None
        self._borrowed = False  # the process's active session, which its owner stops

    @property
    def opened(self) -> bool:
        return self._session is not None

    def __getattr__(self, name: str) -> Any:  # only for what the session itself has
        if self._session is None:
            from pyspark.sql import SparkSession

            active = None if self._options["remote"] or os.environ.get(REMOTE_VARIABLE) else SparkSession.getActiveSession()
            self._session = active or spark_session(**self._options)
            self._borrowed = active is not None
        return getattr(self._session, name)

    def stop(self) -> None:
        """Stop the session this opened (one it found active in the process is left running)."""
        if self._session is not None and not self._borrowed:
            self._session.stop()
        self._session = None


# Columns of a mapInArrow output, as (name, pyarrow type name): one list gives both schemas.
Columns = tuple[tuple[str, str], ...]
# What a task stages: per staging table, the mapInArrow body that makes its rows from the read's.
Outputs = dict[str, Callable[[Iterator[Any]], Iterator[Any]]]
_SPARK_TYPES = {"int64": "bigint", "int32": "int", "string": "string", "bool_": "boolean"}


def spark_ddl(columns: Columns) -> str:
    """The Spark schema string of ``columns``, e.g. ``"signal_id bigint, thing_id string"``."""
    return ", ".join(f"{name} {_SPARK_TYPES[kind]}" for name, kind in columns)


def arrow_schema(columns: Columns) -> Any:
    """The pyarrow schema of ``columns`` (inside Spark's Python workers)."""
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, kind)()) for name, kind in columns])


def record_batch(rows: list[dict[str, Any]], columns: Columns) -> Any:
    """Output rows as one Arrow batch of ``columns``."""
    import pyarrow as pa

    return pa.RecordBatch.from_pylist(rows, schema=arrow_schema(columns))


def record_batch_of_columns(values: tuple[list[Any], ...], columns: Columns) -> Any:
    """Output gathered a column at a time (one list per column of ``columns``) as one Arrow batch."""
    import pyarrow as pa

    schema = arrow_schema(columns)
    return pa.RecordBatch.from_arrays([pa.array(column, type=field.type) for column, field in zip(values, schema)],
                                      schema=schema)


def map_rows(batches: Iterator[Any], columns: Columns, each: Callable[[dict[str, Any]], Iterable[dict[str, Any]]]) -> Iterator[Any]:
    """The body of a ``mapInArrow``: every input row, as a dict, through ``each`` (zero or more
    output rows per row), out as batches of ``columns``."""
    for batch in batches:
        yield record_batch([out for row in batch.to_pylist() for out in each(row)], columns)


@dataclass(frozen=True)
class Postgres:
    """Where Spark reads and stages: a JDBC URL for the same database SQLAlchemy uses and its
    connection properties (user and password among them, never in the URL) for reads, and libpq's
    keywords for the Python workers that COPY staged rows in."""

    url: str
    properties: dict[str, str] = field(repr=False)  # repr=False: it holds the password
    workers: dict[str, str] = field(repr=False)

    @classmethod
    def from_database_url(cls, url: str) -> "Postgres":
        ledger = database_url(url)
        return cls(*ledger.jdbc(), ledger.for_workers())

    def options(self) -> dict[str, str]:
        return {"url": self.url, "driver": "org.postgresql.Driver", **self.properties}

    def read(self, spark: Any, query: str, *, partition_column: str | None = None,
             bounds: tuple[int, int] | None = None, partitions: int = 1) -> Any:
        """Read a query; partitioned on an integer column when bounds are given."""
        reader = spark.read.format("jdbc").options(**self.options()).option("fetchsize", "10000")
        if partition_column and bounds is not None and partitions > 1:
            return (
                reader.option("dbtable", f"({query}) AS q")
                .option("partitionColumn", partition_column)
                .option("lowerBound", str(bounds[0]))
                .option("upperBound", str(bounds[1] + 1))
                .option("numPartitions", str(partitions))
                .load()
            )
        return reader.option("query", query).load()

    def append(self, frame: Any, table: str) -> int:
        """Append ``frame``'s rows to a staging table (not atomic: the merge that follows is);
        how many. Each Python worker COPYs its partition in (about 7× the rows per second of
        Spark's JDBC writer, docs/stack-notes.md), in one transaction per partition."""
        from pyspark.sql import functions as F

        workers, columns = self.workers, tuple(frame.columns)
        staged = frame.mapInArrow(lambda batches: copy_batches(batches, workers, table, columns), "rows bigint")
        return int(staged.agg(F.sum("rows")).collect()[0][0] or 0)

    def stage_in_tasks(self, spark: Any, reads: list[str], columns: Columns, outputs: Outputs, run_id: str) -> None:
        """One Spark task per query of ``reads``: in its Python worker it COPYs the query's rows
        (``columns``, in the query's order) out of PostgreSQL, passes them through each of
        ``outputs`` (staging table → a ``mapInArrow`` body: Arrow batches in and out) and COPYs
        what comes out, tagged with ``run_id``, into that staging table, all in one transaction.
        The rows never pass through the JVM. (Not atomic: the merge that follows is.)"""
        workers = self.workers
        tasks = spark.range(0, len(reads), 1, len(reads))
        tasks.mapInArrow(lambda batches: _read_map_copy(batches, workers, reads, columns, outputs, run_id),
                         "rows bigint").collect()  # a row per task: no aggregation stage


def copy_batches(batches: Iterator[Any], connection: dict[str, str], table: str, columns: tuple[str, ...]) -> Iterator[Any]:
    """The body of :meth:`Postgres.append` in a Python worker: its batches into ``table``; one
    row, the count."""
    written = 0
    with _transaction(connection) as cursor:
        for batch in batches:
            written += _copy_in(cursor, batch, table, columns)
    yield _count(written)


def _read_map_copy(batches: Iterator[Any], connection: dict[str, str], reads: list[str], columns: Columns,
                   outputs: Outputs, run_id: str) -> Iterator[Any]:
    """The body of :meth:`Postgres.stage_in_tasks` in a Python worker, for the reads its
    partition numbers name; one row, how many rows it staged."""
    with _transaction(connection) as cursor:
        tasks = [task for batch in batches for task in batch.column(0).to_pylist()]
        yield _count(stage_reads(cursor, [reads[task] for task in tasks], columns, outputs, run_id))


def stage_reads(cursor: Any, reads: list[str], columns: Columns, outputs: Outputs, run_id: str) -> int:
    """What one task does, on ``cursor``'s transaction: COPY each query of ``reads`` out, pass
    its rows through each of ``outputs``, COPY what comes out, tagged with ``run_id``, into that
    staging table; how many rows it staged. Run by a Spark task's Python worker, or in the driver
    for work that fits one task (jobs.step.Step.stage_in_tasks)."""
    import pyarrow as pa

    written = 0
    for query in reads:
        rows = _copy_out(cursor, query, columns)
        for table, each in outputs.items():
            for out in each(iter(rows)):
                tagged = out.append_column("run_id", pa.array([run_id] * out.num_rows, pa.string()))
                written += _copy_in(cursor, tagged, table, tuple(tagged.schema.names))
    return written


@contextmanager
def _transaction(connection: dict[str, str]) -> Iterator[Any]:
    """A worker's own connection, one transaction on it (committed when the block ends without an
    error), and a cursor; the connection is closed either way."""
    import psycopg2

    conn = psycopg2.connect(**connection)
    try:
        with conn, conn.cursor() as cursor:
            yield cursor
    finally:
        conn.close()


def _copy_out(cursor: Any, query: str, columns: Columns) -> list[Any]:
    """A query's rows as Arrow batches of ``columns``, through COPY's CSV (NULL unquoted and
    empty, an empty string quoted: Arrow reads them apart)."""
    import io

    import pyarrow.csv as csv

    text = io.BytesIO()
    cursor.copy_expert(f"COPY ({query}) TO STDOUT WITH (FORMAT csv)", text)
    if not text.tell():
        return []
    text.seek(0)
    rows = csv.read_csv(
        text,
        read_options=csv.ReadOptions(column_names=[name for name, _ in columns]),
        convert_options=csv.ConvertOptions(column_types=arrow_schema(columns), null_values=[""],
                                           strings_can_be_null=True, quoted_strings_can_be_null=False,
                                           true_values=["t"], false_values=["f"]),
    )
    return rows.to_batches(max_chunksize=10_000)


def _copy_in(cursor: Any, batch: Any, table: str, columns: tuple[str, ...]) -> int:
    """One Arrow batch into ``table`` through COPY's CSV (Arrow's writer quotes every string and
    leaves NULL empty, as COPY reads them)."""
    import io

    import pyarrow.csv as csv
    from psycopg2 import sql

    if not batch.num_rows:
        return 0
    text = io.BytesIO()
    csv.write_csv(batch, text, csv.WriteOptions(include_header=False))
    text.seek(0)
    copy = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv)").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns)))
    cursor.copy_expert(copy, text)
    return batch.num_rows


def _count(rows: int) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_pydict({"rows": [rows]}, schema=pa.schema([("rows", pa.int64())]))
