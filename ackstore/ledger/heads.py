"""Exported heads (issue 28, decisions #101): each seal's hash, written where the database's
writers cannot reach it — appended to a file outside PostgreSQL, one JSON line per seal, and
signed with Ed25519 when a private key is configured.

A line is the seal's head (ackstore.ledger.seals.Seal.head) and, when signed, ``signature``:
the Ed25519 signature of the seal's 32-byte hash, in hex, and ``key``: the signing public key,
in hex (the auditor checks against the key they hold, not this one). Appending is the only
write: a torn last line (a kill mid-write) is cut off and written again by the next export.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from ackstore.ledger import seals
from ackstore.ledger.database import ackstore_home, database_url
from ackstore.rules import errors

HEADS_VARIABLE = "ACKSTORE_HEADS"
KEY_VARIABLE = "ACKSTORE_SEAL_KEY"


class HeadsUnreadable(ValueError):
    """A line of a heads file that is no head."""


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
        """The heads exported so far, in order (a torn last line is not one)."""
        if not self.path.exists():
            return []
        heads = []
        for number, line in enumerate(self.path.read_bytes().split(b"\n"), start=1):
            if not line.endswith(b"}"):
                if line.strip():
                    break  # torn: only the last line can be, as lines are only appended
                continue
            try:
                heads.append(json.loads(line))
            except ValueError as error:
                raise HeadsUnreadable(f"line {number} is not a head: {error}") from None
        return heads

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
    """Cut a last line without its newline (a kill mid-append) off the end of ``file``."""
    size = file.seek(0, os.SEEK_END)
    if size == 0:
        return
    file.seek(size - 1)
    if file.read(1) == b"\n":
        return
    file.seek(0)
    file.truncate(file.read().rfind(b"\n") + 1)
    file.seek(0, os.SEEK_END)


def _signer(key_path: Path):
    """Signs a seal hash with the Ed25519 private key in ``key_path`` (PEM, PKCS #8)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{key_path} is not an Ed25519 private key")
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    return lambda digest: {"signature": key.sign(digest).hex(), "key": public}
