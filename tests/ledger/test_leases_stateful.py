"""Leases as a state machine (A.3): pulls by competing consumers, lease expiries on a clock the
test controls, acks with current, superseded, repeated and forged tokens — against the real
PostgreSQL, compared with a model after every step."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import Engine, text

from ackstore.ledger.store import AckStore
from ackstore.rules.settings import Settings
from tests.support.ledger import ack_message, empty
from tests.support.live_signals import Clock, live_message, with_token

LABEL = "app:done"


@dataclass
class Handed:
    """The model of one signal: its hand-outs' tokens, the current lease's end, whether answered."""

    tokens: list[str] = field(default_factory=list)
    lease_end: float = float("-inf")  # seconds on the test clock
    answered_with: str | None = None


class LeaseMachine(RuleBasedStateMachine):
    engine: Engine

    @initialize()
    def start(self) -> None:
        with self.engine.begin() as conn:
            empty(conn)
        self.clock = Clock(self.engine)
        self.seconds = 0.0
        self.store = AckStore(self.engine, Settings(), clock=self.clock)
        assert self.store.declare("app", [LABEL], channels=["live"])["status"] == 204
        self.signals: dict[str, Handed] = {}
        self.counts: dict[str, int] = {}

    @rule()
    def submit(self) -> None:
        cid = f"c{len(self.signals)}"
        assert self.store.submit(live_message(cid, requested_acks=[LABEL], response_required=False))["status"] == 202
        self.signals[cid] = Handed()

    @rule(size=st.integers(1, 4), lease=st.sampled_from([5, 10, 30]))
    def pull(self, size: int, lease: int) -> None:
        available = [cid for cid, s in self.signals.items() if s.answered_with is None and s.lease_end <= self.seconds]
        messages = self.store.pull("app", max=size, lease=f"{lease}s")
        got = [m["headers"]["correlation-id"] for m in messages]
        assert got == available[:size]  # oldest first, only what is free, never one under a live lease
        for message in messages:
            cid = message["headers"]["correlation-id"]
            count = message["headers"]["delivery-count"]
            assert count == self.counts.get(cid, 0) + 1  # never decreases, never skips
            self.counts[cid] = count
            self.signals[cid].tokens.append(message["headers"]["ack-token"])
            self.signals[cid].lease_end = self.seconds + lease

    @rule(seconds=st.sampled_from([1, 6, 11, 31]))
    def wait(self, seconds: int) -> None:
        self.seconds += seconds
        self.clock.advance(seconds)

    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        handed = [cid for cid, s in self.signals.items() if s.tokens]
        if not handed:
            return
        cid = data.draw(st.sampled_from(handed))
        model = self.signals[cid]
        token = data.draw(st.sampled_from(model.tokens))
        answer = self.store.acknowledge("app", with_token(ack_message(cid, LABEL, 200, channel="live"), token))
        if token != model.tokens[-1]:
            assert answer["status"] == 412 and answer["error"] == "acknowledgement:lease.superseded"
            return
        assert answer == {"status": 204}
        model.answered_with = model.answered_with or token

    @rule()
    def ack_with_a_forged_token(self) -> None:
        if not self.signals:
            return
        cid = next(iter(self.signals))
        answer = self.store.acknowledge("app", with_token(ack_message(cid, LABEL, 200, channel="live"), "7.forged"))
        assert answer["status"] == 400 and answer["error"] == "acknowledgement:token.invalid"

    @invariant()
    def ledger_matches_the_model(self) -> None:
        if not hasattr(self, "store"):
            return
        with self.engine.connect() as conn:
            stored = dict(conn.execute(text(
                "SELECT s.correlation_id, count(*) FROM acks k JOIN signals s ON s.id = k.signal_id GROUP BY 1")).all())
            counted = conn.execute(text(
                "SELECT count(*) FROM (SELECT signal_id, label FROM acks WHERE disposition = 'counted' "
                "GROUP BY 1, 2 HAVING count(*) > 1) x")).scalar_one()
            open_ = set(conn.execute(text(
                "SELECT s.correlation_id FROM deliveries d JOIN signals s ON s.id = d.signal_id "
                "WHERE d.done_at IS NULL")).scalars())
        assert counted == 0  # at most one counted ack per (signal, label)
        answered = {cid for cid, s in self.signals.items() if s.answered_with}
        assert stored == {cid: 1 for cid in answered}  # one ack each, none with a superseded token
        # Every signal is acknowledged, or still open: leased now or free for the next pull.
        assert open_ == set(self.signals) - answered


def test_leases_hold_under_any_interleaving(engine: Engine) -> None:
    LeaseMachine.engine = engine
    run_state_machine_as_test(
        LeaseMachine, settings=settings(max_examples=30, stateful_step_count=30, deadline=None)
    )
