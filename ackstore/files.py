"""Files a user names, read with a bound (issue 50): the one way the CLI and what it calls read a
file or standard input — an envelope for ``submit``, ``ack`` and ``respond``, a connection's
``--config``, ``publish``'s lines, ``verify``'s public key, heads and witness, an archive's
manifests, the seal key, the password file.

A file is read to at most its cap and one byte more: what is longer is refused before any of it
is parsed, so ``/dev/zero``, ``/dev/urandom`` or standard input that never ends cost the cap's
memory and stop. A name is read when it is a regular file, a character device (a device the
reader may stream: ``/dev/zero``, a terminal) or a FIFO — a pipe the shell made (``<(cmd)``, read
as ``/dev/fd/63``) or one made with ``mkfifo``: it is opened without waiting, and refused when no
writer has written to it, or closed it, within :data:`FIFO_WRITER_WAIT_S` (its open waited for a
writer for ever before). A block device, a socket and a directory are refused unread. A name that
is empty, missing, unreadable (no permission, ``/proc/self/mem``) is refused too, saying why, never
a traceback. The cap is the limit the content already has (the envelope's
``ACKSTORE_MAX_ENVELOPE_BYTES``) or one stated beside its reader.
"""

from __future__ import annotations

import os
import select
import stat
import sys
from contextlib import contextmanager
from typing import BinaryIO, Iterator

from ackstore.rules import errors

STDIN = "-"  # what a command that reads standard input takes for it
# How long a FIFO's reader waits for its writer's first bytes (or its close): as long as --once
# waits for a broker (decisions #121). A shell's <(cmd) has its writer from the start.
FIFO_WRITER_WAIT_S = 30.0


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


def read_capped(name: str, cap: int, *, stdin: bool = False, writer_wait: float = FIFO_WRITER_WAIT_S) -> bytes:
    """The bytes of file ``name`` (standard input for ``-`` when ``stdin``), at most ``cap`` of
    them, or :class:`FileRefused`; a FIFO's writer has ``writer_wait`` seconds to begin."""
    with _opened(name, stdin, writer_wait) as file:
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


def capped_lines(name: str, cap: int, *, stdin: bool = False, text: bool = False,
                 writer_wait: float = FIFO_WRITER_WAIT_S) -> Iterator[bytes]:
    """The lines of file ``name`` (standard input for ``-`` when ``stdin``) as they are read,
    each with its line end, or :class:`FileRefused` at the first whose text (without its line
    end) is longer than ``cap`` — or, with ``text``, is not UTF-8: memory holds one line, however
    long the file, and a device of random bytes (/dev/urandom: short lines) stops at its first line
    that is not text. A FIFO's writer has ``writer_wait`` seconds to begin."""
    with _opened(name, stdin, writer_wait) as file:
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
def _opened(name: str, stdin: bool, writer_wait: float) -> Iterator[BinaryIO]:
    if stdin and name == STDIN:
        if sys.stdin is None:  # started with standard input closed (<&-)
            raise FileRefused("there is no standard input (it is closed)")
        yield sys.stdin.buffer
        return
    if name == "":
        raise FileRefused("no file is named (the name is empty)")
    descriptor = _open(name)
    try:
        mode = os.fstat(descriptor).st_mode
        _readable_kind(mode)
        if stat.S_ISFIFO(mode):
            _await_writer(descriptor, writer_wait)
        os.set_blocking(descriptor, True)  # a device's reads wait for what it sends, as ever
    except BaseException:
        os.close(descriptor)
        raise
    with os.fdopen(descriptor, "rb") as file:
        yield file


def _open(name: str) -> int:
    """``name`` opened to read, without waiting: the open of a FIFO waits for a writer otherwise
    (for ever, when none comes), before its kind can be known and its wait bounded."""
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
    """Nothing for a regular file, a character device or a FIFO (what the reader may stream); else
    why a file of this kind is refused unread."""
    if stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return
    if stat.S_ISDIR(mode):
        raise FileRefused("it is a directory, not a file")
    raise FileRefused("it is neither a file, a character device nor a FIFO")


def _await_writer(descriptor: int, seconds: float) -> None:
    """Return once the FIFO ``descriptor`` has bytes to read or its writer closed it (an empty
    read then); refused when neither came within ``seconds``. A FIFO opened without waiting has
    no writer to wait on otherwise: its read says "end" at once, with or without one to come."""
    poller = select.poll()
    poller.register(descriptor, select.POLLIN | select.POLLHUP)
    if not poller.poll(max(0, int(seconds * 1000))):
        raise FileRefused(f"it is a FIFO (a pipe) no process wrote to within {seconds:g} s")


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
