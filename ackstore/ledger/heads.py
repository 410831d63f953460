"""Exported heads (issue 28, decisions #101): each seal's hash, written where the database's
writers cannot reach it — appended to a file outside PostgreSQL, one JSON line per seal, and
signed with Ed25519 when a private key is configured.

A line is the seal's head (ackstore.ledger.seals.Seal.head) and, when signed, ``signature``:
the Ed25519 signature of the seal's 32-byte hash, in hex, and ``key``: the signing public key,
in hex (the auditor checks against the key they hold, not this one). Appending is the only
write: a torn last line (a kill mid-write) is cut off and written again by the next export.

A verifier reads a heads file strictly (:func:`read_exported`, spelled the same way in
``auditor/verify_export.py``): a file that is missing, a directory, not UTF-8, empty, or holds a
line that is no head is refused, saying why — never read as no heads. The same reader takes a
witness (decisions #101: an independent copy of a later head) and an archive's manifests, whose
line lists its seals as heads. Every one is read a line at a time, each line at most
:data:`MAX_LINE_BYTES` (``ackstore.files``, issue 50): memory holds one line, whatever the file.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from sqlalchemy import Engine

from ackstore import files
from ackstore.ledger import seals
from ackstore.ledger.database import ackstore_home, database_url
from ackstore.rules import errors

HEADS_VARIABLE = "ACKSTORE_HEADS"
KEY_VARIABLE = "ACKSTORE_SEAL_KEY"


class HeadsUnreadable(ValueError):
    """A heads file a verifier cannot use, or a line of one that is no head."""


HASH = re.compile(r"[0-9a-f]{64}")
# A head's line is under 1 KiB; a manifest's lists a day's seals, about 400 bytes each: this many
# bytes hold some 160 000 seals a day, and are what a file without line ends costs before it is refused.
MAX_LINE_BYTES = 64 * 1024 * 1024
# A PEM file of one Ed25519 key (public or private) is about 120 bytes; a key file may hold a comment.
MAX_KEY_BYTES = 64 * 1024


def configured_path(url: str) -> Path:
    """Where the heads of the ledger at ``url`` go: ``$ACKSTORE_HEADS`` (``{database}`` in it
    stands for the database's name), else ``$ACKSTORE_HOME/heads/{database}.jsonl``. The name
    is libpq's (the user's when the URL names no database), with only [A-Za-z0-9._-] kept."""
    params = database_url(url).params
    name = re.sub(r"[^A-Za-z0-9._-]", "_", params.get("dbname") or params.get("user") or "postgres")
    configured = os.environ.get(HEADS_VARIABLE) or str(ackstore_home() / "heads" / "{database}.jsonl")
    return Path(configured.replace("{database}", name))


def configured_key() -> Path | None:
    return Path(os.environ[KEY_VARIABLE]) if os.environ.get(KEY_VARIABLE) else None


@dataclass(frozen=True)
class HeadsFile:
    """A heads file, and the private key its new heads are signed with (None: unsigned)."""

    path: Path
    key: Path | None = None

    def read(self) -> list[dict[str, Any]]:
        """The heads exported so far, in order (none before the first export)."""
        return parse_lines(read_lines(self.path)) if self.path.exists() else []

    def append(self, new: list[dict[str, Any]]) -> None:
        """Append ``new`` heads, signed if a key is set, and flush them to disk."""
        if not new:
            return
        signer = _signer(self.key) if self.key else None
        lines = []
        for head in new:
            if signer is not None:
                head = head | signer(bytes.fromhex(head["hash"]))
            lines.append(json.dumps(head, sort_keys=True) + "\n")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab+") as file:
            _cut_torn_line(file)
            file.write("".join(lines).encode())
            file.flush()
            os.fsync(file.fileno())


def read_exported(path: str | Path) -> list[dict[str, Any]]:
    """The heads in ``path`` for a verifier: one or more, or HeadsUnreadable saying why — a file a
    verifier cannot read is never taken as one exporting no head (that would verify anything)."""
    if str(path) == "":  # not Path(""), which is the working folder
        raise HeadsUnreadable("no file is named (the name is empty)")
    path = Path(path)
    if not path.exists():
        raise HeadsUnreadable("it is not there")
    if not path.is_file():
        raise HeadsUnreadable("it is not a file")
    heads = parse_lines(read_lines(path))
    if not heads:
        raise HeadsUnreadable("it holds no head")
    return heads


def read_lines(path: Path) -> Iterator[bytes]:
    """The lines of a heads file or manifest, each at most MAX_LINE_BYTES, or HeadsUnreadable."""
    try:
        yield from files.capped_lines(str(path), MAX_LINE_BYTES)
    except files.FileRefused as refused:
        raise HeadsUnreadable(refused.why) from None


def parse(data: bytes) -> list[dict[str, Any]]:
    """The heads of a heads file's bytes, in order (:func:`parse_lines`)."""
    parts = data.split(b"\n")
    return parse_lines([part + b"\n" for part in parts[:-1]] + [parts[-1]])


def parse_lines(lines: Iterable[bytes]) -> list[dict[str, Any]]:
    """The heads of a heads file's lines (each with its line end), in order. Each line is a head,
    or a manifest listing heads under ``seals``; blank lines are skipped, and so is a torn last
    line (no newline and no closing brace: only the last line can be, as lines are only appended)."""
    heads: list[dict[str, Any]] = []
    for number, raw in enumerate(lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise HeadsUnreadable(f"it is not UTF-8 text: line {number}: {error}") from None
        torn = not line.endswith("\n") and not line.rstrip().endswith("}")
        if not line.strip() or torn:
            continue
        try:
            heads += heads_of(json.loads(line))
        except (ValueError, RecursionError) as error:  # JSONDecodeError is a ValueError
            raise HeadsUnreadable(f"line {number} is not a head: {error}") from None
    return heads


def heads_of(value: Any) -> list[dict[str, Any]]:
    """The heads a line holds: itself, or a manifest's ``seals``; ValueError for anything else."""
    found = value.get("seals") if isinstance(value, dict) and "number" not in value else [value]
    if not isinstance(found, list):
        raise ValueError("it is neither a head nor a manifest's seals")
    for head in found:
        if not isinstance(head, dict):
            raise ValueError("it is not a JSON object")
        number, digest = head.get("number"), head.get("hash")
        if not isinstance(number, int) or isinstance(number, bool) or number < 1:
            raise ValueError("its number is not a seal number (a whole number, 1 or more)")
        if not isinstance(digest, str) or not HASH.fullmatch(digest):
            raise ValueError(f"the hash of head {number} is not 64 hex digits")
        if not isinstance(head.get("signature", ""), str):
            raise ValueError(f"the signature of head {number} is not hex text")
    return found


def export(engine: Engine, heads: HeadsFile) -> int:
    """Append the head of every seal not yet in ``heads``; how many. Raises ``ledger:heads.mismatch``
    (a DittoError) when the file's last head is not the ledger's seal of that number."""
    exported = heads.read()
    last = exported[-1] if exported else None
    with engine.connect() as conn:
        newest = seals.latest(conn)
        if newest is None:
            if last is not None:
                raise errors.heads_mismatch(str(heads.path), f"it holds {len(exported)} head(s), the ledger no seal")
            return 0
        start = 1
        if last is not None:
            mine = next(seals.between(conn, last["number"], last["number"]), None)
            if mine is None or mine.hash.hex() != last["hash"]:
                raise errors.heads_mismatch(str(heads.path), (
                    f"its head {last['number']} is {last['hash']}, the ledger's seal {last['number']} is "
                    f"{mine.hash.hex() if mine else 'missing'}"))
            start = last["number"] + 1
        new = [seal.head() for seal in seals.between(conn, start, newest.number)]
    heads.append(new)
    return len(new)


def _cut_torn_line(file: Any) -> None:
    """Cut a last line without its newline (a kill mid-append) off the end of ``file`` — or end it
    with its newline when it is whole (killed just before it): :func:`parse` read it as a head."""
    size = file.seek(0, os.SEEK_END)
    if size == 0:
        return
    file.seek(size - 1)
    if file.read(1) == b"\n":
        return
    file.seek(0)
    data = file.read()
    start = data.rfind(b"\n") + 1
    if data[start:].rstrip().endswith(b"}"):
        file.write(b"\n")
        return
    file.truncate(start)
    file.seek(0, os.SEEK_END)


def _signer(key_path: Path):
    """Signs a seal hash with the Ed25519 private key in ``key_path`` (PEM, PKCS #8)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = serialization.load_pem_private_key(files.read_or_answer(str(key_path), MAX_KEY_BYTES, "seal key file"),
                                             password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{key_path} is not an Ed25519 private key")
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    return lambda digest: {"signature": key.sign(digest).hex(), "key": public}
