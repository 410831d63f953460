"""The pipeline: seven steps, in order. :func:`run_step` is the one call per step that both
``ackstore pipeline run --step NAME`` and the pipeline's runs make, so the two can never
disagree. :func:`run` is one pass of every step; :func:`run_while_behind` is what the DAG's task
runs: passes while work keeps arriving, within the schedule's interval.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any, Callable, TypeVar

from jobs import apply_twin, index_search, seal, settle, sweep, validate, weak_acks
from jobs.settings import PipelineSettings
from jobs.step import shared_engines

STEPS: dict[str, Callable[[Any, PipelineSettings], dict[str, Any]]] = {
    "apply_twin": apply_twin.run,
    "index_search": index_search.run,
    "weak_acks": weak_acks.run,
    "sweep": sweep.run,
    "validate": validate.run,
    "settle": settle.run,
    "seal": seal.run,
}
ValidationFailed = validate.ValidationFailed


class UnknownStep(ValueError):
    """A step name that is not one of :data:`STEPS`."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(f"unknown step(s) {names}; the steps are {list(STEPS)}")

log = logging.getLogger("ackstore.pipeline")
T = TypeVar("T")


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
    stopped at the end: what ``ackstore pipeline run`` does."""
    unknown = [name for name in steps if name not in STEPS]
    if unknown:
        raise UnknownStep(unknown)
    if spark is None:
        return _on_a_lazy_session(lambda session: run(session, settings, steps))
    with shared_engines():  # the steps reuse one pool of connections
        return _steps(spark, settings, steps)


def _steps(spark: Any, settings: PipelineSettings, steps: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    done: dict[str, dict[str, Any]] = {}
    early: list[seal.EarlySeal] = []
    try:
        for name in (name for name in STEPS if name in steps):
            sealed_early: dict[str, Any] = {}
            if name == "seal" and early:  # the seal step seals what came after them
                sealed_early, early = seal.early_stats(early), []
            try:
                done[name] = {**run_step(name, settings, spark), **sealed_early}
            except ValidationFailed as failed:
                failed.completed = dict(done)  # what ran before the gate closed, for the caller to show
                raise
            if name in seal.EARLY_AFTER and "seal" in steps:
                early.append(seal.EarlySeal(settings))
    finally:
        for each in early:  # the run ended before its seal step: the threads end with it
            each.finish()
    return done


PASS_MARK = "#"  # pass k > 1 of a run records its steps as "<run id>#k" (Airflow's run ids hold no "#")


def run_while_behind(spark: Any | None, settings: PipelineSettings, within: float) -> dict[str, dict[str, dict[str, Any]]]:
    """Pass after pass of :func:`run` on one session, while the pass before found new work
    (:func:`found_work`) and fewer than ``within`` seconds have gone by since the first began:
    what arrived during a pass waits for the next pass, not for the next scheduled run, and no
    pass begins once the next run is due (the last may end up to a pass after it; that run then
    starts at once and carries on). Every pass is a whole run (each step idempotent, atomic,
    gated by validate); pass k > 1 runs as ``<run id>#k``. The stats of every pass, by its run id."""
    if spark is None:
        return _on_a_lazy_session(lambda session: run_while_behind(session, settings, within))
    with shared_engines():  # the passes reuse one pool of connections
        return _passes(spark, settings, within)


def _passes(spark: Any, settings: PipelineSettings, within: float) -> dict[str, dict[str, dict[str, Any]]]:
    started = time.monotonic()
    passes: dict[str, dict[str, dict[str, Any]]] = {}
    while True:
        run_id = settings.run_id if not passes else f"{settings.run_id}{PASS_MARK}{len(passes) + 1}"
        passes[run_id] = run(spark, replace(settings, run_id=run_id))
        if not found_work(passes[run_id]) or time.monotonic() - started >= within:
            log.info("run %s: %d pass(es) in %.1f s", settings.run_id, len(passes), time.monotonic() - started)
            return passes


def found_work(stats: dict[str, dict[str, Any]]) -> bool:
    """Whether a pass found anything new: commands to apply or requests to decide (everything
    else a pass does follows from those: index marks, results, settlements)."""
    return bool(stats.get("apply_twin", {}).get("commands") or stats.get("sweep", {}).get("decided"))


def _on_a_lazy_session(work: Callable[[Any], T]) -> T:
    """``work`` on a session opened when a step first finds work, and stopped afterwards."""
    from jobs.spark import LazySession

    session = LazySession("ackstore-pipeline")
    try:
        return work(session)
    finally:
        session.stop()


def counts(stats: dict[str, Any]) -> dict[str, Any]:
    """The counts of a step's stats, without its timings and validation failures."""
    return {key: value for key, value in stats.items() if not key.endswith("seconds") and key != "failures"}
