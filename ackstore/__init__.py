"""ackstore: a batch acknowledgement ledger for digital twins, with Eclipse Ditto's QoS-1 semantics.

Two layers (architecture.md, "Layout"): ``ackstore.rules`` is the pure domain — no I/O, no
database, no Spark — and ``ackstore.ledger`` is everything that talks to PostgreSQL.
``from ackstore import AckStore`` is loaded lazily, so importing the rules alone (as Spark's
Python workers do) never imports SQLAlchemy.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["AckStore", "DittoError", "Settings"]
__version__ = "0.1.0"

_EXPORTS = {
    "AckStore": "ackstore.ledger.store",
    "DittoError": "ackstore.rules.errors",
    "Settings": "ackstore.rules.settings",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ackstore' has no attribute {name!r}")
