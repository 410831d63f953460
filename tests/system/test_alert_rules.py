"""The alert rules (deploy/prometheus/alerts.yml) and the sample scrape configuration, checked by
the machine's ``promtool`` (Debian's ``prometheus`` package, scripts/bootstrap.sh), and their
unit tests (alerts.test.yml) run by it: every rule has a case where it fires and one where it
must not — and each rule, made to fire always or never, fails those tests.

``promtool`` missing fails these tests: a skipped test would count as passing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.metrics_doc import series_names
from tests.support.paths import ROOT

PROMETHEUS = ROOT / "deploy" / "prometheus"
ALERTS = PROMETHEUS / "alerts.yml"
ALERTS_TEST = PROMETHEUS / "alerts.test.yml"
CONFIG = PROMETHEUS / "prometheus.yml"


def promtool() -> str:
    found = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
    assert found, "no promtool: install Debian's prometheus package (scripts/bootstrap.sh does)"
    return found


def run_promtool(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([promtool(), *map(str, args)], capture_output=True, text=True, timeout=120, cwd=ROOT)


def every_rule() -> list[dict]:
    """The alerting rules and the recording rules they read."""
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def rules() -> list[dict]:
    """The alerting rules."""
    return [rule for rule in every_rule() if "alert" in rule]


def recorded() -> dict[str, dict]:
    """The recording rules, by the series each records."""
    return {rule["record"]: rule for rule in every_rule() if "record" in rule}


def rule_names() -> list[str]:
    return [rule["alert"] for rule in rules()]


def unit_cases() -> list[dict]:
    """Every ``alert_rule_test`` entry of alerts.test.yml."""
    tests = yaml.safe_load(ALERTS_TEST.read_text())["tests"]
    return [case for test in tests for case in test.get("alert_rule_test", [])]


def test_promtool_checks_the_rules() -> None:
    result = run_promtool("check", "rules", ALERTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(every_rule())} rules found" in result.stdout


def test_promtool_checks_the_sample_configuration() -> None:
    result = run_promtool("check", "config", CONFIG)
    assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load(CONFIG.read_text())
    assert config["rule_files"] == ["alerts.yml"]
    assert {job["job_name"] for job in config["scrape_configs"]} == {"ackstore-ledger", "ackstore-connector"}


def test_the_unit_tests_of_the_rules_pass() -> None:
    result = run_promtool("test", "rules", ALERTS_TEST)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_expected_rules_are_there() -> None:
    assert set(rule_names()) >= {
        "AckstorePipelineNotSucceeding", "AckstoreOldestUnsettledTooOld", "AckstoreDeadLettersRising",
        "AckstoreConnectorDown", "AckstoreConnectorInOutage", "AckstoreValidationFailing",
        "AckstoreSealingBehind", "AckstoreArchiveBehind", "AckstoreLedgerExporterDown",
    }
    assert len(rule_names()) == len(set(rule_names())), "two rules of one name"


def test_every_rule_has_a_severity_a_summary_and_a_description() -> None:
    for rule in rules():
        assert rule.get("labels", {}).get("severity") in {"critical", "warning"}, rule["alert"]
        assert set(rule.get("annotations", {})) >= {"summary", "description"}, rule["alert"]


def test_every_rule_has_a_case_where_it_fires_and_one_where_it_does_not() -> None:
    cases = unit_cases()
    for name in rule_names():
        fires = [case for case in cases if case["alertname"] == name and case.get("exp_alerts")]
        silent = [case for case in cases if case["alertname"] == name and not case.get("exp_alerts")]
        assert fires, f"no case of alerts.test.yml expects {name} to fire"
        assert silent, f"no case of alerts.test.yml expects {name} not to fire"


def test_the_rules_use_only_documented_metrics_and_the_series_recorded_here() -> None:
    documented = series_names()
    assert "ackstore_dead_letters_total" in documented and "ackstore_received_to_decided_seconds_bucket" in documented
    for rule in every_rule():
        name = rule.get("alert") or rule["record"]
        used = set(re.findall(r"\backstore_[a-z_]+\b", rule["expr"]))
        assert used or re.search(r'\bup\{job="ackstore-(ledger|connector)"\}', rule["expr"]), name
        assert used <= documented, f"{name} uses {sorted(used - documented)}, not in docs/metrics.md"
        assert set(re.findall(r"\backstore:[a-z_:]+", rule["expr"])) <= set(recorded()), name
    metrics_doc = (ROOT / "docs" / "metrics.md").read_text()
    assert all(f"`{name}`" in metrics_doc for name in recorded()), "every recorded series is in docs/metrics.md"


def test_the_connectors_are_named_by_one_recording_rule_the_alert_and_the_dashboard_read() -> None:
    """The join that names a connector target by the connection it ran is spelled once (issue 50's
    review): the recording rule; the down alert and the dashboard read its series."""
    from tests.system.test_dashboard import expressions

    join = "last_over_time(ackstore_connector_start_timestamp_seconds"
    assert join in recorded()["ackstore:connector_up"]["expr"]
    [down] = [rule for rule in rules() if rule["alert"] == "AckstoreConnectorDown"]
    assert "ackstore:connector_up" in down["expr"] and join not in down["expr"]
    panels = [expression for _, expression in expressions()]
    assert any("ackstore:connector_up" in expression for expression in panels)
    assert not any(join in expression for expression in panels)
    assert sum(rule["expr"].count(join) for rule in every_rule()) == 1


def test_no_number_of_a_rule_is_written_in_the_template() -> None:
    """Every threshold, `for` and window is ackstore.rules.thresholds' (decisions #129): the template
    holds none — a duration or a number of seconds in a rule's expression or `for` is a placeholder."""
    from ackstore.reporting.alert_rules import TEMPLATE

    template = yaml.safe_load(re.sub(r"@\{(\w+)\}", r"PLACEHOLDER_\1", TEMPLATE.read_text()))
    for group in template["groups"]:
        for rule in group["rules"]:
            written = [*re.findall(r"(?<![\w.])\d+[smhdwy]?\b", rule["expr"]), *re.findall(r"\d", str(rule.get("for", "")))]
            assert set(written) <= {"0", "1"}, (rule.get("alert") or rule["record"], written)  # == 0, == 1, > 0, topk 1


@pytest.mark.parametrize("broken_as", ["vector(1)", "vector(1) == 0"], ids=["always", "never"])
def test_each_rule_made_to_fire_always_or_never_fails_its_unit_tests(tmp_path: Path, broken_as: str) -> None:
    """The unit tests can fail: with any one rule's expression replaced by one that always fires
    (its negative case catches it) or never does (its positive case), promtool fails them."""
    shutil.copy(ALERTS_TEST, tmp_path / ALERTS_TEST.name)
    document = yaml.safe_load(ALERTS.read_text())
    unnoticed = []
    for group in document["groups"]:
        for rule in group["rules"]:
            original = rule["expr"]
            rule["expr"] = broken_as
            (tmp_path / ALERTS.name).write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
            rule["expr"] = original
            if run_promtool("test", "rules", tmp_path / ALERTS_TEST.name).returncode == 0:
                unnoticed.append(rule["alert"])
    assert not unnoticed, f"made to fire {'always' if broken_as == 'vector(1)' else 'never'}, these still pass: {unnoticed}"
    (tmp_path / ALERTS.name).write_text(ALERTS.read_text())  # and the copy as it is passes
    result = run_promtool("test", "rules", tmp_path / ALERTS_TEST.name)
    assert result.returncode == 0, result.stdout + result.stderr


# --- the thresholds that follow the settings (issue 50, decisions #129) --------------------------------


def alert_rules(**settings: str) -> subprocess.CompletedProcess:
    """``ackstore alert-rules`` as an operator runs it, with these ACKSTORE_* settings."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ACKSTORE_")}
    return subprocess.run([str(Path(sys.executable).parent / "ackstore"), "alert-rules"], capture_output=True,
                          text=True, timeout=120, env={**env, **settings})


def test_the_shipped_rules_are_ackstore_alert_rules_for_the_default_settings() -> None:
    """One place for the thresholds: the shipped file is never edited by hand, it is rendered."""
    from ackstore.reporting.alert_rules import render
    from ackstore.rules.settings import Settings
    from ackstore.rules.thresholds import Thresholds

    assert render(Thresholds.of(Settings())) == ALERTS.read_text()
    done = alert_rules()
    assert done.returncode == 0, done.stderr
    assert done.stdout == ALERTS.read_text()


def test_the_thresholds_follow_the_settings(tmp_path: Path) -> None:
    """A 20-minute default timeout, a 1-hour maximum and a 7-day retention: the pipeline rule at half
    the default timeout, the unsettled one at the maximum + 5 min, the archive's at the retention
    + 2 days — rules promtool accepts."""
    done = alert_rules(ACKSTORE_DEFAULT_TIMEOUT="20m", ACKSTORE_MAX_TIMEOUT="1h", ACKSTORE_RETENTION_DAYS="7")
    assert done.returncode == 0, done.stderr
    rendered = {rule["alert"]: rule for group in yaml.safe_load(done.stdout)["groups"] for rule in group["rules"]
                if "alert" in rule}
    assert "last_success_timestamp_seconds > 600\n" in rendered["AckstorePipelineNotSucceeding"]["expr"]
    assert rendered["AckstoreOldestUnsettledTooOld"]["expr"] == "ackstore_oldest_unsettled_age_seconds > 3900"
    assert rendered["AckstoreArchiveBehind"]["expr"].endswith("> 777600")  # (7 + 2) days
    assert "ACKSTORE_DEFAULT_TIMEOUT=20m, ACKSTORE_MAX_TIMEOUT=1h, ACKSTORE_RETENTION_DAYS=7" in done.stdout
    (tmp_path / "alerts.yml").write_text(done.stdout)
    checked = run_promtool("check", "rules", tmp_path / "alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    refused = alert_rules(ACKSTORE_DEFAULT_TIMEOUT="five minutes")
    assert refused.returncode == 1 and json.loads(refused.stdout)["status"] == 400, refused.stdout + refused.stderr


def test_the_pipeline_alert_pages_before_requests_that_name_no_timeout_time_out() -> None:
    """At the default timeout (5 min) the pipeline's alert fires at most 4.5 minutes after the last
    pass (threshold, for, a scrape and an evaluation): alerts.test.yml shows it at 4 minutes."""
    from ackstore.rules.settings import Settings
    from ackstore.rules.thresholds import Thresholds

    thresholds = Thresholds.of(Settings())
    assert thresholds.pipeline_pages_within() < thresholds.default_timeout_seconds == 300
    [rule] = [rule for rule in rules() if rule["alert"] == "AckstorePipelineNotSucceeding"]
    assert f"> {thresholds.pipeline_seconds}\n" in rule["expr"] and rule["for"] == "1m"


def test_every_rule_has_a_runbook_in_operating_md() -> None:
    for rule in rules():
        assert rule["annotations"]["runbook_url"] == f"docs/operating.md#{rule['alert'].lower()}", rule["alert"]
