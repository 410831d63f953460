#!/usr/bin/env python3
"""An auditor's own check of an ackstore ledger: standard-library Python, no ackstore import.

    python3 verify_export.py EXPORT_DIR HEADS_FILE [--public-key HEX] [--witness FILE]

EXPORT_DIR is what `ackstore export` wrote (export.json, tables.json, seals.jsonl, rows.jsonl); HEADS_FILE the
heads the seal step appended outside the database. Every row is encoded as PostgreSQL's binary
record of (table, columns in name order), hashed as an RFC 6962 leaf; every seal's tree, hash and
chain are recomputed and compared with the heads (and their Ed25519 signatures, given the key);
every exported seal must have its head. A witness (a later head kept elsewhere: a heads file, one
head's line, an archive manifest) names seals the export must still hold, with those hashes.
Prints the first difference (seal, table, row) and exits 1, or "verified" and exits 0; a heads
file, witness or export it cannot use is one line on stderr and exit 2 — never "verified".
"""
import argparse
import hashlib
import json
import os
import re
import struct
import sys

OIDS = {"bool": 16, "int2": 21, "int4": 23, "int8": 20, "text": 25, "timestamptz": 1184, "jsonb": 3802, "text[]": 1009}
SIZES = {"int2": 2, "int4": 4, "int8": 8}
Y2K = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970: PostgreSQL's epoch


def value(kind, v):
    if v is None:
        return struct.pack(">Ii", OIDS[kind], -1)
    if kind == "bool":
        data = b"\x01" if v else b"\x00"
    elif kind in SIZES:
        data = v.to_bytes(SIZES[kind], "big", signed=True)
    elif kind == "timestamptz":
        data = (v - Y2K).to_bytes(8, "big", signed=True)
    elif kind == "jsonb":
        data = b"\x01" + v.encode()
    elif kind == "text[]":
        data = struct.pack(">iiI", 1 if v else 0, int(None in v), 25) + (struct.pack(">ii", len(v), 1) if v else b"")
        data += b"".join(struct.pack(">i", -1) if e is None else struct.pack(">i", len(e.encode())) + e.encode() for e in v)
    else:
        data = v.encode()
    return struct.pack(">Ii", OIDS[kind], len(data)) + data


def leaf(table, row, types):
    data = struct.pack(">i", len(types) + 1) + value("text", table) + b"".join(value(types[c], row[c]) for c in sorted(types))
    return hashlib.sha256(b"\x00" + data).digest()


def root(leaves):
    if not leaves:
        return hashlib.sha256(b"").digest()
    level = list(leaves)
    while len(level) > 1:  # pairs left to right, an odd last node carried up: RFC 6962's tree
        paired = [hashlib.sha256(b"\x01" + level[i] + level[i + 1]).digest() for i in range(0, len(level) - 1, 2)]
        level = paired + level[-1:] if len(level) % 2 else paired
    return level[0]


def seal_hash(seal):
    parts = [bytes.fromhex(seal["previous"]), seal["number"].to_bytes(8, "big")]
    for table in sorted(seal["counts"]):
        parts += [bytes([len(table.encode())]), table.encode(), seal["counts"][table].to_bytes(8, "big")]
    return hashlib.sha256(b"".join(parts) + bytes.fromhex(seal["root"])).hexdigest()


# Ed25519 verification (RFC 8032 5.1.7), for signed heads.
P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
I = pow(2, (P - 1) // 4, P)


def add(a, b):
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    A, B = (y1 - x1) * (y2 - x2) % P, (y1 + x1) * (y2 + x2) % P
    C, E = t1 * 2 * D * t2 % P, z1 * 2 * z2 % P
    e, f, g, h = B - A, E - C, E + C, B + A
    return e * f % P, g * h % P, f * g % P, e * h % P


def mul(s, pt):
    q = (0, 1, 1, 0)
    while s:
        q, pt, s = (add(q, pt) if s & 1 else q), add(pt, pt), s >> 1
    return q


def point(b):
    y = int.from_bytes(b, "little") & ((1 << 255) - 1)
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    x = pow(x2, (P + 3) // 8, P)
    x = x * I % P if (x * x - x2) % P else x
    if y >= P or (x * x - x2) % P:
        return None
    x = P - x if (x & 1) != b[31] >> 7 else x
    return x, y, 1, x * y % P


G = point((4 * pow(5, P - 2, P) % P).to_bytes(32, "little"))


def ed25519_ok(public, signature, message):
    A, R = point(public), point(signature[:32])
    s = int.from_bytes(signature[32:], "little")
    if A is None or R is None or s >= L:
        return False
    h = int.from_bytes(hashlib.sha512(signature[:32] + public + message).digest(), "little") % L
    left, right = mul(s, G), add(R, mul(h, A))
    return all((u * right[2] - v * left[2]) % P == 0 for u, v in ((left[0], right[0]), (left[1], right[1])))


class Unusable(Exception):
    """An input that cannot be verified against: the one line saying why."""


def read_heads(path):
    """The heads of a heads file, as `ackstore verify` reads them (ackstore/ledger/heads.py): each
    line a head or a manifest listing heads under "seals"; blank lines and a torn last line (no
    newline, no closing brace) skipped; anything else refused."""
    if not os.path.exists(path):
        raise Unusable("it is not there")
    if not os.path.isfile(path):
        raise Unusable("it is not a file")
    try:
        text = open(path, "rb").read().decode("utf-8")
    except UnicodeDecodeError as error:
        raise Unusable(f"it is not UTF-8 text: {error}") from None
    lines, heads = text.split("\n"), []
    for number, line in enumerate(lines, 1):
        if not line.strip() or (number == len(lines) and not line.rstrip().endswith("}")):
            continue
        try:
            heads += heads_of(json.loads(line))
        except (ValueError, RecursionError) as error:
            raise Unusable(f"line {number} is not a head: {error}") from None
    if not heads:
        raise Unusable("it holds no head")
    return heads


def heads_of(value):
    found = value.get("seals") if isinstance(value, dict) and "number" not in value else [value]
    if not isinstance(found, list):
        raise ValueError("it is neither a head nor a manifest's seals")
    for head in found:
        if not isinstance(head, dict):
            raise ValueError("it is not a JSON object")
        number, digest = head.get("number"), head.get("hash")
        if not isinstance(number, int) or isinstance(number, bool) or number < 1:
            raise ValueError("its number is not a seal number (a whole number, 1 or more)")
        if not isinstance(digest, str) or not re.fullmatch("[0-9a-f]{64}", digest):
            raise ValueError(f"the hash of head {number} is not 64 hex digits")
        if not isinstance(head.get("signature", ""), str):
            raise ValueError(f"the signature of head {number} is not hex text")
    return found


def signed(key, head):
    try:
        signature = bytes.fromhex(head.get("signature", ""))
    except ValueError:  # not hex
        return False
    return len(signature) == 64 and ed25519_ok(key, signature, bytes.fromhex(head["hash"]))


def check(export, heads, key, witness=None):
    asked = json.load(open(f"{export}/export.json"))  # {"from": N, "to": M or null: the newest}
    types = json.load(open(f"{export}/tables.json"))
    seals = [json.loads(line) for line in open(f"{export}/seals.jsonl")]
    rows = {}
    for number, line in enumerate(open(f"{export}/rows.jsonl"), 1):
        fact = json.loads(line)
        rows.setdefault(fact["seal"], []).append((number, fact))
    previous = None
    for seal in seals:
        n, facts = seal["number"], rows.get(seal["number"], [])
        if previous and (n != previous["number"] + 1 or seal["previous"] != previous["hash"]):
            return f"seal {n}: does not follow seal {previous['number']} (a seal is missing or changed)"
        if seal_hash(seal) != seal["hash"]:
            return f"seal {n}: its hash is not the hash of its number, counts and root"
        sealed = [bytes.fromhex(f["leaf"] or "") for _, f in facts]
        for table in seal["counts"]:
            if sum(f["table"] == table for _, f in facts) != seal["counts"][table]:
                return f"seal {n}, table {table}: a row is missing or added ({seal['counts'][table]} were sealed)"
        if root(sealed).hex() != seal["root"]:
            return f"seal {n}: its leaves are not its tree (rows missing, added or reordered)"
        for line, f in facts:
            if leaf(f["table"], f["row"], types[f["table"]]) != bytes.fromhex(f["leaf"]):
                return f"seal {n}, table {f['table']}, row seq={f['row'].get('seq')} (rows.jsonl line {line}): not as sealed"
        previous = seal
    if seals and seals[0]["number"] != asked["from"]:
        return f"seal {asked['from']}: missing from the export, which begins at seal {seals[0]['number']}"
    by_number = {seal["number"]: seal for seal in seals}
    attested = set()
    for head in heads:
        if head["number"] < asked["from"] or (asked["to"] is not None and head["number"] > asked["to"]):
            continue
        attested.add(head["number"])
        seal = by_number.get(head["number"])
        if seal is None:
            return f"seal {head['number']}: exported as a head, missing from the export (and the ledger)"
        if seal["hash"] != head["hash"]:
            return f"seal {head['number']}: its hash differs from the exported head's"
        if key and not signed(key, head):
            return f"seal {head['number']}: the head's signature is not the key's"
    newest = max(attested, default=None)
    unattested = sorted(set(by_number) - attested)
    if unattested and newest is not None and unattested[0] < newest:
        return f"seal {unattested[0]}: in the export, and its head is missing (a head was removed)"
    if unattested:
        why = (f": the heads end at seal {newest} (a head was removed, or not exported yet)" if newest
               else " (are these the seal step's heads?)")
        return f"seal {unattested[0]}: no head covers it or any later seal{why}"
    return check_witness(seals, by_number, asked, witness or [])


def check_witness(seals, by_number, asked, witness):
    """Seals removed from the end with their heads leave an export and heads that agree: a later
    head kept elsewhere must still be in the export, with its hash."""
    top = seals[-1]["number"] if seals else asked["from"] - 1
    for head in witness:
        n, seal = head["number"], by_number.get(head["number"])
        if seal is None and asked["to"] is None and n > top:
            return f"seal {n}: the witness holds its head, the export ends at seal {top}: the seals after {top} were removed"
        if seal is None:
            return f"seal {n}: the witness holds its head, and it is not in the export (export the seals it names)"
        if seal["hash"] != head["hash"]:
            return f"seal {n}: its hash differs from the witness's: the seals from {n} on are not those it saw"
    return None


def main():
    arguments = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    arguments.add_argument("export")
    arguments.add_argument("heads")
    arguments.add_argument("--public-key", help="the Ed25519 public key the heads are signed with, 32 bytes in hex")
    arguments.add_argument("--witness", help="a later head kept elsewhere: a heads file, one head's line, a manifest")
    args = arguments.parse_args()
    try:
        key = bytes.fromhex(args.public_key) if args.public_key else None
        if key is not None and len(key) != 32:
            raise ValueError("not 32 bytes")
    except ValueError as error:
        return unusable(f"the public key cannot be used: {error}")
    inputs = [("heads", args.heads)] + ([("witness", args.witness)] if args.witness else [])
    read = {}
    for name, path in inputs:
        try:
            read[name] = read_heads(path)
        except (Unusable, OSError) as error:
            return unusable(f"the {name} {path} cannot be used: {error}")
    try:
        problem = check(args.export, read["heads"], key, read.get("witness"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as error:
        return unusable(f"the export {args.export} cannot be read: {type(error).__name__}: {error}")
    print(problem or "verified")
    return 1 if problem else 0


def unusable(why):
    print(" ".join(why.split()), file=sys.stderr)  # one line, whatever the error said
    return 2


if __name__ == "__main__":
    sys.exit(main())
