"""The ``ackstore`` command line, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ackstore.ledger.store import AckStore
from tests.support.cli import run
from tests.support.ledger import ack_message, snapshot, twin_command
from tests.support.logins import as_login, logins  # noqa: F401  (logins: a fixture, a login per group role)
from tests.support.scraped import samples as exposition_samples


def test_help_explains_the_commands() -> None:
    code, text = run("--help")
    assert code == 0
    for word in ("submit", "declare", "ack", "result", "db", "demo", "pipeline", "search", "exit status",
                 "ACKSTORE_DATABASE_URL"):
        assert word in text


def test_round_trip_with_exit_codes(store: AckStore, database_url: str, tmp_path: Path) -> None:
    assert run("db", "upgrade", url=database_url)[0] == 0
    assert run("declare", "auditor", "org:audit", url=database_url) == (0, {"status": 204})

    command = tmp_path / "command.json"
    command.write_text(json.dumps(twin_command(requested_acks=["org:audit"], correlation_id="c-cli")))
    assert run("submit", str(command), "--source", "cli-test", "--message-id", "1", url=database_url) == (
        0,
        {"status": 202, "correlationId": "c-cli"},
    )
    code, answer = run("ack", "auditor", "-", url=database_url, stdin=json.dumps(ack_message("c-cli", "org:audit")).encode())
    assert (code, answer) == (0, {"status": 204})
    assert run("result", "c-cli", url=database_url) == (3, {"correlationId": "c-cli", "decided": False})
    code, state = run("show", "c-cli", "--json", url=database_url)
    assert code == 0 and state["acks"][0]["disposition"] == "counted"


def test_error_answers_exit_non_zero_and_change_nothing(store: AckStore, database_url: str) -> None:
    before = snapshot(store.engine)
    code, answer = run("submit", "-", url=database_url, stdin=b'{"topic": oops')
    assert code == 1 and answer["status"] == 400 and answer["error"] == "json.invalid"
    code, answer = run("declare", "x", "'; drop table signals; --", url=database_url)
    assert code == 1 and answer["error"] == "acknowledgement:label.invalid"
    assert run("result", "unknown", url=database_url)[0] == 1
    code, answer = run("search", "and(eq(attributes/a,1)", url=database_url)
    assert code == 1 and answer["error"] == "rql.expression.invalid" and "position 23" in answer["message"]
    assert snapshot(store.engine) == before


@pytest.mark.parametrize(("correlation_id", "error"), [("unknown", "acknowledgement:request.notfound"),
                                                      ("x" * 3000, "header.invalid")])
def test_show_and_result_answer_an_unknown_id_alike(store: AckStore, database_url: str, correlation_id: str,
                                                    error: str) -> None:
    """``show`` (table or --json) gives the 404 that ``result`` gives (400 for an id no signal
    could have), not a plain line or null."""
    answers = [run(command, correlation_id, *flags, url=database_url)
               for command, flags in (("result", ()), ("show", ()), ("show", ("--json",)))]
    assert all(code == 1 for code, _ in answers), answers
    assert answers[0][1]["error"] == error
    assert answers[1][1] == answers[0][1] == answers[2][1]


def test_search_on_an_empty_index(store: AckStore, database_url: str) -> None:
    assert run("search", "exists(attributes)", "--namespace", "org.acme", url=database_url) == (
        0, {"status": 200, "items": []}
    )


def test_usage_errors_exit_2(database_url: str) -> None:
    assert run("submit", "--api", "grpc", "-")[0] == 2
    status, output = run("pipeline", "run", "--step", "nope", url=database_url)
    assert status == 2 and "unknown step(s) ['nope']" in output


@pytest.mark.spark
@pytest.mark.slow
def test_demo_runs_the_dag_through_airflow_on_the_embedded_server(tmp_path: Path, own_mosquitto, own_amqp10) -> None:
    env = {"ACKSTORE_HOME": str(tmp_path / "home"), "ACKSTORE_DATABASE_URL": "",  # brokers of the test's own
           "ACKSTORE_DEMO_MQTT_URL": own_mosquitto.url, "ACKSTORE_DEMO_AMQP10_URL": own_amqp10.amqp10_url}
    completed = subprocess.run(
        [sys.executable, "-m", "ackstore.cli", "demo"], capture_output=True, timeout=600, env={**os.environ, **env}
    )
    output = completed.stdout.decode()
    assert completed.returncode == 0, completed.stderr.decode()[-3000:]
    assert f"data in {tmp_path / 'home' / 'pgdata'}" in output  # the embedded server, not 127.0.0.1:5432
    told = output.split("== what the first requester is told (the thing created)")[1]
    assert told.lstrip().startswith('{\n  "status": 201')
    second = output.split("== what the second requester is told (the modify, its acks in time)")[1].split("==")[0]
    assert '"status": 200' in second and all(label in second for label in ("twin-persisted", "search-persisted", "demo:audit"))
    assert '"org.acme:lamp-1"' in output.split("== search")[1]
    over_http = output.split("== the HTTP request's answer: ")[1].split("\n==")[0]  # held, or read at its Location
    assert over_http.startswith("201") or ("202" in over_http and ": 201, " in over_http), over_http
    refused = output.split("acknowledges as demo-auditor: refused")[1].split("==")[0]  # decisions #97
    assert '"status": 403' in refused and "acknowledgement:subscriber.forbidden" in refused
    assert "airflow dags test exited 0" in output
    steps = output.split("== what each step did")[1].split("==")[0]
    lines = steps.strip().splitlines()[1:]
    seven = ["apply_twin", "index_search", "weak_acks", "sweep", "validate", "settle", "seal"]
    assert [line.split()[0] for line in lines] == seven * (len(lines) // 7) and lines  # one pass, or more
    assert [line.endswith(f"(pass {n // 7 + 1})") for n, line in enumerate(lines)] == [n >= 7 for n in range(len(lines))]
    assert "manual__" in steps  # a run Airflow made
    weak = output.split("== the weak ack of")[1].split("==")[0]
    assert '"weak": true' in weak and '"status": 200' in weak
    assert '"on": true' in output.split("== the live message's requester")[1].split("==")[0]
    assert '"status": 408' in output.split("== the timed-out command")[1].split("==")[0]
    assert "attempt 2 opened, waiting for a decision: True" in output
    rabbitmq = "the RabbitMQ connector settles its message on the broker" in output
    assert rabbitmq or "RabbitMQ source skipped" in output
    settled_by_puback = output.split("the MQTT connector settles its message on the broker (PUBACK)")[1].split("==")[0]
    assert '"carried out": {\n    "ack": 1' in settled_by_puback
    accepted = output.split("the AMQP 1.0 connector settles its message on the broker (accepted)")[1].split("==")[0]
    assert '"carried out": {\n    "ack": 1' in accepted
    report = output.split("Settlement status per source")[1]
    assert "demo-amqp" in report and "redeliver" in report and (not rabbitmq or "demo-rabbitmq" in report)
    assert "demo-mqtt" in report and "demo-amqp10" in report
    for name in ("latency", "watermarks", "late-acks"):
        assert f"== ackstore report {name} --since 1h" in output
    late = output.split("== ackstore report late-acks")[1]
    assert "demo-timed-out" in late and "408" in late and "yes" in late  # in time, it would have answered 200
    watermarks = output.split("== ackstore report watermarks")[1].split("== ackstore report")[0]
    assert "persisted" in watermarks  # the redelivered command's second attempt: applied once, undecided
    timeline = output.split("== the timeline of the redelivered command")[1]
    checkpoints = ("received", "attempt opened", "ack demo:audit", "applied", "indexed", "decided", "validated",
                   "settlement decided", "carried out", "redeliver")
    assert all(checkpoint in timeline for checkpoint in checkpoints), timeline
    # last, the metric lines that matter, as a scrape of the ledger's exporter serves them
    scraped = output.split("== what Prometheus would scrape (ackstore metrics)\n")[1].split("\n(all of them:")[0]
    assert "== ackstore report late-acks" in output.split("== what Prometheus would scrape")[0]
    samples = exposition_samples("\n".join(line.strip() for line in scraped.splitlines()) + "\n")
    assert {name for name, _ in samples} == {
        "ackstore_signals_stored_total", "ackstore_requests_decided_total", "ackstore_settlement_decisions_total",
        "ackstore_oldest_unsettled_age_seconds", "ackstore_queue_pending", "ackstore_seal_last_number",
        "ackstore_seal_last_timestamp_seconds", "ackstore_ledger_up"}, scraped
    assert samples[("ackstore_ledger_up", ())] == 1 and samples[("ackstore_seal_last_number", ())] >= 1
    assert samples[("ackstore_signals_stored_total", (("channel", "twin"), ("source", "demo-amqp")))] == 1
    assert samples[("ackstore_signals_stored_total", (("channel", "live"), ("source", "api")))] == 1  # the question
    assert samples[("ackstore_requests_decided_total", (("source", "api"), ("status_class", "408")))] == 1
    assert samples[("ackstore_settlement_decisions_total", (("decision", "redeliver"), ("source", "demo-amqp")))] == 1
    assert ("ackstore_oldest_unsettled_age_seconds", (("source", "demo-amqp"),)) in samples  # attempt 2, undecided
    assert {dict(labels)["queue"] for name, labels in samples if name == "ackstore_queue_pending"} == {
        "apply", "index", "decide", "validate", "settle", "carry_out"}


# --- answers in Ditto's shape, not tracebacks (issue 37, part 5) --------------------------------

EXPORT_TARGETS = [
    ("", "it names no directory (the name is empty or blank)"),  # was the working folder (issue 50)
    (" ", "it names no directory (the name is empty or blank)"),
    ("/etc/passwd", "it exists and is not a directory"),
    ("/dev/null", "it exists and is not a directory"),
    ("/etc/passwd/export", "a part of its path is not a directory"),
    ("{tmp}/a-file", "it exists and is not a directory"),
    ("{tmp}/a-file/export", "a part of its path is not a directory"),
]


@pytest.mark.parametrize(("target", "why"), EXPORT_TARGETS, ids=[target for target, _ in EXPORT_TARGETS])
def test_export_to_a_target_that_is_no_directory_is_a_400_saying_why(store: AckStore, database_url: str,
                                                                     tmp_path: Path, target: str, why: str) -> None:
    (tmp_path / "a-file").write_text("kept\n")
    path = target.replace("{tmp}", str(tmp_path))
    code, answer = run("export", path, url=database_url, cwd=str(tmp_path))  # the working folder: the test's
    assert code == 1, answer
    assert (answer["status"], answer["error"]) == (400, "ledger:export.directory.invalid")
    assert f"'{path}' cannot be used: {why}." in answer["message"] and answer["description"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"] and (tmp_path / "a-file").read_text() == "kept\n"


def test_export_makes_a_new_directory_with_its_parents(store: AckStore, database_url: str, tmp_path: Path) -> None:
    code, answer = run("export", str(tmp_path / "new" / "export"), url=database_url)
    assert (code, answer["status"]) == (0, 200), answer
    assert sorted(p.name for p in (tmp_path / "new" / "export").iterdir()) == [
        "export.json", "rows.jsonl", "seals.jsonl", "tables.json"]


# A login may run only what its group role grants (docs/roles.md): the reporter's login, say, may
# not search, archive or write; PostgreSQL's "permission denied" is a 403 naming login and object.
# (PostgreSQL names the first object refused: a table, a function; which one is the SQL's business.)
REFUSED = [
    ("ackstore_reporter", ["search", "exists(attributes)"]),
    ("ackstore_reporter", ["archive", "--retention-days", "0", "--root", "{tmp}"]),
    ("ackstore_reporter", ["declare", "app", "app:done"]),
    ("ackstore_ingest", ["archive", "--retention-days", "0", "--root", "{tmp}"]),
    ("ackstore_ingest", ["report", "audit"]),
    ("ackstore_ingest", ["connection", "reserve", "plant-a", "--login", "{ingest}"]),  # an operator's (issue 50)
    ("ackstore_reporter", ["connection", "reserve", "plant-a", "--login", "{ingest}"]),
]


@pytest.mark.parametrize(("group", "command"), REFUSED, ids=[f"{g} {c[0]}" for g, c in REFUSED])
def test_a_command_the_logins_role_may_not_run_is_a_403_naming_what_it_lacks(
    store: AckStore, database_url: str, logins, tmp_path: Path, group: str, command: list[str]
) -> None:
    before = snapshot(store.engine)
    given = {"{tmp}": str(tmp_path), "{ingest}": logins["ackstore_ingest"]}
    code, answer = run(*(given.get(arg, arg) for arg in command), url=as_login(database_url, logins[group]))
    assert code == 1, answer
    assert (answer["status"], answer["error"]) == (403, "database.permission.denied"), answer
    assert f"<{logins[group]}> lacks a privilege this command needs: permission denied for " in answer["message"]
    assert "docs/roles.md" in answer["description"]
    assert snapshot(store.engine) == before


@pytest.mark.parametrize("name, value", [("ACKSTORE_PARTITIONS", "four"), ("ACKSTORE_MAX_ATTEMPTS", "0"),
                                         ("ACKSTORE_LOCK_TIMEOUT_MS", "1.5s")])
def test_a_setting_that_is_no_whole_number_is_answered_not_a_traceback(store: AckStore, database_url: str,
                                                                       name: str, value: str) -> None:
    code, answer = run("pipeline", "run", url=database_url, env={name: value})
    assert code == 1 and isinstance(answer, dict), answer
    assert (answer["status"], answer["error"]) == (400, "ackstore:setting.invalid")
    assert f"<{name}>" in answer["message"] and answer["description"]


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "1e9"])
def test_a_retention_that_is_no_number_of_days_stops_every_step_with_an_answer(store: AckStore, database_url: str,
                                                                              value: str) -> None:
    """Every step reads the pipeline's settings, so a bad $ACKSTORE_RETENTION_DAYS is refused by
    ``pipeline run`` too, not only by ``archive`` (it was a ValueError traceback, issue 40's note)."""
    before = snapshot(store.engine)
    code, answer = run("pipeline", "run", url=database_url, env={"ACKSTORE_RETENTION_DAYS": value})
    assert code == 1 and isinstance(answer, dict), answer
    assert (answer["status"], answer["error"]) == (400, "archive:retention.invalid"), answer
    assert "<ACKSTORE_RETENTION_DAYS>" in answer["message"] and answer["description"]
    assert snapshot(store.engine) == before


def test_an_operator_reserves_a_connection_for_the_login_its_connector_runs_as(store: AckStore, database_url: str,
                                                                              logins) -> None:
    """`ackstore connection reserve` (issue 50): the one way an ingest login comes to own a connection."""
    ingest, reporter = logins["ackstore_ingest"], logins["ackstore_reporter"]
    assert run("connection", "reserve", "plant-a", "--login", ingest, url=database_url) == (0, {"status": 204})
    assert run("connection", "reserve", "plant-a", "--login", ingest, url=database_url) == (0, {"status": 204})
    refused = {"another login": (["plant-a", "--login", "postgres"], 409, "connectivity:connection.conflict"),
               "no ingest login": (["plant-b", "--login", reporter], 400, "connectivity:connection.login.invalid"),
               "no login at all": (["plant-b", "--login", "nobody-at-all"], 400, "connectivity:connection.login.invalid"),
               "the CLI's source": (["cli", "--login", ingest], 400, "connectivity:connection.configuration.invalid"),
               "an empty id": (["", "--login", ingest], 400, "json.invalid")}
    for case, (words, status, error) in refused.items():
        code, answer = run("connection", "reserve", *words, url=database_url)
        assert (code, answer["status"], answer["error"]) == (1, status, error), case
    code, answer = run("submit", "-", "--source", "plant-a", url=as_login(database_url, ingest),
                       stdin=json.dumps(twin_command(correlation_id="c-reserved")).encode())
    assert (code, answer) == (0, {"status": 202, "correlationId": "c-reserved"})
