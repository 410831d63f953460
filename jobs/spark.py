"""The Spark side of the jobs: the session, and JDBC reads and staging writes.

Only the DataFrame API is used, so every job runs on a local session and on Spark Connect
(``SPARK_REMOTE=sc://host:15002``) alike.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import make_url

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


# Columns of a mapInArrow output, as (name, pyarrow type name): one list gives both schemas.
Columns = tuple[tuple[str, str], ...]
_SPARK_TYPES = {"int64": "bigint", "int32": "int", "string": "string", "bool_": "boolean"}


def spark_ddl(columns: Columns) -> str:
    """The Spark schema string of ``columns``, e.g. ``"signal_id bigint, thing_id string"``."""
    return ", ".join(f"{name} {_SPARK_TYPES[kind]}" for name, kind in columns)


def arrow_schema(columns: Columns) -> Any:
    """The pyarrow schema of ``columns`` (inside Spark's Python workers)."""
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, kind)()) for name, kind in columns])


@dataclass(frozen=True)
class Jdbc:
    """Where Spark reads and writes: a JDBC URL for the same database SQLAlchemy uses."""

    url: str
    user: str
    password: str | None

    @classmethod
    def from_sqlalchemy_url(cls, url: str) -> "Jdbc":
        parsed = make_url(url)
        if not parsed.host:
            raise ValueError(
                f"Spark reaches PostgreSQL over TCP only; {parsed.render_as_string()} has no host "
                "(set ACKSTORE_DATABASE_URL to a postgresql://user@host:port/db URL)"
            )
        # stringtype=unspecified lets text columns land in jsonb; batched inserts are rewritten
        # into multi-row INSERTs (stack-notes.md).
        jdbc_url = (
            f"jdbc:postgresql://{parsed.host}:{parsed.port or 5432}/{parsed.database}"
            "?stringtype=unspecified&reWriteBatchedInserts=true"
        )
        return cls(jdbc_url, parsed.username or "postgres", parsed.password)

    def options(self) -> dict[str, str]:
        opts = {"url": self.url, "user": self.user, "driver": "org.postgresql.Driver"}
        if self.password:
            opts["password"] = self.password
        return opts

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

    def append(self, frame: Any, table: str) -> None:
        """Append to a staging table (not atomic: the merge that follows is)."""
        (
            frame.write.format("jdbc")
            .options(**self.options())
            .option("dbtable", table)
            .option("batchsize", "10000")
            .mode("append")
            .save()
        )
