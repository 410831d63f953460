"""The cost model's arithmetic (benchmarks/cost_model.py) and how a step's rows become Spark
tasks (jobs/step.py): the two things the fixed-and-marginal figures of issue 40 rest on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.cost_model import fit
from jobs.settings import MAX_ROWS_PER_TASK, MIN_ROWS_PER_TASK
from jobs.step import tasks_for


def test_a_line_through_exact_points_is_found_exactly() -> None:
    line = fit([(0, 0.5), (1000, 0.6), (4000, 0.9)])
    assert line.fixed == pytest.approx(0.5) and line.marginal == pytest.approx(1e-4) and line.r2 == pytest.approx(1)
    assert line.at(10_000) == pytest.approx(1.5)


def test_noise_lowers_r2_and_one_size_gives_a_flat_line() -> None:
    assert fit([(0, 1.0), (10, 3.0), (20, 2.0), (30, 4.0)]).r2 < 0.9
    flat = fit([(500, 1.0), (500, 3.0)])
    assert (flat.fixed, flat.marginal) == (2.0, 0.0)
    with pytest.raises(ValueError):
        fit([])


@given(st.floats(0, 10), st.floats(0, 1e-3), st.lists(st.integers(0, 10**6), min_size=2, unique=True))
def test_the_fit_recovers_any_line(fixed: float, marginal: float, sizes: list[int]) -> None:
    line = fit([(n, fixed + marginal * n) for n in sizes])
    assert line.fixed == pytest.approx(fixed, abs=1e-6) and line.marginal == pytest.approx(marginal, abs=1e-9)


@pytest.mark.parametrize(
    ("rows", "partitions", "tasks"),
    [
        (0, 4, 1),                                  # nothing: still one task (never asked for, but safe)
        (1, 4, 1),                                  # a small pass pays one task's fixed cost, not four
        (MIN_ROWS_PER_TASK, 4, 1),
        (MIN_ROWS_PER_TASK + 1, 4, 2),              # then one more per MIN_ROWS_PER_TASK …
        (3 * MIN_ROWS_PER_TASK, 4, 3),
        (1_000_000, 4, 4),                          # … up to the parallelism asked for
        (1_000_000, 1, 4),                          # but no task holds more than MAX_ROWS_PER_TASK
        (MAX_ROWS_PER_TASK * 10 + 1, 4, 11),
        (50_000, 1, 1),
    ],
)
def test_a_steps_rows_are_split_into_tasks_by_size(rows: int, partitions: int, tasks: int) -> None:
    assert tasks_for(rows, partitions) == tasks


@given(st.integers(0, 10**8), st.integers(1, 64))
def test_no_task_holds_more_than_its_maximum_and_none_is_idle_beyond_the_minimum(rows: int, partitions: int) -> None:
    tasks = tasks_for(rows, partitions)
    assert tasks >= 1 and -(-rows // tasks) <= MAX_ROWS_PER_TASK
    assert tasks == 1 or rows > (tasks - 1) * MIN_ROWS_PER_TASK
