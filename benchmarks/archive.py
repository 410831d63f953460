"""Benchmark: sealing, verifying and archiving a ledger, and what the archive takes off the hot tables.

    python -m benchmarks.archive --commands 200000

Generates N twin modify commands (as benchmarks.pipeline does), runs the pipeline without its
seal step, then times, on the same ledger: the seal (facts/s), `verify` recomputing every leaf in
Python (rows/s), the archive job with a retention of 0 (rows/s: read through JDBC, written as
Parquet, read back with every seal's root recomputed, deleted), and `verify` again, now reading
the archive's Parquet. Prints the hot fact tables' size (with their indexes and TOAST, after
VACUUM) before and after the archive, and the archive's size on disk.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from sqlalchemy import text

from ackstore.ledger import seals, verify
from ackstore.ledger.database import make_engine
from ackstore.ledger.schema import SEALED_TABLES
from benchmarks.pipeline import DEFAULT_SERVER, fresh_database, generate

HOT = (*(table.name for table in SEALED_TABLES), "seal_leaves")


def hot_size(url: str) -> int:
    """Bytes of the fact tables and the seals' leaves, indexes and TOAST included, after VACUUM."""
    engine = make_engine(url)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f"VACUUM {', '.join(HOT)}"))
        size = conn.execute(text("SELECT sum(pg_total_relation_size(c)) FROM unnest(CAST(:t AS regclass[])) c"),
                            {"t": list(HOT)}).scalar_one()
    engine.dispose()
    return int(size)


def disk(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.archive", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commands", type=int, default=200_000)
    parser.add_argument("--server", default=os.environ.get("ACKSTORE_BENCH_SERVER", DEFAULT_SERVER))
    args = parser.parse_args(argv)

    from jobs import archive, pipeline
    from jobs.settings import PipelineSettings
    from jobs.spark import spark_session

    n = args.commands
    with fresh_database(args.server, "archive") as url, tempfile.TemporaryDirectory() as folder:
        generate(url, n, max(1, n // 10))
        spark = spark_session("ackstore-bench-archive", cores=os.cpu_count() or 2)
        settings = PipelineSettings(database_url=url, partitions=4, archive_root=str(Path(folder) / "archive"),
                                    retention_days=0)
        pipeline.run(spark, settings, tuple(step for step in pipeline.STEPS if step != "seal"))
        engine = make_engine(url)
        started = time.perf_counter()
        sealed = seals.seal(engine)
        sealing = time.perf_counter() - started
        facts = sealed.leaves
        started = time.perf_counter()
        checked = verify.verify(engine, None)
        verifying = time.perf_counter() - started
        assert checked.ok and checked.facts == facts, [f.line() for f in checked.findings]
        before = hot_size(url)
        started = time.perf_counter()
        stats = archive.run(spark, settings)
        archiving = time.perf_counter() - started
        assert stats["rows"] == facts, stats
        after = hot_size(url)
        started = time.perf_counter()
        checked = verify.verify(engine, None)
        verifying_archive = time.perf_counter() - started
        assert checked.ok and checked.facts == facts, [f.line() for f in checked.findings]
        archived = disk(Path(folder) / "archive")
        engine.dispose()
        spark.stop()

    print(f"commands={n:,} facts={facts:,}")
    print(f"seal                     {sealing:7.1f} s {facts / sealing:12,.0f} facts/s")
    print(f"verify (hot)             {verifying:7.1f} s {facts / verifying:12,.0f} rows/s")
    print(f"archive                  {archiving:7.1f} s {facts / archiving:12,.0f} rows/s   "
          + ", ".join(f"{k}={v}" for k, v in stats.items() if k.endswith("seconds")))
    print(f"verify (archived)        {verifying_archive:7.1f} s {facts / verifying_archive:12,.0f} rows/s")
    print(f"hot fact tables          {before / 2**20:9.1f} MiB before, {after / 2**20:.1f} MiB after "
          f"({after / before:.1%}); the archive {archived / 2**20:.1f} MiB of Parquet")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
