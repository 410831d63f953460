"""`ackstore verify` and `ackstore prove` (issue 28, decisions #101): the seals recomputed from the
rows, the chain checked against the exported heads, and a fact's inclusion proved.

Nothing here trusts the database's own functions: every leaf is rebuilt in Python from the row's
values (ackstore.rules.canonical). A seal's stored leaves are trusted only once their tree's root
is the seal's and its hash is the exported head's: then they say which row differs.

It fails closed: an archived file it cannot read, a manifest gone, a seal no head attests, a
witnessed head (an independent copy of a later one) the ledger no longer has — each is a finding,
never a crash nor a pass. The newest seals removed with their heads and rows leave a ledger and a
heads file that agree: only a copy kept elsewhere (``--witness``, the archive's manifests) tells.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

from sqlalchemy import Connection, Engine, func, select

from ackstore.ledger import archive_reader, heads, seals
from ackstore.ledger.named_sql import ledger_statement
from ackstore.ledger.schema import SEALED_TABLES, archives, metadata
from ackstore.rules import canonical, merkle


@dataclass(frozen=True)
class Finding:
    """One difference: in which seal, table and row (as far as known), and what."""

    what: str
    seal: int | None = None
    table: str | None = None
    row: str | None = None

    def line(self) -> str:
        where = ", ".join(part for part in (
            f"seal {self.seal}" if self.seal is not None else "",
            f"table {self.table}" if self.table else "",
            f"row {self.row}" if self.row else "") if part)
        return f"{where}: {self.what}" if where else self.what


@dataclass
class Verification:
    """What `verify` found: the seals checked, the facts recomputed, and every difference (the
    first is the one to look at)."""

    seals: int = 0
    facts: int = 0
    heads: int = 0
    signatures: int = 0
    witnessed: int = 0
    unsealed: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings


@dataclass(frozen=True)
class Fact:
    """A row as the ledger holds it now: its number, table, key and leaf hash."""

    seq: int
    table: str
    key: str
    leaf: bytes
    row: dict[str, Any] = field(repr=False, compare=False)


def verify(engine: Engine, exported: list[dict[str, Any]] | None, public_key: bytes | None = None,
           first: int = 1, last: int | None = None, witness: list[dict[str, Any]] | None = None) -> Verification:
    """Recompute seals ``first``..``last`` (default: all) from the rows and check their chain, the
    ``exported`` heads (None: none to compare with; as ackstore.ledger.heads.parse gives them) and,
    with ``public_key`` (raw Ed25519), each head's signature; then the ``witness`` (later heads
    kept elsewhere) and every archive's manifests against the ledger's seals."""
    seals.check_range(first, last)
    found = Verification()
    to_newest = last is None  # then a head past the ledger's newest seal is one missing from it
    with engine.connect() as conn:
        newest = seals.latest(conn)
        last = newest.number if newest and last is None else (last or 0)
        before = next(seals.between(conn, first - 1, first - 1), None) if first > 1 else None
        previous_hash = before.hash if before else merkle.GENESIS
        previous_upto = before.upto_seq if before else 0
        if first > 1 and before is None:
            found.findings.append(Finding(f"seal {first - 1} is missing: seal {first} cannot be chained", first - 1))
        expected_number = first
        for seal in seals.between(conn, first, last):
            if seal.number != expected_number:
                found.findings.append(Finding(
                    f"seal {expected_number} is missing: the ledger goes from seal {expected_number - 1} to "
                    f"{seal.number}", expected_number))
            found.findings += _check_seal(conn, seal, previous_hash, previous_upto, found)
            previous_hash, previous_upto, expected_number = seal.hash, seal.upto_seq, seal.number + 1
            found.seals += 1
        if last and expected_number <= last:
            found.findings.append(Finding(f"seals {expected_number}..{last} are missing", expected_number))
        found.unsealed = _unsealed(conn, previous_upto) if newest is None or last == newest.number else 0
        if exported is not None:
            found.findings += _check_heads(conn, exported, public_key, first, None if to_newest else last, found)
        if witness is not None:
            found.findings += _check_copies(conn, witness, "the witness", found)
        found.findings += _check_manifests(conn, found)
    return found


def _check_seal(conn: Connection, seal: seals.Seal, previous_hash: bytes, previous_upto: int,
                found: Verification) -> list[Finding]:
    findings = []
    if seal.previous != previous_hash:
        findings.append(Finding("does not chain to the seal before it (its previous hash differs)", seal.number))
    if seal.after_seq != previous_upto:
        findings.append(Finding(f"covers facts after {seal.after_seq}, the seal before ended at {previous_upto}",
                                seal.number))
    if seal.expected_hash() != seal.hash:
        findings.append(Finding("its hash is not the hash of its number, counts and root", seal.number))
    archive = archive_reader.location_of(conn, seal.number)  # archived: its rows and no leaves are kept
    stored = [] if archive else seals.stored_leaves(conn, seal.number)
    trusted = len(stored) == seal.leaves and merkle.root(stored) == seal.root
    if not trusted and not archive:
        findings.append(Finding("its stored leaves are not the tree of its root", seal.number))
    try:
        facts = facts_in_order(conn, seal, archive)
    except archive_reader.ArchiveUnreadable as error:  # named, and the other seals still checked
        return findings + [Finding(f"its archived rows cannot be read: {error}", seal.number, error.table)]
    found.facts += len(facts)
    counts = Counter(fact.table for fact in facts)
    for name in (table.name for table in SEALED_TABLES):
        if counts[name] != seal.counts.get(name, 0):
            findings.append(Finding(f"holds {counts[name]} rows now, {seal.counts.get(name, 0)} when sealed",
                                    seal.number, name))
    if merkle.root([fact.leaf for fact in facts]) == seal.root and len(facts) == seal.leaves:
        return findings
    if not trusted:
        where = f"its archived rows (in {archive})" if archive else "its rows"
        return findings + [Finding(f"{where} are not the rows sealed", seal.number)]
    return findings + _differing_rows(seal.number, facts, stored)


def _differing_rows(number: int, facts: list[Fact], stored: list[bytes]) -> list[Finding]:
    """The rows whose leaves are not the sealed ones, and the sealed leaves no row has, in order."""
    sealed = Counter(stored)
    findings = []
    for fact in facts:
        if sealed[fact.leaf]:
            sealed[fact.leaf] -= 1
        else:
            findings.append(Finding(f"is not as sealed (changed, or added to a sealed range): fact {fact.seq}",
                                    number, fact.table, fact.key))
    now = Counter(fact.leaf for fact in facts)
    for position, leaf in enumerate(stored):
        if now[leaf]:
            now[leaf] -= 1
            continue
        neighbours = [fact.seq for fact in facts[max(position - 1, 0):position + 1]]
        findings.append(Finding(f"sealed leaf {position} has no row now (a row changed or deleted, near facts "
                                f"{', '.join(map(str, neighbours)) or 'none'})", number))
    if not findings:  # the same rows, in another order
        position = next(i for i, (fact, leaf) in enumerate(zip(facts, stored)) if fact.leaf != leaf)
        fact = facts[position]
        findings.append(Finding(f"is at leaf {position}, which was another row's when sealed: fact {fact.seq}",
                                number, fact.table, fact.key))
    return findings


def facts_in_order(conn: Connection, seal: seals.Seal, archive: str | None = None) -> list[Fact]:
    """A seal's facts in its leaves' order: by number, then table and leaf should two share a
    number (the order of ``leaves_in_order`` in sql/seals.sql)."""
    return sorted(facts_of(conn, seal.after_seq, seal.upto_seq, archive), key=lambda f: (f.seq, f.table, f.leaf))


def facts_of(conn: Connection, after_seq: int, upto_seq: int, archive: str | None = None) -> Iterator[Fact]:
    """Every row numbered (after_seq, upto_seq] — in the hot tables, or in ``archive`` when its
    seals were moved out — its leaf rebuilt in Python."""
    for name in (table.name for table in SEALED_TABLES):
        rows = (archive_reader.archived_rows(archive, name, after_seq, upto_seq) if archive
                else conn.execute(_rows(name, after_seq, upto_seq)).mappings())
        for row in rows:
            yield Fact(row["seq"], name, key_of(name, row), merkle.leaf_hash(encode(name, row)), dict(row))


def encode(table: str, row: Any) -> bytes:
    """The canonical bytes of a row read by :func:`_rows`."""
    return canonical.encode_row(table, dict(row), seals.FACT_TYPES[table])


def key_of(table: str, row: Any) -> str:
    return ", ".join(f"{column.name}={row[column.name]}" for column in metadata.tables[table].primary_key.columns)


def _rows(name: str, after_seq: int, upto_seq: int) -> Any:
    """The rows of a fact table numbered (after_seq, upto_seq], jsonb as its text (canonical)."""
    table = metadata.tables[name]
    return select(*seals.canonical_columns(table)).where(table.c.seq > after_seq, table.c.seq <= upto_seq)


def _unsealed(conn: Connection, upto: int) -> int:
    """How many facts are numbered past the last seal (sealed by the next run)."""
    return sum(conn.execute(select(func.count()).where(table.c.seq > upto)).scalar_one() for table in SEALED_TABLES)


def _check_heads(conn: Connection, exported: list[dict[str, Any]], public_key: bytes | None, first: int,
                 last: int | None, found: Verification) -> list[Finding]:
    """The exported heads numbered first..last (None: every one from first) against the ledger's
    seals: each must be there with the same hash (and signed by ``public_key``), and every seal
    of the ledger in the range must have its head — one missing between two was removed, and the
    newest seals without one are attested by nothing outside the database."""
    findings = []
    verify_signature = _signature_checker(public_key) if public_key else None
    newest = seals.latest(conn)
    ledger = {seal.number: seal for seal in seals.between(conn, first, last or (newest.number if newest else 0))}
    numbers = set()
    for head in exported:
        number = head["number"]
        if number < first or (last is not None and number > last):
            continue
        numbers.add(number)
        found.heads += 1
        seal = ledger.get(number)
        if seal is None:
            findings.append(Finding("was exported, and is missing from the ledger", number))
        elif seal.hash.hex() != head["hash"]:
            findings.append(Finding(f"its hash is {seal.hash.hex()}, the exported head's {head['hash']}", number))
        if verify_signature is not None:
            if verify_signature(head):
                found.signatures += 1
            else:
                findings.append(Finding("its exported head is not signed by the given key", number))
    return findings + _unattested(sorted(set(ledger) - numbers), max(numbers, default=None))


def _unattested(unexported: list[int], newest_head: int | None) -> list[Finding]:
    """The ledger's seals no exported head attests: the first of those between two heads (a head
    removed), and the first after the newest head (a head removed from the end, or not exported
    yet: the seal step exports each seal it makes)."""
    findings = []
    between = [number for number in unexported if newest_head is not None and number < newest_head]
    if between:
        findings.append(Finding("is in the ledger but was never exported (a head is missing)", between[0]))
    after = [number for number in unexported if newest_head is None or number > newest_head]
    if after and newest_head is None:
        findings.append(Finding("no exported head covers it or any later seal (are these the seal step's heads?)",
                                after[0]))
    elif after:
        findings.append(Finding(f"no exported head covers it or any later seal: the heads end at seal {newest_head} "
                                "(a head was removed, or the seal step has not exported it yet)", after[0]))
    return findings


def _check_copies(conn: Connection, copies: list[dict[str, Any]], source: str, found: Verification) -> list[Finding]:
    """Heads kept away from the database — a witness, an archive's manifest — against the ledger's
    seals: each must still be there with the same hash. Seals removed from the end with their
    heads and rows (triggers off) leave a ledger its own heads file agrees with; only a copy
    held elsewhere tells."""
    newest = seals.latest(conn)
    top = newest.number if newest else 0
    low = min((head["number"] for head in copies), default=top + 1)
    ledger = {seal.number: seal for seal in seals.between(conn, low, top)} if low <= top else {}
    found.witnessed += len(copies)
    findings = []
    removed = max((head["number"] for head in copies), default=0)
    if removed > top:
        findings.append(Finding(f"{source} holds the head of seal {removed}, and the ledger ends at seal {top}: "
                                f"the seals after {top} were removed", top + 1))
    for head in copies:
        number, seal = head["number"], ledger.get(head["number"])
        if seal is None and number <= top:
            findings.append(Finding(f"{source} holds its head, and the ledger has no such seal", number))
        elif seal is not None and seal.hash.hex() != head["hash"]:
            findings.append(Finding(f"its hash is {seal.hash.hex()}, {source} holds {head['hash']}: the seals from "
                                    f"{number} on differ from those {source} saw", number))
    return findings


def _check_manifests(conn: Connection, found: Verification) -> list[Finding]:
    """Every archive's manifests, kept beside its rows: they must still record each of its seals
    (a deleted manifest is a finding), and each seal they record must still be the ledger's."""
    findings = []
    held: dict[str, list[Any]] = {}
    for archive in conn.execute(select(archives).order_by(archives.c.number)):
        held.setdefault(archive.location, []).append(archive)
    for location, moved in held.items():
        try:
            files = archive_reader.manifest_files(location)
        except archive_reader.ArchiveUnreadable as error:
            findings.append(Finding(f"its archive's manifests cannot be read: {error}", moved[0].first_seal))
            continue
        recorded: set[int] = set()
        for path in files:
            try:
                copies = heads.parse_lines(heads.read_lines(path))
            except heads.HeadsUnreadable as error:
                findings.append(Finding(f"the archive's manifest {path} cannot be read: {error}"))
                continue
            recorded.update(head["number"] for head in copies)
            findings += _check_copies(conn, copies, f"the archive's manifest {path}", found)
        for archive in moved:
            missing = next((n for n in range(archive.first_seal, archive.last_seal + 1) if n not in recorded), None)
            if missing is not None:
                findings.append(Finding(f"archived in {location} (archive {archive.number}), and no manifest in "
                                        f"{archive_reader.manifests_folder(location)} records it (deleted?)", missing))
    return findings


def _signature_checker(public_key: bytes):
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    key = Ed25519PublicKey.from_public_bytes(public_key)

    def check(head: dict[str, Any]) -> bool:
        try:
            key.verify(bytes.fromhex(head.get("signature", "")), bytes.fromhex(head["hash"]))
            return True
        except (InvalidSignature, ValueError, KeyError):
            return False

    return check


# --- prove ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Inclusion:
    """A fact's proof of inclusion in its seal: its canonical row, leaf, position and audit path."""

    table: str
    key: str
    seq: int
    seal: seals.Seal
    index: int
    leaf: bytes
    path: list[bytes]
    row: bytes

    def checks(self) -> bool:
        return merkle.verify_inclusion(self.leaf, self.index, self.seal.leaves, self.path, self.seal.root)

    def as_json(self) -> dict[str, Any]:
        return {"table": self.table, "row": self.key, "seq": self.seq, "seal": self.seal.number,
                "seal_hash": self.seal.hash.hex(), "root": self.seal.root.hex(), "tree_size": self.seal.leaves,
                "leaf_index": self.index, "leaf": self.leaf.hex(), "canonical_row": self.row.hex(),
                "audit_path": [node.hex() for node in self.path], "verified": self.checks()}


def prove(conn: Connection, correlation_id: str) -> tuple[list[Inclusion], list[str]] | None:
    """Proofs of inclusion of every fact of the signal with ``correlation_id`` in its seal, and
    what of it is not sealed yet; None when there is no such signal."""
    found = conn.execute(ledger_statement("seals", "facts_of_signal"), {"correlation_id": correlation_id}).all()
    if not found:
        return None
    proofs, unsealed = [], []
    leaves_of: dict[int, list[bytes]] = {}
    for table, seq in found:
        seal = seals.covering(conn, seq) if seq is not None else None
        if seal is None:
            unsealed.append(f"{table}: " + ("not final yet (a settlement not carried out)" if seq is None
                                            else f"fact {seq}, for the next seal"))
            continue
        row = conn.execute(_rows(table, seq - 1, seq)).mappings().first()
        leaves = leaves_of.setdefault(seal.number, seals.stored_leaves(conn, seal.number))
        data = encode(table, row)
        leaf = merkle.leaf_hash(data)
        index = leaves.index(leaf) if leaf in leaves else -1
        path = merkle.inclusion_proof(leaves, index) if index >= 0 else []
        proofs.append(Inclusion(table, key_of(table, row), seq, seal, index, leaf, path, data))
    return proofs, unsealed
