"""Every file a user names to the ``ackstore`` command is read with a cap (issue 50): the forms a
user types — an empty name, a missing file, a folder, a file it may not read, ``/proc/self/mem``,
a device that never ends, a FIFO that never ends, a file one byte
too long — answered in Ditto's shape by the real command, which ends at once with its memory
bounded (it grew to 23 GB on ``/dev/zero``, and waited for ever for a FIFO's writer)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from ackstore.ledger.store import AckStore
from tests.support.cli import run_measured, without_read_override
from tests.support.endless import endless_fifo
from tests.support.ledger import snapshot, twin_command

CAP = 4096  # ACKSTORE_MAX_ENVELOPE_BYTES for these runs: a file one byte past it is small
MAX_RSS = 300 * 1024 * 1024  # the CLI with its imports holds ~100 MB; no file costs more than its cap
ENV = {"ACKSTORE_MAX_ENVELOPE_BYTES": str(CAP)}


def _unreadable(folder: Path, cap: int) -> str:
    path = folder / "secret.json"
    path.write_text("{}")
    path.chmod(0)
    return str(path)


def _one_byte_too_long(folder: Path, cap: int) -> str:
    path = folder / "long.json"
    path.write_bytes(b" " * (cap + 1))
    return str(path)


# form → (the name, made in a folder of the test for a command of that cap; status; the reason's words)
FORMS: dict[str, tuple[Callable[[Path, int], str], int, str]] = {
    "empty name": (lambda folder, cap: "", 400, "no file is named (the name is empty)"),
    "missing file": (lambda folder, cap: str(folder / "missing.json"), 400, "it is not there"),
    "a folder": (lambda folder, cap: str(folder), 400, "it is a directory, not a file"),
    "no read permission": (_unreadable, 400, "this user may not read it (permission denied)"),
    "/proc/self/mem": (lambda folder, cap: "/proc/self/mem", 400, "it cannot be read: input/output error"),
    "/dev/zero": (lambda folder, cap: "/dev/zero", 413, "longer than the maximum of"),
    "/dev/urandom": (lambda folder, cap: "/dev/urandom", 413, "longer than the maximum of"),
    # a FIFO is a stream (docs/cli.md): read to its cap, as a device is; its writer's wait is
    # tests/unit/test_files.py's (30 s here)
    "an endless FIFO": (lambda folder, cap: endless_fifo(folder), 413, "longer than the maximum of"),
    "one byte too long": (_one_byte_too_long, 413, "more than the maximum of"),
}

# command (as typed, FILE for the name) → what it calls the file, and the cap's setting if it has one
COMMANDS: dict[str, tuple[list[str], str, str | None]] = {
    "submit": (["submit", "FILE"], "message file", "ACKSTORE_MAX_ENVELOPE_BYTES"),
    "ack": (["ack", "app", "FILE"], "acknowledgement file", "ACKSTORE_MAX_ENVELOPE_BYTES"),
    "respond": (["respond", "app", "FILE"], "live response file", "ACKSTORE_MAX_ENVELOPE_BYTES"),
    "connect amqp10 --config": (["connect", "amqp10", "--config", "FILE"], "connection configuration file", None),
    "connect http-push --config": (["connect", "http-push", "--config", "FILE"], "connection configuration file", None),
    "publish amqp10": (["publish", "amqp10", "--address", "/amq/queue/q", "FILE"], "message file",
                       "ACKSTORE_MAX_ENVELOPE_BYTES"),
    "publish amqp": (["publish", "amqp", "--queue", "q", "FILE"], "message file", "ACKSTORE_MAX_ENVELOPE_BYTES"),
    "publish mqtt": (["publish", "mqtt", "--topic", "t", "FILE"], "message file", "ACKSTORE_MAX_ENVELOPE_BYTES"),
    "verify --public-key": (["verify", "--no-heads", "--public-key", "FILE"], "public key file", None),
}
# The public key is a file only when the name is one; anything else is read as the key's hex.
NOT_A_FILE_FOR_THE_KEY = {"empty name", "missing file"}
# What differs for a line reader (publish): a line past the cap. (Random bytes hold a line end every
# 256 bytes or so: publish stops at the first line that is not UTF-8 text, which may come after a
# short one it sends — tests/unit/test_files.py shows it ends; no broker is needed for the rest.)
LINES = {"/dev/zero": (413, "its line 1 is longer than the maximum of"),
         "one byte too long": (413, "its line 1 is longer than the maximum of")}
# The config and key caps are their own (1 MiB, 64 KiB): past them, not past CAP.
OWN_CAPS = {"connect amqp10 --config": 1024 * 1024, "connect http-push --config": 1024 * 1024,
            "verify --public-key": 64 * 1024}


# Every form for the commands the issue names; the others read through the same reader: the forms
# that show their own wiring (the name as given, their cap, a stream past it).
NAMED_BY_THE_ISSUE = ("submit", "verify --public-key", "connect amqp10 --config", "publish amqp10")
WIRING = ("empty name", "a folder", "/dev/zero", "one byte too long")
CASES = [(command, form) for command in COMMANDS for form in FORMS
         if (command in NAMED_BY_THE_ISSUE or form in WIRING)
         and not (command.startswith("publish") and form == "/dev/urandom")]


def _expected(command: str, form: str) -> tuple[int, str, str]:
    """status, error, and words of the message, for ``command`` given the file of ``form``."""
    status, why = FORMS[form][1:]
    if command == "verify --public-key" and form in NOT_A_FILE_FOR_THE_KEY:
        return 400, "ledger:key.invalid", "An Ed25519 public key is 32 bytes long" if form == "empty name" else \
            "non-hexadecimal number"
    if command.startswith("publish") and form in LINES:
        status, why = LINES[form]
    return status, {400: "file.invalid", 413: "file.toolarge"}[status], why


@pytest.mark.parametrize(("command", "form"), CASES, ids=[f"{c}: {f}" for c, f in CASES])
def test_a_file_the_command_cannot_use_is_answered_at_once_in_bounded_memory(
        store: AckStore, database_url: str, tmp_path: Path, command: str, form: str) -> None:
    words, what, setting = COMMANDS[command]
    name = FORMS[form][0](tmp_path, OWN_CAPS.get(command, CAP))
    before = snapshot(store.engine)
    code, answer, rss = run_measured(*[name if word == "FILE" else word for word in words], url=database_url,
                                     env=ENV, prefix=without_read_override() if form == "no read permission" else ())
    status, error, why = _expected(command, form)
    assert code == 1 and isinstance(answer, dict), answer
    assert (answer["status"], answer["error"]) == (status, error), answer
    assert why in answer["message"] and answer["description"], answer
    if error.startswith("file."):
        assert answer["message"].startswith(f"The {what} '{name}' cannot be used: ")
        assert (f"({setting} sets it)" in answer["message"]) is (status == 413 and setting is not None)
    assert rss < MAX_RSS, f"{rss / 2 ** 20:.0f} MiB"
    assert snapshot(store.engine) == before


@pytest.mark.parametrize("command", ["submit", "ack", "respond", "publish amqp"])
def test_standard_input_that_never_ends_is_answered_at_once(database_url: str, command: str) -> None:
    words = [("-" if word == "FILE" else word) for word in COMMANDS[command][0]]
    with open("/dev/zero", "rb") as zeros:
        code, answer, rss = run_measured(*words, url=database_url, env=ENV, stdin=zeros)
    assert code == 1 and isinstance(answer, dict), answer
    assert (answer["status"], answer["error"]) == (413, "file.toolarge"), answer
    assert answer["message"].startswith(f"The {COMMANDS[command][1]} '-' cannot be used: ")
    assert rss < MAX_RSS


def _padded(envelope: dict[str, Any], size: int) -> bytes:
    text = json.dumps(envelope).encode()
    return text + b" " * (size - len(text))


def test_a_message_file_of_exactly_the_limit_is_stored_and_one_byte_more_is_refused_unread(
        store: AckStore, database_url: str, tmp_path: Path) -> None:
    exact, over = tmp_path / "exact.json", tmp_path / "over.json"
    exact.write_bytes(_padded(twin_command(correlation_id="c-exact"), CAP))
    over.write_bytes(_padded(twin_command(correlation_id="c-over"), CAP + 1))
    code, answer, _ = run_measured("submit", str(exact), url=database_url, env=ENV)
    assert (code, answer) == (0, {"status": 202, "correlationId": "c-exact"})
    before = snapshot(store.engine)
    code, answer, _ = run_measured("submit", str(over), url=database_url, env=ENV)
    assert (code, answer["status"], answer["error"]) == (1, 413, "file.toolarge"), answer
    assert f"it holds {CAP + 1:,} bytes, more than the maximum of {CAP:,}" in answer["message"]
    assert snapshot(store.engine) == before


# ``--witness ''`` and ``--public-key ''`` were taken as not given (verified, unwitnessed and
# unsigned), ``--heads ''`` as the configured heads file.
EMPTY_VERIFY_OPTIONS = {"--heads": (["--heads", ""], "ledger:heads.invalid"),
                        "--witness": (["--no-heads", "--witness", ""], "ledger:witness.invalid"),
                        "--public-key": (["--no-heads", "--public-key", ""], "ledger:key.invalid")}


@pytest.mark.parametrize("option", list(EMPTY_VERIFY_OPTIONS))
def test_verify_given_an_empty_name_refuses_it_and_never_verifies_without_it(database_url: str, option: str) -> None:
    words, error = EMPTY_VERIFY_OPTIONS[option]
    code, answer, _ = run_measured("verify", *words, url=database_url)
    assert code == 1 and isinstance(answer, dict), answer
    assert (answer["status"], answer["error"]) == (400, error) and "verified" not in answer, answer


def test_standard_input_closed_is_answered(database_url: str) -> None:
    """``ackstore submit - <&-``: no standard input at all (Python's sys.stdin is None)."""
    command = " ".join(shlex.quote(word) for word in [sys.executable, "-m", "ackstore.cli", "--database-url",
                                                       database_url, "submit", "-"])
    done = subprocess.run(["sh", "-c", f"exec {command} <&-"], capture_output=True, text=True, timeout=60)
    answer = json.loads(done.stdout)
    assert (done.returncode, answer["status"], answer["error"]) == (1, 400, "file.invalid"), done.stderr
    assert "there is no standard input" in answer["message"]


def test_a_message_from_the_shells_process_substitution_is_stored(store: AckStore, database_url: str,
                                                                   tmp_path: Path) -> None:
    """``ackstore submit <(cat message.json)``: bash hands the command a pipe (/dev/fd/63)."""
    message = tmp_path / "message.json"
    message.write_text(json.dumps(twin_command(correlation_id="c-piped")))
    command = " ".join(shlex.quote(word) for word in [sys.executable, "-m", "ackstore.cli", "--database-url",
                                                       database_url, "submit"])
    done = subprocess.run(["bash", "-c", f"{command} <(sleep 0.5; cat {shlex.quote(str(message))})"],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, json.loads(done.stdout)) == (0, {"status": 202, "correlationId": "c-piped"}), done.stderr
    assert store.stored_signal("c-piped") is not None
