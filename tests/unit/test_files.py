"""ackstore.files: a file a user names is read to its cap and one byte more, never further, and
every name that is no readable file is refused saying why (issue 50)."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from ackstore import files
from ackstore.rules import errors
from tests.support.endless import endless_fifo, silent_fifo

CAP = 1000


def _file(content: bytes) -> Callable[[Path], str]:
    def make(folder: Path) -> str:
        (folder / "file").write_bytes(content)
        return str(folder / "file")
    return make


# Each name a user may type, what is made for it, and the refusal: (too large?, the reason's words).
REFUSED: dict[str, tuple[Callable[[Path], str], bool, str]] = {
    "an empty name": (lambda folder: "", False, "no file is named"),
    "a missing file": (lambda folder: str(folder / "missing.json"), False, "it is not there"),
    "a directory": (lambda folder: str(folder), False, "it is a directory"),
    "/proc/self/mem": (lambda folder: "/proc/self/mem", False, "it cannot be read: input/output error"),
    "/dev/zero": (lambda folder: "/dev/zero", True, f"it is longer than the maximum of {CAP:,} bytes"),
    "/dev/urandom": (lambda folder: "/dev/urandom", True, f"it is longer than the maximum of {CAP:,} bytes"),
    # a FIFO is a stream: read to the cap and one byte more, as a device is
    "a FIFO that never ends": (endless_fifo, True, f"it is longer than the maximum of {CAP:,} bytes"),
    "a file one byte too long": (_file(b" " * (CAP + 1)), True, f"it holds 1,001 bytes, more than the maximum of {CAP:,}"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_name_that_is_no_readable_file_of_at_most_the_cap_is_refused_saying_why(tmp_path: Path, case: str) -> None:
    make, too_large, why = REFUSED[case]
    with pytest.raises(files.FileRefused) as refused:
        files.read_capped(make(tmp_path), CAP)
    assert refused.value.too_large is too_large and why in refused.value.why


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_refusal_is_answered_in_dittos_shape(tmp_path: Path, case: str) -> None:
    make, too_large, why = REFUSED[case]
    name = make(tmp_path)
    with pytest.raises(errors.DittoError) as answer:
        files.read_or_answer(name, CAP, "message file", setting="ACKSTORE_MAX_ENVELOPE_BYTES")
    body = answer.value.to_json()
    assert (body["status"], body["error"]) == ((413, "file.toolarge") if too_large else (400, "file.invalid"))
    assert body["message"].startswith(f"The message file '{name}' cannot be used: ") and why in body["message"]
    assert ("(ACKSTORE_MAX_ENVELOPE_BYTES sets it)" in body["message"]) is too_large and body["description"]


@pytest.mark.parametrize(("kind", "why"), [
    (stat.S_IFREG, None), (stat.S_IFCHR, None), (stat.S_IFIFO, None),
    (stat.S_IFDIR, "it is a directory, not a file"),
    (stat.S_IFBLK, "it is neither a file, a character device nor a FIFO"),
    (stat.S_IFSOCK, "it is neither a file, a character device nor a FIFO"),
], ids=["regular file", "character device", "FIFO", "directory", "block device", "socket"])
def test_only_a_regular_file_a_character_device_or_a_fifo_is_read_by_its_name(kind: int, why: str | None) -> None:
    """What a name opened without waiting turns out to be: read, or refused unread."""
    if why is None:
        files._readable_kind(kind | 0o644)
        return
    with pytest.raises(files.FileRefused) as refused:
        files._readable_kind(kind | 0o644)
    assert refused.value.why == why and not refused.value.too_large


@pytest.mark.parametrize("size", [0, 1, CAP - 1, CAP])
def test_a_file_of_at_most_the_cap_is_read_whole(tmp_path: Path, size: int) -> None:
    assert files.read_capped(_file(b"x" * size)(tmp_path), CAP) == b"x" * size


def test_a_name_is_a_file_name_even_when_it_is_a_dash_unless_standard_input_is_asked_for(tmp_path: Path,
                                                                                        monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").write_bytes(b"the file")
    assert files.read_capped("-", CAP) == b"the file"


def _lines(name: str, cap: int = CAP) -> Iterator[bytes]:
    return files.capped_lines(name, cap)


def test_lines_are_read_one_at_a_time_each_up_to_the_cap(tmp_path: Path) -> None:
    content = b"a\n" + b"b" * CAP + b"\r\n" + b"c" * CAP + b"\n\nlast"
    assert list(_lines(_file(content)(tmp_path))) == [b"a\n", b"b" * CAP + b"\r\n", b"c" * CAP + b"\n", b"\n",
                                                      b"last"]


@pytest.mark.parametrize("long", [b"x" * (CAP + 1) + b"\n", b"x" * (CAP + 1), b"x" * CAP + b"\rx\n"])
def test_a_line_past_the_cap_stops_the_lines_after_those_before_it(tmp_path: Path, long: bytes) -> None:
    read: list[bytes] = []
    with pytest.raises(files.FileRefused) as refused:
        for line in _lines(_file(b"first\nsecond\n" + long + b"never\n")(tmp_path)):
            read.append(line)
    assert read == [b"first\n", b"second\n"]
    assert refused.value.too_large and refused.value.why == f"its line 3 is longer than the maximum of {CAP:,} bytes"


def test_a_device_without_line_ends_stops_at_the_cap_of_a_line() -> None:
    with pytest.raises(files.FileRefused) as refused:
        for _ in _lines("/dev/zero", 64 * 1024):
            pass
    assert refused.value.too_large and refused.value.why.startswith("its line 1 is longer than")


def test_lines_of_random_bytes_stop_at_the_first_that_is_not_text() -> None:
    """/dev/urandom holds a line end every 256 bytes or so: as text its lines end at once."""
    with pytest.raises(files.FileRefused) as refused:
        for _ in files.capped_lines("/dev/urandom", 64 * 1024, text=True):
            pass
    assert not refused.value.too_large and refused.value.why.endswith("is not UTF-8 text")


def test_lines_as_text_take_any_utf8(tmp_path: Path) -> None:
    content = "{}\nnot json ☃\n\x00\n".encode()
    assert b"".join(files.capped_lines(_file(content)(tmp_path), CAP, text=True)) == content


def test_lines_of_a_missing_file_are_refused_at_the_first_read(tmp_path: Path) -> None:
    lines = _lines(str(tmp_path / "missing"))  # nothing is opened before the first line is asked for
    with pytest.raises(files.FileRefused, match="it is not there"):
        next(lines)


# --- a FIFO: a stream whose writer has a bounded time to begin ----------------------------------

def _fifo_written_late(folder: Path, content: bytes | None, after_s: float) -> str:
    """A FIFO whose writer opens it after ``after_s`` and writes ``content`` (or nothing) and closes it."""
    path = folder / "late.fifo"
    os.mkfifo(path)

    def write() -> None:
        time.sleep(after_s)
        with open(path, "wb") as fifo:
            if content is not None:
                fifo.write(content)

    threading.Thread(target=write, daemon=True).start()
    return str(path)


@pytest.mark.parametrize("content", [b"{}", b"x" * CAP, b""], ids=["a message", "exactly the cap", "nothing"])
def test_a_fifo_whose_writer_begins_within_the_wait_is_read_as_a_stream(tmp_path: Path, content: bytes) -> None:
    assert files.read_capped(_fifo_written_late(tmp_path, content, 0.3), CAP, writer_wait=5) == content


def test_a_fifo_no_process_writes_to_is_refused_once_the_writers_wait_is_over(tmp_path: Path) -> None:
    """Its open waited for a writer for ever before; now the reader waits ``writer_wait`` and says so."""
    started = time.monotonic()
    with pytest.raises(files.FileRefused) as refused:
        files.read_capped(silent_fifo(tmp_path), CAP, writer_wait=0.2)
    assert refused.value.why == "it is a FIFO (a pipe) no process wrote to within 0.2 s"
    assert not refused.value.too_large and time.monotonic() - started < 5  # not silent_fifo's own release


def test_a_fifos_lines_are_read_as_its_writer_sends_them(tmp_path: Path) -> None:
    name = _fifo_written_late(tmp_path, b"one\ntwo\n", 0.3)
    assert list(files.capped_lines(name, CAP, writer_wait=5)) == [b"one\n", b"two\n"]
