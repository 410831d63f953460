"""The three dispositions a connector settles a delivery with: ack, reject, and redeliver (a
reject that requeues)."""

from __future__ import annotations

from ackstore.rules.connectivity import Settling

ACK = Settling(ack=True)
REJECT = Settling(ack=False, requeue=False)
REDELIVER = Settling(ack=False, requeue=True)
