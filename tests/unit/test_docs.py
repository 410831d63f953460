"""The documents against the code: every fact that drifts is either stated once or checked here.

Pure Python: it reads README.md, docs/*.md and the code's own lists (the pipeline's steps, the
reports' registry, the CLI's parser, the connection types, the roles the grants name, the
schema's tables, the settings the code reads) — no database, no broker, no Spark.
"""

from __future__ import annotations

import argparse
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest

from ackstore.ledger import objects
from tests.support.paths import ROOT

DOCS = ROOT / "docs"
README = ROOT / "README.md"

# The README's two commands, exactly as CI and the people who run them know them (issue 39).
DEMO_LINE = ("make demo    # installs into .venv/, creates the ledger, submits sample signals, runs the Airflow DAG "
             "once, prints what each step did and the settlement report")
TEST_LINE = ("make test    # installs into .venv/, makes sure PostgreSQL (127.0.0.1:5432) and RabbitMQ (127.0.0.1:5672) "
             "run and Mosquitto is installed, checks the import layers, runs the test suite")
TEST_COMMAND = ".venv/bin/python -m pytest -n 2 --dist loadfile"
README_MAX_LINES = 150

# Records of what was decided or measured at the time ("six steps then"): not held to today's counts.
RECORDS = {"decisions.md", "stack-notes.md"}
NUMBERS = {word: n for n, word in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}
TOP_LEVEL = ("ackstore", "jobs", "dags", "migrations", "benchmarks", "tests", "docs", "scripts", "deploy", "docker",
             "auditor")
PATH = re.compile(r"`((?:%s)/[^`\s]*)`" % "|".join(TOP_LEVEL))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def documents() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def every_document() -> list[Path]:
    return [README, *documents()]


def section(text: str, heading: str) -> str:
    """The text under the heading that starts with ``heading`` (any level), to the next heading of
    the same or a higher level."""
    match = re.search(rf"^(#+) {re.escape(heading)}.*$", text, re.MULTILINE)
    assert match, f"no heading {heading!r}"
    level = len(match.group(1))
    rest = text[match.end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.MULTILINE)
    return rest[:end.start()] if end else rest


def table_rows(text: str, header: str) -> list[list[str]]:
    """The rows of the first Markdown table whose header row starts with ``| header |``, as cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def counted(text: str, noun: str) -> list[int]:
    """The numbers written as words before ``noun`` ("seven steps")."""
    found = re.findall(rf"\b([A-Za-z]+) {noun}(?!\w)", text)
    return [NUMBERS[word.lower()] for word in found if word.lower() in NUMBERS]


def current_documents() -> list[Path]:
    return [path for path in every_document() if path.name not in RECORDS]


# --- the README -----------------------------------------------------------------------------------


def test_the_readme_is_a_front_door() -> None:
    lines = read(README).splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_the_readme_keeps_its_two_commands_and_the_makefile_runs_its_test_command() -> None:
    block = section(read(README), "Two commands on a fresh clone").split("```sh\n", 1)[1].split("```", 1)[0]
    assert block.splitlines() == [DEMO_LINE, TEST_LINE]
    makefile = read(ROOT / "Makefile")
    recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    venv = re.search(r"^PYTHON_VENV := (\S+)", makefile, re.MULTILINE).group(1)
    assert TEST_COMMAND in recipe.replace("$(PYTHON_VENV)", venv)
    assert "make test" in read(ROOT / ".ci" / "run")
    assert TEST_COMMAND in read(DOCS / "testing.md")


# --- the pipeline's steps -------------------------------------------------------------------------


def steps() -> list[str]:
    from jobs.pipeline import STEPS

    return list(STEPS)


def test_the_step_tables_list_every_step_and_no_other() -> None:
    pipeline = read(DOCS / "pipeline.md")
    assert [ticked(row[0])[0] for row in table_rows(pipeline, "step")] == steps()
    walk = section(read(DOCS / "architecture.md"), "A twin command through the pipeline")
    listed = re.findall(r"^\d+\. \*\*([^.*]+)\.\*\*", walk, re.MULTILINE)
    assert listed[0] == "Ingestion" and listed[1:] == steps()


def test_the_cli_offers_every_step() -> None:
    (action,) = [a for a in subparser("pipeline", "run")._actions if "--step" in a.option_strings]
    assert re.findall(r"\w+", action.help.split(":", 1)[1]) == steps()


def test_the_documents_count_the_steps_right() -> None:
    for path in current_documents():
        assert set(counted(read(path), "steps")) <= {len(steps())}, f"{path.name} miscounts the steps"
    assert counted(read(README), "steps"), "the README says how many steps there are"


# --- the reports ----------------------------------------------------------------------------------


def test_reports_md_lists_every_report_and_no_other() -> None:
    from ackstore.reporting.registry import REPORTS, WINDOWED_NAMES

    text = read(DOCS / "reports.md")
    assert [ticked(row[0])[0] for row in table_rows(text, "report")] == list(REPORTS)
    assert counted(text, r"reports read a \*\*window\*\*") == [len(WINDOWED_NAMES)]


# --- the command line -----------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    from ackstore.cli import build_parser

    return build_parser()


def children(node: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in node._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def commands(node: argparse.ArgumentParser | None = None, path: tuple[str, ...] = ()) -> dict[str, argparse.ArgumentParser]:
    """Every command that takes no further subcommand, by its words: "db upgrade", "submit", …"""
    node = parser() if node is None else node
    found: dict[str, argparse.ArgumentParser] = {}
    for name, child in children(node).items():
        found.update(commands(child, (*path, name)) if children(child) else {" ".join((*path, name)): child})
    return found


def subparser(*words: str) -> argparse.ArgumentParser:
    node = parser()
    for word in words:
        node = children(node)[word]
    return node


def options(node: argparse.ArgumentParser) -> set[str]:
    return {option for action in node._actions if not isinstance(action, argparse._HelpAction)
            for option in action.option_strings}


def cli_sections() -> dict[str, str]:
    """cli.md's sections, one per command: "### `ackstore WORDS`" → its text."""
    text = read(DOCS / "cli.md")
    parts = re.split(r"^### `ackstore ([a-z0-9 -]+)`\n", text, flags=re.MULTILINE)
    return {words: body.split("\n## ", 1)[0] for words, body in zip(parts[1::2], parts[2::2])}


def test_cli_md_has_a_section_for_every_command_and_no_other() -> None:
    assert set(cli_sections()) == set(commands())


@pytest.mark.parametrize("words", sorted(commands()))
def test_cli_md_states_every_option_of_the_command_and_no_other(words: str) -> None:
    body = cli_sections()[words]
    node = commands()[words]
    stated = {cell for row in re.findall(r"^\| (`--[a-z-]+`) \|", body, re.MULTILINE) for cell in ticked(row)}
    assert stated == options(node), f"ackstore {words}: the options in cli.md are not the parser's"
    for action in node._actions:  # a leaf command: no subparsers among them
        for choice in action.choices or ():
            assert f"`{choice}`" in body, f"ackstore {words}: {action.option_strings or action.dest} {choice!r}"


def test_cli_md_states_the_options_every_command_takes() -> None:
    shared = section(read(DOCS / "cli.md"), "What every command shares")
    assert all(f"`{option}" in shared for option in options(parser()))


# --- the connectors -------------------------------------------------------------------------------


def test_connectors_md_names_every_transport_and_connection_type() -> None:
    from ackstore.connectors import config

    text = read(DOCS / "connectors.md")
    for kind in children(subparser("connect")):
        assert f"ackstore connect {kind}" in text, kind
    for connection_type in (config.AMQP, config.AMQP10, config.MQTT, config.MQTT5, config.HTTP_PUSH):
        assert f"`{connection_type}`" in text, connection_type
    # every connector a broker feeds has its publisher; HTTP push has no sources to publish to
    assert set(children(subparser("publish"))) == set(children(subparser("connect"))) - {"http-push"}


# --- the roles ------------------------------------------------------------------------------------


def group_roles() -> set[str]:
    """The group roles, from their one list (grants.sql's blocks, read by ackstore.ledger.objects)."""
    return set(objects.group_roles())


def test_roles_md_lists_every_group_role_and_no_other() -> None:
    assert len(group_roles()) >= 5
    listed = {ticked(row[0])[0] for row in table_rows(read(DOCS / "roles.md"), "group role")}
    assert listed == group_roles()
    operating = section(read(DOCS / "operating.md"), "Who may write what")
    assert all(f"`{role}`" in operating for role in group_roles())


def test_the_documents_count_the_group_roles_right() -> None:
    for path in current_documents():
        assert set(counted(read(path), "group roles")) <= {len(group_roles())}, f"{path.name} miscounts the roles"


# --- links, the index, the tests named ------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = read(path)
    found: set[str] = set(re.findall(r'<a id="([^"]+)"', text))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", text, flags=re.DOTALL), re.MULTILINE):
        base = slug(heading)
        found.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return found


def test_every_relative_link_resolves() -> None:
    broken = []
    for path in every_document():
        for target in LINK.findall(read(path)):
            if re.match(r"^[a-z]+://", target):
                continue
            file, _, anchor = target.partition("#")
            resolved = path if not file else (path.parent / file).resolve()
            if not resolved.exists():
                broken.append(f"{path.name}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{path.name}: {target} (no such heading)")
    assert broken == []


@pytest.mark.parametrize("index", [DOCS / "README.md", README], ids=["docs/README.md", "README.md"])
def test_every_document_is_listed_in_the_index(index: Path) -> None:
    linked = {(index.parent / target.partition("#")[0]).resolve() for target in LINK.findall(read(index))}
    missing = [path.name for path in documents() if path.resolve() not in linked and path.resolve() != index.resolve()]
    assert missing == []


def test_every_path_the_documents_name_exists() -> None:
    missing = []
    for path in every_document():
        for named in PATH.findall(read(path)):
            named = named.split("::", 1)[0]  # a test of a file: the file
            if any(mark in named for mark in "<*…{") or named.endswith((".jsonl", ".key", ".pub")):
                continue  # a pattern or an example, not a file of the checkout
            if not (ROOT / named).exists():
                missing.append(f"{path.name}: {named}")
    assert missing == []


def test_every_decision_cited_exists() -> None:
    decided = anchors(DOCS / "decisions.md")
    for path in every_document():
        for number in re.findall(r"decisions #(\d+)", read(path)):
            assert f"d{number}" in decided, f"{path.name} cites decisions #{number}"


def test_the_decisions_areas_list_every_entry() -> None:
    text = read(DOCS / "decisions.md")
    for row in table_rows(text, "area"):
        area = re.search(r"\(#([\w-]+)\)", row[0]).group(1)
        listed: set[int | str] = set()
        for first, last in re.findall(r"(?<![A-Z\d])(\d+)(?:–(\d+))?", row[2]):
            listed |= set(range(int(first), int(last or first) + 1))
        listed |= set(re.findall(r"\b([A-Z]\d+)\b", row[2]))  # a placeholder, numbered when merged
        body = text.split(f"\n## {row[0].split(']')[0].strip('[')}\n", 1)[1].split("\n## ", 1)[0]
        entries = re.findall(r'<a id="d([A-Z]?\d+)"', body)
        assert listed == {int(n) if n.isdigit() else n for n in entries}, area


# --- architecture.md: where to find it, the layout, the data model --------------------------------


def test_where_to_find_answers_each_question_in_at_most_three_files() -> None:
    text = section(read(DOCS / "architecture.md"), "Where to find it")
    rows = table_rows(text, "question")
    assert len(rows) >= 4
    for question, answer, checked_by in rows:
        files = PATH.findall(answer)
        assert 1 <= len(files) <= 3, f"{question}: {files}"
        for file in [*files, *PATH.findall(checked_by)]:
            assert (ROOT / file).is_file(), f"{question}: {file}"
        for file, names in re.findall(r"`([^`]+)` \(((?:`\w+`(?:, )?)+)", answer):
            for name in ticked(names):
                assert re.search(rf"\b{name}\b", read(ROOT / file)), f"{question}: {name} not in {file}"


def layout_rows() -> dict[str, str]:
    text = section(read(DOCS / "architecture.md"), "Layout: the module map")
    return {row[0]: " | ".join(row) for row in table_rows(text, "path")}


def test_the_layout_names_every_folder_and_nothing_that_is_gone() -> None:
    rows = layout_rows()
    named = {path for first in rows for path in ticked(first)}
    assert all((ROOT / path).exists() for path in named), sorted(p for p in named if not (ROOT / p).exists())
    ignored = [line.strip().rstrip("/") for line in read(ROOT / ".gitignore").splitlines() if line.strip()]
    folders = {path.name for path in ROOT.iterdir() if path.is_dir() and not path.name.startswith(".")
               and not any(fnmatch(path.name, pattern) for pattern in ignored)}  # build/, spark-warehouse/, …
    assert folders <= {path.split("/")[0] for path in named}


@pytest.mark.parametrize("folder, pattern", [
    ("ackstore/rules", "*.py"), ("ackstore/ledger", "*.py"), ("ackstore/connectors", "*.py"),
    ("ackstore/reporting", "*.py"), ("ackstore/ui", "*.py"), ("ackstore/ledger/sql", "objects/*"),
    ("jobs", "*.py"), ("jobs/sql", "*.sql"), ("dags", "*.py"), ("migrations", "*.*"), ("scripts", "*.sh"),
    ("benchmarks", "*.py"),
])
def test_the_layout_row_of_a_folder_names_each_of_its_files(folder: str, pattern: str) -> None:
    row = layout_rows()[f"`{folder}/`"]
    unnamed = [path.name for path in (ROOT / folder).glob(pattern)
               if path.name != "__init__.py" and not re.search(rf"\b{re.escape(path.stem)}\b", row)]
    assert unnamed == []


def test_the_layout_names_the_newest_migration() -> None:
    newest = max(path.name[:4] for path in (ROOT / "migrations" / "versions").glob("[0-9]*.py"))
    assert f"`versions/0001`…`{newest}`" in layout_rows()["`migrations/`"]


def test_the_data_model_names_every_table() -> None:
    from ackstore.ledger.schema import metadata

    text = read(DOCS / "architecture.md")
    assert sorted(name for name in metadata.tables if f"`{name}`" not in text) == []


# --- settings, make targets, benchmarks -----------------------------------------------------------


def test_operating_md_states_every_setting_the_code_reads_and_no_other() -> None:
    read_by_code = {name for folder in ("ackstore", "jobs", "dags") for path in (ROOT / folder).rglob("*.py")
                    for name in re.findall(r"(?<![A-Z_])ACKSTORE_[A-Z0-9_]+[A-Z0-9]", read(path))}
    text = section(read(DOCS / "operating.md"), "Settings")
    assert {ticked(row[0])[0] for row in table_rows(text, "variable")} == read_by_code


def test_the_benchmarks_and_tests_own_variables_are_documented() -> None:
    everything = "".join(read(path) for path in every_document())
    for folder in ("benchmarks", "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            for name in re.findall(r"environ\.get\(\"(ACKSTORE_[A-Z0-9_]+)\"", read(path)):
                assert name in everything, f"{name} ({path.relative_to(ROOT)})"


def test_every_make_target_is_documented() -> None:
    everything = "".join(read(path) for path in every_document())
    targets = re.findall(r"^([a-z][\w-]*):", read(ROOT / "Makefile"), re.MULTILINE)
    assert targets and [t for t in targets if f"make {t}" not in everything] == []


def test_benchmarks_md_lists_every_benchmark_and_names_every_helper() -> None:
    text = read(DOCS / "benchmarks.md")
    listed = {ticked(row[0])[0] for row in table_rows(text, "benchmark")}
    modules = [path for path in (ROOT / "benchmarks").glob("*.py") if path.name != "__init__.py"]
    runnable = {f"benchmarks.{path.stem}" for path in modules if "__main__" in read(path)}
    assert listed == runnable
    helpers = [path.name for path in modules if f"benchmarks.{path.stem}" not in runnable]
    assert [name for name in helpers if f"`benchmarks/{name}`" not in text] == []


# --- the alert rules' runbooks --------------------------------------------------------------------


def test_every_alert_rule_has_a_runbook_section_in_operating_md() -> None:
    """Each rule of deploy/prometheus/alerts.yml (and of its template) says where its runbook is: a
    section of docs/operating.md that exists, and says what it means, what to look at, what to do."""
    import yaml

    text = read(DOCS / "operating.md")
    found = anchors(DOCS / "operating.md")
    for path in (ROOT / "deploy" / "prometheus" / "alerts.yml",):
        rules = [rule for group in yaml.safe_load(read(path))["groups"] for rule in group["rules"] if "alert" in rule]
        assert rules
        for rule in rules:
            file, _, anchor = rule["annotations"]["runbook_url"].partition("#")
            assert file == "docs/operating.md" and anchor == rule["alert"].lower(), rule["alert"]
            assert anchor in found, f"{rule['alert']}: no section #{anchor} in docs/operating.md"
            body = section(text, rule["alert"])
            assert all(part in body for part in ("*What it means.*", "*Look at*", "*Do:*")), rule["alert"]


# docs/http.md's paths, with a sample for each placeholder: each must be a route of the door's
# application for the methods its row names (the WebSocket's, its upgrade's GET), and every route
# must be some row's.
HTTP_SAMPLES = {"<thingId>": "org.acme:t-1", "<part>": "attributes/a", "<subject>": "ask", "<correlationId>": "c-1",
                "<subscriber>": "checker", "<token>": "t0k3n"}


def _http_rows() -> list[tuple[set[str], str]]:
    table = (DOCS / "http.md").read_text().split("## Paths", 1)[1].split("\n## ", 1)[0]
    rows = []
    for methods, path in re.findall(r"^\| ((?:`[A-Z]+` ?)+) \| `(/[^`]*)`", table, re.MULTILINE):
        for placeholder, sample in HTTP_SAMPLES.items():
            path = path.replace(placeholder, sample)
        rows.append((set(ticked(methods)), path))
    return rows


def test_http_md_states_every_route_of_the_door_and_no_other() -> None:
    from starlette.routing import Match

    from ackstore.doors.app import application
    from ackstore.ledger.database_url import DatabaseUrl
    from ackstore.rules.settings import Settings

    routes = application(DatabaseUrl.parse("postgresql://nobody@127.0.0.1:1/none"), Settings()).routes
    rows = _http_rows()
    assert len(rows) >= 8, rows  # the table was read
    used = set()
    for methods, path in rows:
        for method in methods:
            scope = {"type": "websocket" if path.startswith("/ws/") else "http", "path": path, "method": method}
            full = [route for route in routes if route.matches(scope)[0] is Match.FULL]
            assert full, f"http.md: {method} {path} is no route of the door"
            used.add(full[0].path)
    assert used == {route.path for route in routes}, "a route of the door that http.md does not state"
