"""The three dispositions a connector settles a delivery with: ack, reject, and redeliver (a
reject that requeues)."""

from __future__ import annotations

from ackstore.rules.connectivity import Disposition

ACK = Disposition(ack=True)
REJECT = Disposition(ack=False, requeue=False)
REDELIVER = Disposition(ack=False, requeue=True)
