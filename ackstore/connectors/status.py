"""What a connector counts beside its metrics and says on its status line (every ten seconds and
when it stops), and the settlements it carried out, counted once each."""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Iterable

from ackstore.connectors.metrics import INBOUND, ConnectorMetrics
from ackstore.connectors.transport import Transport


@dataclass
class Counts:
    """What the connector counts beside its metrics, since it started."""

    taken: int = 0  # deliveries the session handed over (what --max-messages bounds; consumed, once in a batch)
    given_back: int = 0
    reconnects: int = 0


def status_line(metrics: ConnectorMetrics, counts: Counts, in_flight: int) -> str:
    """What the connector says every ten seconds and when it stops: its metrics' figures under
    their names — the same counts, so each means what the name means on every surface
    (docs/metrics.md, "One meaning per number"; decisions #128) — then what only this line says."""
    figures, carried_out = metrics.figures()
    inbound = ", ".join(f"{name} {figures[name]}" for name in INBOUND)
    decided = ", ".join(f"{decision} {count}" for decision, count in carried_out.items()) or "none"
    return (f"{inbound}, carried out: {decided}; in flight {in_flight}; given back {counts.given_back}; "
            f"published {figures['published']}; reconnects {counts.reconnects}; unsendable {figures['unsendable']}")


def count_carried_out(metrics: ConnectorMetrics, transport: Transport, decisions: Iterable[str]) -> None:
    """Settlements carried out, counted once per decision (the storing and the deciding thread both
    count), under what the transport performs instead when it cannot perform one."""
    tally = collections.Counter(decisions)
    for decision, count in tally.items():
        metrics.carried_out(decision, transport.carried_out_as(decision) or decision, count)
