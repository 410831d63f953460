"""RFC 6962 Merkle trees (issue 28's seals): what a seal's root is, how a fact's inclusion in it is
proved, and how a seal chains to the one before. Pure: bytes in, bytes out.

* A leaf is ``SHA-256(0x00 ‖ data)``; a node is ``SHA-256(0x01 ‖ left ‖ right)`` (RFC 6962 2.1),
  so no leaf can pass for a node.
* The tree of n leaves splits at the largest power of two below n; the empty tree's root is
  ``SHA-256()``.
* An inclusion proof is the audit path of RFC 6962 2.1.1, checked as RFC 9162 2.1.3.2 says.
* A seal's hash is ``SHA-256(previous ‖ number ‖ counts ‖ root)``: the previous seal's hash (32
  zero bytes before the first), the seal's number as 8 bytes big-endian, the row count of each
  table in table-name order (a 1-byte name length, the name in UTF-8, the count as 8 bytes
  big-endian), and the root.
"""

from __future__ import annotations

import hashlib
from typing import Mapping, Sequence

HASH_BYTES = 32
GENESIS = bytes(HASH_BYTES)  # the "previous" of the first seal
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


def root(leaves: Sequence[bytes]) -> bytes:
    """The Merkle tree hash of these leaf hashes (RFC 6962 2.1's MTH, leaves already hashed)."""
    if not leaves:
        return EMPTY_ROOT
    level = list(leaves)
    sha256 = hashlib.sha256
    # Bottom-up: pairing left to right and carrying an odd last node up unchanged gives the
    # same tree as RFC 6962's split at the largest power of two.
    while len(level) > 1:
        carried = level[-1:] if len(level) % 2 else []
        pairs = iter(level)
        level = [sha256(b"\x01" + left + right).digest() for left, right in zip(pairs, pairs)] + carried
    return level[0]


def inclusion_proof(leaves: Sequence[bytes], index: int) -> list[bytes]:
    """The audit path of leaf ``index`` among ``leaves`` (RFC 6962 2.1.1), nearest sibling first."""
    if not 0 <= index < len(leaves):
        raise IndexError(f"leaf {index} of a tree of {len(leaves)}")
    if len(leaves) == 1:
        return []
    k = _split(len(leaves))
    if index < k:
        return inclusion_proof(leaves[:k], index) + [root(leaves[k:])]
    return inclusion_proof(leaves[k:], index - k) + [root(leaves[:k])]


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes], expected_root: bytes) -> bool:
    """Whether ``proof`` shows leaf hash ``leaf`` at ``index`` in the tree of ``size`` leaves whose
    root is ``expected_root`` (RFC 9162 2.1.3.2)."""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for sibling in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(sibling, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, sibling)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == expected_root


def seal_hash(previous: bytes, number: int, counts: Mapping[str, int], tree_root: bytes) -> bytes:
    """A seal's hash, chaining it to ``previous`` (module docstring)."""
    if len(previous) != HASH_BYTES or len(tree_root) != HASH_BYTES:
        raise ValueError("a seal chains 32-byte hashes")
    parts = [previous, number.to_bytes(8, "big")]
    for table in sorted(counts):
        name = table.encode("utf-8")
        if len(name) > 255:
            raise ValueError(f"table name {table!r} is longer than 255 bytes")
        parts += [len(name).to_bytes(1, "big"), name, counts[table].to_bytes(8, "big")]
    parts.append(tree_root)
    return hashlib.sha256(b"".join(parts)).digest()
