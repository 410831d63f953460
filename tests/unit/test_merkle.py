"""RFC 6962 Merkle trees (ackstore/rules/merkle.py) against Certificate Transparency's reference
vectors, and their invariants on generated trees."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ackstore.rules import merkle

# RFC 6962's test leaves and the roots of their first n, n = 0..8 (certificate-transparency).
LEAVES = [bytes.fromhex(h) for h in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657",
                                     "606162636465666768696a6b6c6d6e6f")]
ROOTS = ["e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
         "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
         "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
         "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
         "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
         "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
         "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
         "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"]
PROOFS = [  # (leaf index, tree size, audit path)
    (0, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (5, 8, ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
]


@pytest.mark.parametrize("size", range(9))
def test_the_roots_are_rfc_6962s(size: int) -> None:
    assert merkle.root([merkle.leaf_hash(leaf) for leaf in LEAVES[:size]]).hex() == ROOTS[size]


@pytest.mark.parametrize(("index", "size", "path"), PROOFS)
def test_the_audit_paths_are_rfc_6962s(index: int, size: int, path: list[str]) -> None:
    hashed = [merkle.leaf_hash(leaf) for leaf in LEAVES[:size]]
    assert [p.hex() for p in merkle.inclusion_proof(hashed, index)] == path
    assert merkle.verify_inclusion(hashed[index], index, size, [bytes.fromhex(p) for p in path],
                                   bytes.fromhex(ROOTS[size]))


@given(st.lists(st.binary(max_size=8), min_size=1, max_size=70), st.data())
def test_every_leaf_proves_its_place_and_nothing_else_does(data: list[bytes], draw) -> None:
    """(A proof does not bind the tree's size: the seal does, with its counts.)"""
    hashed = [merkle.leaf_hash(d) for d in data]
    tree_root = merkle.root(hashed)
    index = draw.draw(st.integers(0, len(hashed) - 1))
    proof = merkle.inclusion_proof(hashed, index)
    assert merkle.verify_inclusion(hashed[index], index, len(hashed), proof, tree_root)
    assert not merkle.verify_inclusion(merkle.leaf_hash(data[index] + b"x"), index, len(hashed), proof, tree_root)
    assert not merkle.verify_inclusion(hashed[index], index, len(hashed), proof[:-1] or [tree_root], tree_root)
    if len(hashed) > 1:
        other = (index + 1) % len(hashed)
        assert not merkle.verify_inclusion(hashed[index], other, len(hashed), proof, tree_root) \
            or hashed[index] == hashed[other]


def test_a_leaf_cannot_pass_for_a_node() -> None:
    left, right = merkle.leaf_hash(b"a"), merkle.leaf_hash(b"b")
    assert merkle.root([left, right]) != merkle.root([merkle.leaf_hash(left + right)])


def test_a_seal_chains_its_predecessor_number_counts_and_root() -> None:
    root = merkle.root([merkle.leaf_hash(b"row")])
    counts = {"signals": 1, "acks": 2}
    first = merkle.seal_hash(merkle.GENESIS, 1, counts, root)
    expected = hashlib.sha256(bytes(32) + (1).to_bytes(8, "big") + b"\x04acks" + (2).to_bytes(8, "big")
                              + b"\x07signals" + (1).to_bytes(8, "big") + root).digest()
    assert first == expected, "the documented byte form, tables in name order"
    assert merkle.seal_hash(merkle.GENESIS, 1, dict(reversed(counts.items())), root) == first
    for changed in (merkle.seal_hash(first, 1, counts, root), merkle.seal_hash(merkle.GENESIS, 2, counts, root),
                    merkle.seal_hash(merkle.GENESIS, 1, {"signals": 1, "acks": 3}, root),
                    merkle.seal_hash(merkle.GENESIS, 1, counts, merkle.EMPTY_ROOT)):
        assert changed != first
