"""One pipeline run: every step once, in order — exactly the calls the Airflow DAG makes."""

from __future__ import annotations

from typing import Any, Callable

from jobs import apply_twin, index_search, sweep
from jobs.settings import PipelineSettings

STEPS: dict[str, Callable[[Any, PipelineSettings], dict[str, Any]]] = {
    "apply_twin": apply_twin.run,
    "index_search": index_search.run,
    "sweep": sweep.run,
}


def run(spark: Any, settings: PipelineSettings, steps: tuple[str, ...] = tuple(STEPS)) -> dict[str, dict[str, Any]]:
    """Run ``steps`` in pipeline order; the stats of each, by name."""
    unknown = [name for name in steps if name not in STEPS]
    if unknown:
        raise ValueError(f"unknown step(s) {unknown}; the steps are {list(STEPS)}")
    return {name: STEPS[name](spark, settings) for name in STEPS if name in steps}
