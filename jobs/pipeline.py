"""The pipeline: six steps, in order. :func:`run_step` is the one call per step that both
``ackstore pipeline run --step NAME`` and the Airflow DAG's task ``NAME`` make, so the two
can never disagree.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from jobs import apply_twin, index_search, settle, sweep, validate, weak_acks
from jobs.settings import PipelineSettings

STEPS: dict[str, Callable[[Any, PipelineSettings], dict[str, Any]]] = {
    "apply_twin": apply_twin.run,
    "index_search": index_search.run,
    "weak_acks": weak_acks.run,
    "sweep": sweep.run,
    "validate": validate.run,
    "settle": settle.run,
}
ValidationFailed = validate.ValidationFailed


class UnknownStep(ValueError):
    """A step name that is not one of :data:`STEPS`."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(f"unknown step(s) {names}; the steps are {list(STEPS)}")

log = logging.getLogger("ackstore.pipeline")


def run_step(name: str, settings: PipelineSettings, spark: Any | None = None) -> dict[str, Any]:
    """Run one step and return its stats; log its counts.

    ``spark`` is the session to use; without one, the step opens one when it finds work (Spark
    Connect when ``$SPARK_REMOTE`` is set, else local) and stops it when done. Raises
    :class:`ValidationFailed` when the ``validate`` step finds the ledger broken.
    """
    if name not in STEPS:
        raise UnknownStep([name])
    started = time.perf_counter()
    own_session = spark is None
    if own_session:
        from jobs.spark import LazySession

        spark = LazySession(f"ackstore-{name}")
    try:
        stats = STEPS[name](spark, settings)
    finally:
        if own_session:
            spark.stop()
    described = ", ".join(f"{key}={value}" for key, value in counts(stats).items())
    log.info("%s run %s: %s (%.1f s with the session)", name, settings.run_id, described,
             time.perf_counter() - started)
    return stats


def run(spark: Any | None, settings: PipelineSettings, steps: tuple[str, ...] = tuple(STEPS)) -> dict[str, dict[str, Any]]:
    """Run ``steps`` in pipeline order on one session; the stats of each, by name. A failed
    validation stops the run there: nothing after it (``settle``) runs. Without a session, one
    is opened when the first step finds work (Spark Connect when ``$SPARK_REMOTE`` is set) and
    stopped at the end: what the DAG's task does."""
    unknown = [name for name in steps if name not in STEPS]
    if unknown:
        raise UnknownStep(unknown)
    if spark is None:
        from jobs.spark import LazySession

        session = LazySession("ackstore-pipeline")
        try:
            return run(session, settings, steps)
        finally:
            session.stop()
    done: dict[str, dict[str, Any]] = {}
    for name in (name for name in STEPS if name in steps):
        try:
            done[name] = run_step(name, settings, spark)
        except ValidationFailed as failed:
            failed.completed = dict(done)  # what ran before the gate closed, for the caller to show
            raise
    return done


def counts(stats: dict[str, Any]) -> dict[str, Any]:
    """The counts of a step's stats, without its timings and validation failures."""
    return {key: value for key, value in stats.items() if not key.endswith("seconds") and key != "failures"}
