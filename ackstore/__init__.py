"""ackstore: a batch acknowledgement ledger for digital twins, with Eclipse Ditto's QoS-1 semantics."""

from ackstore.errors import DittoError
from ackstore.settings import Settings
from ackstore.store import AckStore

__all__ = ["AckStore", "DittoError", "Settings"]
__version__ = "0.1.0"
