"""Files a user names, read with a bound (issue 50): the one way the CLI and what it calls read a
file or standard input — an envelope for ``submit``, ``ack`` and ``respond``, a connection's
``--config``, ``publish``'s lines, ``verify``'s public key, heads and witness, an archive's
manifests, the seal key, the password file.

A file is read to at most its cap and one byte more: what is longer is refused before any of it
is parsed, so ``/dev/zero``, ``/dev/urandom`` or standard input that never ends cost the cap's
memory and stop. A name is read when it is a regular file or a character device (a device the
reader may stream: ``/dev/zero``, a terminal); a FIFO is refused at once, unread — its open waited
for a writer, for ever when none came, and a writer that comes after the reader cannot be told
from none — as are a block device and a directory: a stream comes on standard input (``-``). A
name that is empty, missing, unreadable (no permission, ``/proc/self/mem``) is refused too, saying
why, never a traceback. The cap is the limit the content already has (the envelope's
``ACKSTORE_MAX_ENVELOPE_BYTES``) or one stated beside its reader.
"""

from __future__ import annotations

import os
import stat
import sys
from contextlib import contextmanager
from typing import BinaryIO, Iterator

from ackstore.rules import errors

STDIN = "-"  # what a command that reads standard input takes for it


class FileRefused(ValueError):
    """A file that cannot be used: ``why`` says so in words that follow "it" ("it is not there");
    ``too_large`` when it is longer than its cap (a 413, every other refusal a 400)."""

    def __init__(self, why: str, *, too_large: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.too_large = too_large

    def answer(self, name: str, what: str, setting: str | None = None) -> errors.DittoError:
        """The Ditto-shaped answer for ``name``, the ``what`` a command reads (``setting``: what
        sets its cap, said when it is too large)."""
        return errors.file_refused(name, what, self.why, too_large=self.too_large, setting=setting)


def read_capped(name: str, cap: int, *, stdin: bool = False) -> bytes:
    """The bytes of file ``name`` (standard input for ``-`` when ``stdin``), at most ``cap`` of
    them, or :class:`FileRefused`."""
    with _opened(name, stdin) as file:
        known = _known_size(file)
        if known is not None and known > cap:  # a regular file says its size: refused unread
            raise FileRefused(f"it holds {known:,} bytes, more than the maximum of {cap:,}", too_large=True)
        data = _read(file, cap + 1)
    if len(data) > cap:
        raise FileRefused(f"it is longer than the maximum of {cap:,} bytes", too_large=True)
    return data


def read_or_answer(name: str, cap: int, what: str, *, stdin: bool = False, setting: str | None = None) -> bytes:
    """:func:`read_capped`, a refusal raised as its Ditto-shaped answer (a DittoError)."""
    try:
        return read_capped(name, cap, stdin=stdin)
    except FileRefused as refused:
        raise refused.answer(name, what, setting) from None


def capped_lines(name: str, cap: int, *, stdin: bool = False, text: bool = False) -> Iterator[bytes]:
    """The lines of file ``name`` (standard input for ``-`` when ``stdin``) as they are read,
    each with its line end, or :class:`FileRefused` at the first whose text (without its line
    end) is longer than ``cap`` — or, with ``text``, is not UTF-8: memory holds one line, however
    long the file, and a device of random bytes (/dev/urandom: short lines) stops at its first line
    that is not text."""
    with _opened(name, stdin) as file:
        number = 0
        while True:
            line = _readline(file, cap + 2)  # the text, and a CR LF: a longer read is refused
            if not line:
                return
            number += 1
            if len(line.rstrip(b"\r\n")) > cap:
                raise FileRefused(f"its line {number:,} is longer than the maximum of {cap:,} bytes", too_large=True)
            if text and not _utf8(line):
                raise FileRefused(f"its line {number:,} is not UTF-8 text")
            yield line


@contextmanager
def _opened(name: str, stdin: bool) -> Iterator[BinaryIO]:
    if stdin and name == STDIN:
        if sys.stdin is None:  # started with standard input closed (<&-)
            raise FileRefused("there is no standard input (it is closed)")
        yield sys.stdin.buffer
        return
    if name == "":
        raise FileRefused("no file is named (the name is empty)")
    descriptor = _open(name)
    try:
        _readable_kind(os.fstat(descriptor).st_mode)
        os.set_blocking(descriptor, True)  # a device's reads wait for what it sends, as ever
    except BaseException:
        os.close(descriptor)
        raise
    with os.fdopen(descriptor, "rb") as file:
        yield file


def _open(name: str) -> int:
    """``name`` opened to read, without waiting: the open of a FIFO waits for a writer otherwise
    (for ever, when none comes), before its kind can be known and refused."""
    try:
        return os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileRefused("it is not there") from None
    except PermissionError:
        raise FileRefused("this user may not read it (permission denied)") from None
    except OSError as error:
        raise FileRefused(f"it cannot be opened: {_reason(error)}") from None
    except ValueError:  # a NUL in the name (the Python API; no argument holds one)
        raise FileRefused("its name holds the character U+0000") from None


def _readable_kind(mode: int) -> None:
    """Nothing for a regular file or a character device (a device the reader may stream); else
    why a file of this kind is refused unread."""
    if stat.S_ISREG(mode) or stat.S_ISCHR(mode):
        return
    if stat.S_ISDIR(mode):
        raise FileRefused("it is a directory, not a file")
    if stat.S_ISFIFO(mode):
        raise FileRefused("it is a FIFO (a pipe), not a file: give a stream on standard input (-)")
    raise FileRefused("it is neither a file nor a character device")


def _known_size(file: BinaryIO) -> int | None:
    """The size of a regular file; None for a device, a FIFO, standard input, /proc (size 0)."""
    try:
        status = os.fstat(file.fileno())
    except (OSError, ValueError):
        return None
    return status.st_size if stat.S_ISREG(status.st_mode) and status.st_size else None


def _read(file: BinaryIO, size: int) -> bytes:
    try:
        return file.read(size)
    except OSError as error:  # /proc/self/mem (EIO), a directory read through stdin (EISDIR)
        raise FileRefused(f"it cannot be read: {_reason(error)}") from None


def _readline(file: BinaryIO, size: int) -> bytes:
    try:
        return file.readline(size)
    except OSError as error:
        raise FileRefused(f"it cannot be read: {_reason(error)}") from None


def _utf8(line: bytes) -> bool:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _reason(error: OSError) -> str:
    return (error.strerror or str(error)).lower()
