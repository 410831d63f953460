"""Seals (issue 28, decisions #101): every fact belongs to one seal; a sealed row never changes;
`ackstore verify` and the independent verifier (auditor/verify_export.py) name any row, seal or
head changed behind the ledger's back; `ackstore prove` proves a signal's facts.

One ledger (tests.support.ledger's workload through the pipeline, its settlements carried out, sealed)
is built per module; each test tampers with a copy of it (CREATE DATABASE … TEMPLATE).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
from sqlalchemy import Engine, text

from ackstore import cli
from ackstore.ledger import heads, seals, verify
from ackstore.ledger.database import make_engine, scratch_database
from ackstore.ledger.export import export
from ackstore.ledger.schema import SEALED_TABLES
from ackstore.ledger.settlements import record_carried_out
from ackstore.ledger.store import AckStore
from ackstore.rules import merkle
from ackstore.rules.errors import DittoError
from jobs import pipeline
from jobs.settings import PipelineSettings
from tests.support.auditor import AUDITOR, independent
from tests.support.broker import wait_for
from tests.conftest import ADMIN_URL
from tests.support.ledger import copy_of, load_workload, twin_command

# One byte of one column of a sealed row of each table, changed as a superuser would (triggers off).
TAMPER = {
    "acks": "label = label || 'x'",
    "attempts": "deadline_at = deadline_at + interval '1 microsecond'",
    "command_responses": "status = status + 1",
    "ledger_batches": "run_id = run_id || 'x'",
    "request_results": "status = status + 1",
    "search_marks": "changed = NOT changed",
    "settlements": "decision = CASE decision WHEN 'ack' THEN 'reject' ELSE 'ack' END",
    "signals": "path = path || 'x'",  # not action: ck_signals_shape holds it to ingestion's (issue 50)
    "validation_passes": "run_id = COALESCE(run_id, '') || 'x'",
}


@pytest.fixture(scope="module")
def sealed_ledger(spark) -> Iterator[str]:
    """The URL of a sealed ledger holding facts of every table (a template: never changed)."""
    with scratch_database(ADMIN_URL, "sealed") as url:
        load_workload(url)
        settings = PipelineSettings(database_url=url, partitions=2)
        pipeline.run(spark, settings, tuple(name for name in pipeline.STEPS if name != "seal"))
        engine = make_engine(url)
        with engine.begin() as conn:
            decided = conn.execute(text("SELECT signal_id, attempt FROM settlements")).all()
            assert decided
            record_carried_out(conn, [tuple(row) for row in decided], held=True)
        assert seals.seal(engine) is not None
        engine.dispose()
        yield url


@pytest.fixture
def ledger(sealed_ledger: str) -> Iterator[Engine]:
    """A copy of the module's ledger, to change at will."""
    with copy_of(sealed_ledger, ADMIN_URL, "tampered") as engine:
        yield engine


def as_superuser(engine: Engine, sql: str) -> None:
    """``sql`` with every trigger off, as an attacker with the superuser's password would run it."""
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(text(sql))


def first_row(engine: Engine, table: str) -> tuple[int, str]:
    """The first sealed row of ``table``: its number and its key as verify names it."""
    with engine.connect() as conn:
        seq = conn.execute(text(f"SELECT min(seq) FROM {table}")).scalar_one()
        row = conn.execute(verify._rows(table, seq - 1, seq)).mappings().one()
    return seq, verify.key_of(table, row)


def submit(engine: Engine, correlation_id: str) -> None:
    """One more signal (and its first attempt): two facts for the next seal."""
    answer = AckStore(engine).submit(twin_command("modify", thing="org.acme/t0", path="/attributes/n", value=1,
                                                  correlation_id=correlation_id), source_message_id=correlation_id)
    assert answer["status"] == 202, answer


def exported_heads(engine: Engine, path: Path, key: Path | None = None) -> Path:
    heads.export(engine, heads.HeadsFile(path, key))
    return path


# --- what a seal is ----------------------------------------------------------------------------

def test_every_fact_table_has_rows_in_the_seal_and_the_database_leaves_are_pythons(ledger: Engine) -> None:
    """The view fact_leaves (PostgreSQL's record_send) and ackstore.rules.canonical (Python) give
    every row of every table the same leaf: the column lists of the view are the tables' own."""
    with ledger.connect() as conn:
        seal = seals.latest(conn)
        stored = seals.stored_leaves(conn, seal.number)
        facts = sorted(verify.facts_of(conn, seal.after_seq, seal.upto_seq), key=lambda f: (f.seq, f.table, f.leaf))
    assert all(seal.counts[table.name] > 0 for table in SEALED_TABLES), seal.counts
    assert [fact.leaf for fact in facts] == stored
    assert merkle.root(stored) == seal.root and seal.expected_hash() == seal.hash
    assert seal.previous == merkle.GENESIS and seal.number == 1


def test_a_seal_takes_what_came_since_and_chains_to_the_one_before(ledger: Engine) -> None:
    with ledger.connect() as conn:
        first = seals.latest(conn)
    assert seals.seal(ledger) is None  # nothing new: no seal
    submit(ledger, "after-the-seal")
    second = seals.seal(ledger)
    assert second.number == 2 and second.previous == first.hash and second.after_seq == first.upto_seq
    assert second.counts["signals"] == 1 and second.counts["attempts"] == 1 and second.leaves == 2
    assert verify.verify(ledger, None).ok


def test_a_settlement_is_sealed_once_carried_out_and_never_before(sealed_ledger: str, ledger: Engine) -> None:
    with ledger.connect() as conn:
        counted = conn.execute(text("SELECT count(*) FILTER (WHERE seq IS NOT NULL), count(*) FROM settlements")).one()
    assert counted[0] == counted[1] > 0  # all carried out in the fixture, all numbered
    with ledger.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(text("INSERT INTO settlements (signal_id, attempt, decision) VALUES (999, 1, 'ack')"))
    assert seals.seal(ledger) is None  # decided but not carried out: not final, not sealed
    record = text("SELECT record_carried_out(ARRAY[999]::bigint[], ARRAY[1], true, NULL)")
    with ledger.begin() as conn:
        conn.execute(record)
    sealed = seals.seal(ledger)
    assert sealed.counts["settlements"] == 1 and sealed.leaves == 1


BATCH = text("INSERT INTO ledger_batches (step, run_id, committed_at) VALUES ('sweep', 'open', now())")
PASS = text("INSERT INTO validation_passes (results_upto, run_id) "
            "SELECT COALESCE(max(results_upto), 0) + 1, 'open' FROM validation_passes")


def test_a_writer_left_open_defers_the_seal_and_holds_back_no_one_for_long(ledger: Engine) -> None:
    """A session idle in a transaction that wrote a fact: the seal waits 5 s (lock_timeout), gives
    up for this run, and the next seals what that session wrote once it committed."""
    open_writer = ledger.connect()
    transaction = open_writer.begin()
    open_writer.execute(BATCH)
    try:
        started = time.monotonic()
        assert seals.seal(ledger) is None
        assert 4 <= time.monotonic() - started < 30
        submit(ledger, "while-the-writer-is-open")  # the seal gave up: writers go on
    finally:
        transaction.commit()
        open_writer.close()
    assert seals.seal(ledger).counts == {**{t.name: 0 for t in SEALED_TABLES}, "ledger_batches": 1,
                                         "signals": 1, "attempts": 1}


def test_a_writer_moving_between_fact_tables_while_the_seal_waits_is_not_deadlocked(ledger: Engine) -> None:
    """The CI failure of stop 35: a sealer that locked the fact tables one by one held
    ledger_batches while it waited for a writer of validation_passes, which then wrote a batch.
    Now the seal waits for the writer, which goes on, and seals both of its facts."""
    writer = ledger.connect()
    transaction = writer.begin()
    writer.execute(PASS)
    outcome: list[object] = []
    sealer = threading.Thread(target=lambda: outcome.append(seals.seal(ledger)))
    sealer.start()
    try:
        wait_for(lambda: waiting_for_a_lock(ledger) == 1, timeout=4, what="the seal waiting for the writer")
        writer.execute(BATCH)
        transaction.commit()
    finally:
        writer.close()
        sealer.join(30)
    sealed = outcome[0]
    assert isinstance(sealed, seals.Seal), outcome
    assert sealed.counts["validation_passes"] == 1 and sealed.counts["ledger_batches"] == 1


def waiting_for_a_lock(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                 "AND wait_event_type = 'Lock'")).scalar_one()


@pytest.mark.parametrize("table", [table.name for table in SEALED_TABLES])
def test_a_sealed_row_is_neither_updated_nor_deleted_nor_truncated(ledger: Engine, table: str) -> None:
    seq, _ = first_row(ledger, table)
    for sql in (f"UPDATE {table} SET seq = seq WHERE seq = {seq}", f"DELETE FROM {table} WHERE seq = {seq}",
                f"TRUNCATE {table} CASCADE"):
        with pytest.raises(Exception, match="sealed|immutable|never change|carried out already"):
            with ledger.begin() as conn:
                conn.execute(text(sql))
    with ledger.connect() as conn:
        assert conn.execute(text(f"SELECT count(*) FROM {table} WHERE seq = {seq}")).scalar_one() == 1


def test_a_seal_and_its_leaves_never_change(ledger: Engine) -> None:
    for sql, refusal in (("UPDATE seals SET root = root", "immutable"), ("DELETE FROM seals", "immutable"),
                         ("UPDATE seal_leaves SET leaves = leaves", "immutable"),
                         ("DELETE FROM seal_leaves", "leaves of a seal not archived are never deleted")):
        with pytest.raises(Exception, match=refusal):
            with ledger.begin() as conn:
                conn.execute(text(sql))


# --- verify: an untouched ledger, then every kind of tampering ------------------------------------

def test_an_untouched_ledger_verifies_with_both_verifiers(ledger: Engine, tmp_path: Path) -> None:
    found = verify.verify(ledger, heads.HeadsFile(exported_heads(ledger, tmp_path / "heads.jsonl")).read())
    assert found.ok, [f.line() for f in found.findings]
    assert found.seals == 1 and found.heads == 1 and found.facts == sum(found_counts(ledger).values())
    done = independent(ledger, tmp_path, tmp_path / "heads.jsonl")
    assert (done.returncode, done.stdout.strip()) == (0, "verified"), done.stderr


@pytest.mark.parametrize("table", [table.name for table in SEALED_TABLES])  # each needs its TAMPER
def test_one_changed_byte_of_any_table_is_named_by_both_verifiers(ledger: Engine, tmp_path: Path, table: str) -> None:
    heads_file = exported_heads(ledger, tmp_path / "heads.jsonl")
    seq, key = first_row(ledger, table)
    as_superuser(ledger, f"UPDATE {table} SET {TAMPER[table]} WHERE seq = {seq}")
    found = verify.verify(ledger, heads.HeadsFile(heads_file).read())
    assert not found.ok
    first = found.findings[0]
    assert (first.seal, first.table, first.row) == (1, table, key), first.line()
    done = independent(ledger, tmp_path, heads_file)
    assert done.returncode == 1 and f"table {table}, row seq={seq}" in done.stdout, done.stdout + done.stderr


def test_a_deleted_row_is_found(ledger: Engine, tmp_path: Path) -> None:
    heads_file = exported_heads(ledger, tmp_path / "heads.jsonl")
    seq, _ = first_row(ledger, "acks")
    as_superuser(ledger, f"DELETE FROM acks WHERE seq = {seq}")
    found = verify.verify(ledger, heads.HeadsFile(heads_file).read())
    assert found.findings[0].line() == "seal 1, table acks: holds 9 rows now, 10 when sealed"
    assert any(f"near facts {seq + 1}" in f.line() or f"near facts {seq - 1}" in f.line() for f in found.findings)
    done = independent(ledger, tmp_path, heads_file)
    assert done.returncode == 1 and "seal 1, table acks: a row is missing" in done.stdout, done.stdout


def test_two_reordered_rows_are_found(ledger: Engine, tmp_path: Path) -> None:
    """Two signals' numbers swapped: both rows are named; and two lines of an export swapped."""
    heads_file = exported_heads(ledger, tmp_path / "heads.jsonl")
    with ledger.connect() as conn:
        a, b = conn.execute(text("SELECT seq FROM signals ORDER BY seq LIMIT 2")).scalars()
    as_superuser(ledger, f"UPDATE signals SET seq = CASE seq WHEN {a} THEN {b} ELSE {a} END WHERE seq IN ({a}, {b})")
    found = verify.verify(ledger, heads.HeadsFile(heads_file).read())
    named = {(f.table, f.row) for f in found.findings if f.row}
    assert {row for table, row in named if table == "signals"} == {"id=1", "id=2"}, [f.line() for f in found.findings]


def test_two_swapped_lines_of_an_export_are_found_by_the_independent_verifier(ledger: Engine, tmp_path: Path) -> None:
    heads_file = exported_heads(ledger, tmp_path / "heads.jsonl")
    export(ledger, tmp_path / "export")
    rows = (tmp_path / "export" / "rows.jsonl").read_text().splitlines(keepends=True)
    rows[3], rows[7] = rows[7], rows[3]
    (tmp_path / "export" / "rows.jsonl").write_text("".join(rows))
    done = subprocess.run([sys.executable, "-I", str(AUDITOR), str(tmp_path / "export"), str(heads_file)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "seal 1: its leaves are not its tree" in done.stdout, done.stdout


def test_a_dropped_seal_is_found(ledger: Engine, tmp_path: Path) -> None:
    """Seal 2 of 3 deleted with its leaves: the chain breaks, and its head names it."""
    for n in range(2):
        submit(ledger, f"more-{n}")
        seals.seal(ledger)
    heads_file = exported_heads(ledger, tmp_path / "heads.jsonl")
    as_superuser(ledger, "DELETE FROM seal_leaves WHERE seal = 2; DELETE FROM seals WHERE number = 2")
    found = verify.verify(ledger, heads.HeadsFile(heads_file).read())
    lines = [f.line() for f in found.findings]
    assert lines[0] == "seal 2: seal 2 is missing: the ledger goes from seal 1 to 3", lines
    assert "seal 2: was exported, and is missing from the ledger" in lines
    done = independent(ledger, tmp_path, heads_file)
    assert done.returncode == 1 and "seal 3: does not follow seal 1" in done.stdout, done.stdout


def test_a_dropped_newest_seal_is_found_by_its_head(ledger: Engine, tmp_path: Path) -> None:
    """The newest seal deleted: the chain left is whole, only the head outside shows it."""
    submit(ledger, "more")
    seals.seal(ledger)
    heads_file = exported_heads(ledger, tmp_path / "heads.jsonl")
    as_superuser(ledger, "DELETE FROM seal_leaves WHERE seal = 2; DELETE FROM seals WHERE number = 2")
    assert verify.verify(ledger, None).ok  # consistent with itself…
    lines = [f.line() for f in verify.verify(ledger, heads.HeadsFile(heads_file).read()).findings]
    assert lines == ["seal 2: was exported, and is missing from the ledger"], lines
    done = independent(ledger, tmp_path, heads_file)
    assert done.returncode == 1 and "seal 2: exported as a head, missing from the export" in done.stdout, done.stdout


def test_a_rewritten_seal_is_caught_by_the_exported_heads_alone(ledger: Engine, tmp_path: Path) -> None:
    """An attacker who recomputes a seal over a changed row keeps the chain whole: only the heads
    outside the database show it."""
    heads_file = exported_heads(ledger, tmp_path / "heads.jsonl")
    seq, _ = first_row(ledger, "request_results")
    as_superuser(ledger, f"UPDATE request_results SET status = status + 1 WHERE seq = {seq}; "
                         "DELETE FROM seal_leaves; DELETE FROM seals")
    seals.seal(ledger)  # resealed: a consistent chain over the changed row
    assert verify.verify(ledger, None).ok  # consistent with itself…
    found = verify.verify(ledger, heads.HeadsFile(heads_file).read())
    assert [f.line() for f in found.findings][0].startswith("seal 1: its hash is ")  # …not with the heads
    done = independent(ledger, tmp_path, heads_file)
    assert done.returncode == 1 and "seal 1: its hash differs from the exported head's" in done.stdout


# --- heads: appended, signed, checked ---------------------------------------------------------------

def test_heads_are_appended_once_signed_and_checked_against_the_key(ledger: Engine, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.generate()
    key_file = tmp_path / "seal.key"
    key_file.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    file = heads.HeadsFile(tmp_path / "heads.jsonl", key_file)
    assert heads.export(ledger, file) == 1 and heads.export(ledger, file) == 0  # once
    found = verify.verify(ledger, file.read(), public)
    assert found.ok and found.signatures == 1
    other = Ed25519PrivateKey.generate().public_key().public_bytes(serialization.Encoding.Raw,
                                                                    serialization.PublicFormat.Raw)
    assert [f.line() for f in verify.verify(ledger, file.read(), other).findings] == [
        "seal 1: its exported head is not signed by the given key"]
    done = independent(ledger, tmp_path, file.path, "--public-key", public.hex())
    assert (done.returncode, done.stdout.strip()) == (0, "verified"), done.stdout + done.stderr
    done = independent(ledger, tmp_path, file.path, "--public-key", other.hex())
    assert done.returncode == 1 and "signature" in done.stdout


def test_a_torn_last_head_is_written_again_and_another_ledgers_file_is_refused(ledger: Engine, tmp_path: Path) -> None:
    path = tmp_path / "heads.jsonl"
    path.write_text('{"number": 1, "hash": "ab')  # a kill mid-append
    assert heads.export(ledger, heads.HeadsFile(path)) == 1
    assert [head["number"] for head in heads.HeadsFile(path).read()] == [1] and path.read_text().count("\n") == 1
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"number": 1, "hash": "00" * 32}) + "\n")
    with pytest.raises(DittoError) as refused:
        heads.export(ledger, heads.HeadsFile(other))
    answer = refused.value.to_json()
    assert (answer["status"], answer["error"]) == (409, "ledger:heads.mismatch")
    assert "another ledger" in answer["description"] and "ackstore verify" in answer["description"]
    assert other.read_text().count("\n") == 1  # nothing appended


# --- the commands ----------------------------------------------------------------------------------

def test_verify_and_prove_commands(ledger: Engine, tmp_path: Path, capsys) -> None:
    url = ledger.url.render_as_string(hide_password=False)
    heads_file = exported_heads(ledger, tmp_path / "heads.jsonl")
    assert cli.main(["--database-url", url, "verify", "--heads", str(heads_file)]) == cli.EXIT_OK
    assert json.loads(capsys.readouterr().out)["verified"] is True
    assert cli.main(["--database-url", url, "prove", "c1"]) == cli.EXIT_OK
    proved = json.loads(capsys.readouterr().out)
    tables = {proof["table"] for proof in proved["proofs"]}
    assert {"signals", "attempts", "command_responses", "request_results", "settlements", "search_marks",
            "ledger_batches", "validation_passes"} <= tables
    assert all(proof["verified"] for proof in proved["proofs"]) and proved["unsealed"] == []
    seqs = [proof["seq"] for proof in proved["proofs"]]  # in the order the facts were numbered: the signal first
    assert seqs == sorted(seqs) and proved["proofs"][0]["table"] == "signals", seqs
    for proof in proved["proofs"]:  # each proof checks with the RFC 9162 algorithm alone
        leaf = merkle.leaf_hash(bytes.fromhex(proof["canonical_row"]))
        assert merkle.verify_inclusion(leaf, proof["leaf_index"], proof["tree_size"],
                                       [bytes.fromhex(node) for node in proof["audit_path"]], bytes.fromhex(proof["root"]))
    as_superuser(ledger, "UPDATE signals SET action = 'delete' WHERE correlation_id = 'c1'")
    assert cli.main(["--database-url", url, "verify", "--heads", str(heads_file)]) == cli.EXIT_ERROR_ANSWER
    failed = json.loads(capsys.readouterr().out)
    assert (failed["status"], failed["error"]) == (409, "ledger:seal.mismatch")
    assert failed["message"].startswith("The ledger is not as it was sealed: seal 1, table signals, row id=")
    assert cli.main(["--database-url", url, "prove", "c1"]) == cli.EXIT_ERROR_ANSWER
    assert not next(p for p in json.loads(capsys.readouterr().out)["proofs"] if p["table"] == "signals")["verified"]
    assert cli.main(["--database-url", url, "prove", "nobody"]) == cli.EXIT_ERROR_ANSWER
    assert json.loads(capsys.readouterr().out)["status"] == 404


def test_the_seal_step_stops_at_another_ledgers_heads_and_says_why(ledger: Engine, tmp_path: Path, capsys,
                                                                    monkeypatch) -> None:
    url = ledger.url.render_as_string(hide_password=False)
    foreign = tmp_path / "{database}.jsonl"
    monkeypatch.setenv("ACKSTORE_HEADS", str(foreign))
    (tmp_path / f"{ledger.url.database}.jsonl").write_text(json.dumps({"number": 1, "hash": "00" * 32}) + "\n")
    assert cli.main(["--database-url", url, "pipeline", "run", "--step", "seal"]) == cli.EXIT_ERROR_ANSWER
    answer = json.loads(capsys.readouterr().out)
    assert (answer["status"], answer["error"]) == (409, "ledger:heads.mismatch")
    monkeypatch.setenv("ACKSTORE_HEADS", str(tmp_path / "own" / "{database}.jsonl"))
    assert cli.main(["--database-url", url, "pipeline", "run", "--step", "seal"]) == cli.EXIT_OK
    assert json.loads(capsys.readouterr().out)["steps"]["seal"]["exported"] == 1
    assert [head["number"] for head in heads.HeadsFile(tmp_path / "own" / f"{ledger.url.database}.jsonl").read()] == [1]


@pytest.mark.parametrize("command", ["verify", "export"])
@pytest.mark.parametrize(("first", "last"), [("2", "1"), ("10", "1")])
def test_seals_from_after_to_are_answered_400_never_verified_or_exported_empty(
        ledger: Engine, tmp_path: Path, capsys, command: str, first: str, last: str) -> None:
    """Issue 50: `verify --from 10 --to 1` checked no seal and answered verified; `export` wrote an
    export of no seal."""
    url = ledger.url.render_as_string(hide_password=False)
    given = ["verify", "--no-heads"] if command == "verify" else ["export", str(tmp_path / "export")]
    assert cli.main(["--database-url", url, *given, "--from", first, "--to", last]) == cli.EXIT_ERROR_ANSWER
    answer = json.loads(capsys.readouterr().out)
    assert (answer["status"], answer["error"]) == (400, "ledger:seals.range.invalid") and "verified" not in answer
    assert f"from <{first}> to <{last}>" in answer["message"] and answer["description"]
    assert not (tmp_path / "export").exists()


def test_verify_without_readable_heads_answers_in_dittos_shape(ledger: Engine, tmp_path: Path, capsys) -> None:
    url = ledger.url.render_as_string(hide_password=False)
    (tmp_path / "bad.jsonl").write_text("not json}\n")
    assert cli.main(["--database-url", url, "verify", "--heads", str(tmp_path / "bad.jsonl")]) == cli.EXIT_ERROR_ANSWER
    answer = json.loads(capsys.readouterr().out)
    assert (answer["status"], answer["error"]) == (400, "ledger:heads.invalid") and answer["description"]
    assert cli.main(["--database-url", url, "verify", "--no-heads", "--public-key", "zz"]) == cli.EXIT_ERROR_ANSWER
    assert json.loads(capsys.readouterr().out)["error"] == "ledger:key.invalid"


# --- both verifiers fail closed (issue 37): an unusable heads file or witness, a head or seal gone ---

def good_head(engine: Engine) -> str:
    with engine.connect() as conn:
        return json.dumps(seals.latest(conn).head(), sort_keys=True)


# Each heads file a verifier cannot use, made at a path, and the reason both verifiers give.
UNUSABLE = {
    "empty": (lambda path, head: path.write_bytes(b""), "it holds no head"),
    "missing": (lambda path, head: None, "it is not there"),
    "a directory": (lambda path, head: path.mkdir(), "it is not a file"),
    "not UTF-8": (lambda path, head: path.write_bytes(head.encode() + b"\n\xff\xfe}\n"), "it is not UTF-8 text"),
    "a garbage middle line": (lambda path, head: path.write_text(f"{head}\ngarbage\n{head}\n"),
                              "line 2 is not a head: Expecting value"),
    "a number as text": (lambda path, head: path.write_text(head.replace('"number": 1', '"number": "1"') + "\n"),
                         "line 1 is not a head: its number is not a seal number"),
    "a torn line alone": (lambda path, head: path.write_text(head[:30]), "it holds no head"),
    "a bad hash": (lambda path, head: path.write_text(json.dumps({"number": 1, "hash": "zz"}) + "\n"),
                   "line 1 is not a head: the hash of head 1 is not 64 hex digits"),
}


@pytest.mark.parametrize("role", ["heads", "witness"])
@pytest.mark.parametrize("case", sorted(UNUSABLE))
def test_an_unusable_heads_file_or_witness_fails_both_verifiers_in_one_line(
        ledger: Engine, tmp_path: Path, capsys, case: str, role: str) -> None:
    """Never `verified`, never a traceback: `ackstore verify` answers 400 in Ditto's shape, the
    auditor one line and exit 2 — for the same reason."""
    make, why = UNUSABLE[case]
    good = exported_heads(ledger, tmp_path / "heads.jsonl")
    bad = tmp_path / "unusable.jsonl"
    make(bad, good_head(ledger))
    url = ledger.url.render_as_string(hide_password=False)
    given = ["--heads", str(bad)] if role == "heads" else ["--heads", str(good), "--witness", str(bad)]
    assert cli.main(["--database-url", url, "verify", *given]) == cli.EXIT_ERROR_ANSWER
    answer = json.loads(capsys.readouterr().out)
    assert (answer["status"], answer["error"]) == (400, f"ledger:{role}.invalid"), answer
    assert why in answer["message"] and answer["description"] and "verified" not in answer
    done = independent(ledger, tmp_path, *((bad,) if role == "heads" else (good, "--witness", str(bad))))
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and why in done.stderr, done.stderr


def test_dropping_the_last_head_alone_fails_both_verifiers(ledger: Engine, tmp_path: Path) -> None:
    """`sed -i '$d' heads`: the newest seal is attested by nothing outside the database."""
    submit(ledger, "more")
    seals.seal(ledger)
    heads_file = exported_heads(ledger, tmp_path / "heads.jsonl")
    heads_file.write_text("".join(heads_file.read_text().splitlines(keepends=True)[:-1]))
    lines = [f.line() for f in verify.verify(ledger, heads.HeadsFile(heads_file).read()).findings]
    assert lines == ["seal 2: no exported head covers it or any later seal: the heads end at seal 1 (a head was "
                     "removed, or the seal step has not exported it yet)"], lines
    done = independent(ledger, tmp_path, heads_file)
    assert done.returncode == 1 and done.stdout.startswith("seal 2: no head covers it"), done.stdout + done.stderr


def truncate_tip(engine: Engine, heads_file: Path) -> int:
    """The newest seal removed with its leaves, its rows and its head, as a superuser would (the
    triggers off): what is left agrees with itself and with its heads file. The seal left newest."""
    with engine.connect() as conn:
        newest = seals.latest(conn)
    deletes = "; ".join(f"DELETE FROM {table.name} WHERE seq > {newest.after_seq}" for table in SEALED_TABLES)
    as_superuser(engine, f"{deletes}; DELETE FROM seal_leaves WHERE seal = {newest.number}; "
                         f"DELETE FROM seals WHERE number = {newest.number}")
    heads_file.write_text("".join(heads_file.read_text().splitlines(keepends=True)[:-1]))
    return newest.number - 1


def test_tip_truncation_passes_both_verifiers_and_a_witness_fails_it(ledger: Engine, tmp_path: Path, capsys) -> None:
    for n in range(2):
        submit(ledger, f"more-{n}")
        seals.seal(ledger)
    heads_file = exported_heads(ledger, tmp_path / "heads.jsonl")
    copy = tmp_path / "worm.jsonl"  # a second heads file, kept elsewhere
    copy.write_text(heads_file.read_text())
    last_head = tmp_path / "last-head.json"  # a single head, as a witness may hold it
    last_head.write_text(heads_file.read_text().splitlines()[-1])
    left = truncate_tip(ledger, heads_file)
    assert left == 2
    assert verify.verify(ledger, heads.HeadsFile(heads_file).read()).ok  # consistent with itself and its heads…
    assert independent(ledger, tmp_path, heads_file).stdout.strip() == "verified"
    for witness in (copy, last_head):  # …not with a head kept elsewhere
        found = verify.verify(ledger, heads.HeadsFile(heads_file).read(), witness=heads.read_exported(witness))
        assert [f.line() for f in found.findings] == [
            "seal 3: the witness holds the head of seal 3, and the ledger ends at seal 2: the seals after 2 were "
            "removed"], witness
        done = independent(ledger, tmp_path, heads_file, "--witness", str(witness))
        assert done.returncode == 1 and done.stdout.strip() == (
            "seal 3: the witness holds its head, the export ends at seal 2: the seals after 2 were removed"), done
    url = ledger.url.render_as_string(hide_password=False)
    assert cli.main(["--database-url", url, "verify", "--heads", str(heads_file), "--witness", str(copy)]) == 1
    answer = json.loads(capsys.readouterr().out)
    assert (answer["status"], answer["error"], answer["verified"]) == (409, "ledger:seal.mismatch", False)
    assert "the seals after 2 were removed" in answer["message"] and answer["witnessed"] == 3


def test_a_rewritten_tip_with_its_heads_rewritten_is_caught_by_a_witness(ledger: Engine, tmp_path: Path) -> None:
    """Seal 2 removed and another made in its place, its head appended again: only a head kept
    elsewhere shows that seal 2 is not the one it was."""
    submit(ledger, "more")
    seals.seal(ledger)
    heads_file = exported_heads(ledger, tmp_path / "heads.jsonl")
    witness = tmp_path / "witness.jsonl"
    witness.write_text(heads_file.read_text())
    truncate_tip(ledger, heads_file)
    submit(ledger, "instead")
    seals.seal(ledger)
    exported_heads(ledger, heads_file)
    assert verify.verify(ledger, heads.HeadsFile(heads_file).read()).ok
    found = verify.verify(ledger, heads.HeadsFile(heads_file).read(), witness=heads.read_exported(witness))
    line = found.findings[0].line()
    assert line.startswith("seal 2: its hash is ") and "the seals from 2 on differ" in line, line
    done = independent(ledger, tmp_path, heads_file, "--witness", str(witness))
    assert done.returncode == 1 and done.stdout.startswith("seal 2: its hash differs from the witness's"), done


def test_a_witness_of_the_ledger_as_it_is_verifies(ledger: Engine, tmp_path: Path, capsys) -> None:
    heads_file = exported_heads(ledger, tmp_path / "heads.jsonl")
    url = ledger.url.render_as_string(hide_password=False)
    assert cli.main(["--database-url", url, "verify", "--heads", str(heads_file), "--witness", str(heads_file)]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["verified"] is True and answer["witnessed"] == 1
    done = independent(ledger, tmp_path, heads_file, "--witness", str(heads_file))
    assert (done.returncode, done.stdout.strip()) == (0, "verified"), done.stdout + done.stderr


def found_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return seals.latest(conn).counts


def test_a_run_seals_early_beside_sweep_and_validate_and_the_seal_step_the_rest(spark, tmp_path: Path) -> None:
    """The early seals (decisions #101): what index_search left final, sealed beside sweep; what
    sweep decided, beside validate; the seal step waits for them and seals what came after (the
    validation pass). Three seals, chained, every fact in one, exported, verified."""
    with scratch_database(ADMIN_URL, "early") as url:
        load_workload(url)
        heads_file = tmp_path / "heads.jsonl"
        stats = pipeline.run(spark, PipelineSettings(database_url=url, partitions=2, heads=heads_file))
        engine = make_engine(url)
        try:
            sealed = stats["seal"]
            assert (sealed["early_seals"], sealed["seal"]) == ([1, 2], 3), sealed
            with engine.connect() as conn:
                made = list(seals.between(conn, 1, 3))
                numbered = conn.execute(text("SELECT count(*) FROM fact_leaves")).scalar_one()
            applied, decided, validated = (seal.counts for seal in made)
            assert applied["signals"] > 0 and applied["command_responses"] > 0 and applied["request_results"] == 0
            assert decided["request_results"] > 0 and decided["signals"] == decided["validation_passes"] == 0
            assert validated["validation_passes"] == 1 and validated["request_results"] == 0
            assert sealed["early_facts"] + sealed["facts"] == sum(seal.leaves for seal in made) == numbered
            assert [head["number"] for head in heads.HeadsFile(heads_file).read()] == [1, 2, 3]
            assert verify.verify(engine, heads.HeadsFile(heads_file).read()).ok
        finally:
            engine.dispose()
