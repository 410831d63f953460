"""What a run wrote, per command (benchmarks/written.py): the figure issue 52's design is judged
by, so its arithmetic is checked here against counters made up by hand."""

from __future__ import annotations

from benchmarks.written import Written, per_command


def test_each_changed_table_is_a_line_per_command_and_sealed_tables_sum_to_the_facts() -> None:
    before = {"signals": Written(0, 0, 0, 8192), "queue_apply": Written(0, 0, 0, 0), "untouched": Written(5, 0, 0, 100)}
    after = {"signals": Written(1000, 0, 0, 408_192), "queue_apply": Written(1000, 0, 1000, 16_384),
             "request_results": Written(1000, 500, 0, 200_000), "untouched": Written(5, 0, 0, 100)}

    lines = per_command(before, after, 1000, ["signals", "request_results"])

    assert lines[1:4] == [
        "queue_apply                     1.00     0.00     1.00          16",
        "request_results *               1.00     0.50     0.00         200",
        "signals *                       1.00     0.00     0.00         400",
    ]
    assert lines[4] == "all tables                      3.00     0.50     1.00         616"
    assert lines[5] == "sealed facts (*) a command: 2.00"
    assert not any(line.startswith("untouched") for line in lines)


def test_a_table_new_since_the_first_snapshot_counts_from_zero() -> None:
    lines = per_command({}, {"acks": Written(10, 0, 0, 4096)}, 10, ["acks"])
    assert lines[1].startswith("acks *") and lines[-1] == "sealed facts (*) a command: 1.00"
