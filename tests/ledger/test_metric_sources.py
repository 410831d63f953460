"""Metric labels of bounded cardinality (issue 50, decisions #127): one ingest login storing a signal
under each of a thousand source names once made 24 050 series and a 505 ms scrape. Now the API's,
the CLI's and the first ACKSTORE_METRIC_SOURCES connections claimed have series of their own, and
every other source is ``other``: the series a scrape serves, the rows the seals roll up and what
a scrape reads stay bounded however many sources there are (what it reads: test_bounded.py's
EXPLAINs), no counter moves between series from one scrape to the next, and every known source is
served from 0."""

from __future__ import annotations

from collections import defaultdict

from prometheus_client import generate_latest
from sqlalchemy import Engine, text

from ackstore.ledger import seals
from ackstore.ledger.metrics import OTHER, Gauge, folded
from ackstore.reporting import metrics
from ackstore.rules.settings import METRIC_SOURCES
from benchmarks import history
from tests.support.scraped import Samples, samples

CAP = 5  # a small cap, so that a few hundred sources are far past it


def scraped(engine: Engine, cap: int = CAP) -> Samples:
    return samples(generate_latest(metrics.registry_for(engine, cap)).decode())


def per_source(found: Samples, name: str) -> dict[str, float]:
    summed: dict[str, float] = defaultdict(float)
    for (sample, labels), value in found.items():
        if sample == name:
            summed[dict(labels)["source"]] += value
    return dict(summed)


def sources_served(found: Samples) -> set[str]:
    return {dict(labels)["source"] for (_, labels) in found if "source" in dict(labels)}


def url_of(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def test_thousands_of_sources_serve_the_series_of_the_first_ones_and_other(engine: Engine) -> None:
    history.add_sources(url_of(engine), 3 * CAP, "early-")
    few = scraped(engine)
    history.add_sources(url_of(engine), 2_000, "flood-")
    many = scraped(engine)

    kept = {"api", "cli", *(f"early-{n}" for n in range(CAP))}
    assert sources_served(few) == sources_served(many) == kept | {OTHER}
    assert len(many) == len(few), "the same series, whatever the number of sources"
    stored = per_source(many, "ackstore_signals_stored_total")
    assert stored == {**{f"early-{n}": 1.0 for n in range(CAP)}, "api": 0.0, "cli": 0.0, OTHER: 2 * CAP + 2_000.0}
    assert per_source(many, "ackstore_settlements_carried_out_total")[OTHER] == 2 * CAP + 2_000


def test_the_seal_rolls_the_sources_past_the_first_ones_up_as_other_and_nothing_moves(engine: Engine) -> None:
    url = url_of(engine)
    history.add_sources(url, 300, "s-")
    before = scraped(engine)
    assert seals.seal(engine, metric_sources=CAP) is not None
    with engine.connect() as conn:
        rolled = set(conn.execute(text("SELECT DISTINCT source FROM metric_totals")).scalars())
        rows = conn.execute(text("SELECT count(*) FROM metric_totals")).scalar_one()
    assert rolled == {*(f"s-{n}" for n in range(CAP)), OTHER}
    assert rows <= (CAP + 1) * 30, rows  # a few rows per source, never one per source named
    assert _counters(scraped(engine)) == _counters(before), "a seal moved a counter"
    # a connection claimed after the first ones: counted in 'other' before and after its next seal
    history.add_sources(url, 1, "late-")
    assert per_source(scraped(engine), "ackstore_signals_stored_total")[OTHER] == 300 - CAP + 1
    seals.seal(engine, metric_sources=CAP)
    assert per_source(scraped(engine), "ackstore_signals_stored_total")[OTHER] == 300 - CAP + 1


def _counters(found: Samples) -> Samples:
    return {key: value for key, value in found.items() if key[0].endswith(("_total", "_bucket", "_count", "_sum"))}


def test_every_known_source_is_served_from_0(engine: Engine) -> None:
    """A connection claimed with nothing stored, the API and the CLI, and 'other' once a connection
    is past the first ones: every counter and gauge of theirs, at 0 — a connection's settlement
    figures for connections alone (a histogram is served once it has an observation)."""
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO connections (id, owner_login, claimed_at) SELECT 'c' || i, session_user, "
                          "now() + i * interval '1 second' FROM generate_series(0, :n) i"), {"n": CAP})
    found = scraped(engine)
    assert sources_served(found) == {"api", "cli", *(f"c{n}" for n in range(CAP)), OTHER}
    assert all(value == 0 for (name, _), value in found.items()
               if name.startswith("ackstore_") and name.endswith(("_total", "_bucket", "_count", "_sum")))
    for name, labels in (("ackstore_dead_letters_total", {"source": "c0"}),
                         ("ackstore_dead_letters_total", {"source": OTHER}),
                         ("ackstore_late_acks_total", {"source": "api"}),
                         ("ackstore_requests_decided_total", {"source": "cli", "status_class": "5xx"}),
                         ("ackstore_settlements_carried_out_total",
                          {"source": "c1", "decision": "redeliver", "carried_out_as": "ack"}),
                         ("ackstore_oldest_unsettled_age_seconds", {"source": "api"}),
                         ("ackstore_held_undecided", {"source": "c3"})):
        assert found[(name, tuple(sorted(labels.items())))] == 0, (name, labels)
    assert ("ackstore_dead_letters_total", (("source", "api"),)) not in found, "the API settles nothing on a broker"
    assert ("ackstore_held_undecided", (("source", "cli"),)) not in found
    assert not any(name.startswith("ackstore_received_to_decided") for name, _ in found)


def test_the_cap_is_the_setting_and_its_default() -> None:
    assert METRIC_SOURCES == 50
    assert metrics.LedgerCollector(engine=None).metric_sources == METRIC_SOURCES  # type: ignore[arg-type]


def test_the_gauges_of_the_sources_past_the_first_ones_add_up_as_each_says() -> None:
    gauges = [Gauge("oldest_unsettled_age_seconds", "a", 10), Gauge("oldest_unsettled_age_seconds", "x", 30),
              Gauge("oldest_unsettled_age_seconds", "y", 20), Gauge("held_undecided", "x", 2),
              Gauge("held_undecided", "y", 3), Gauge("connector_last_seen_timestamp_seconds", "x", 100),
              Gauge("connector_last_seen_timestamp_seconds", "y", 50), Gauge("queue_pending", "apply", 4)]
    assert sorted(folded(gauges, {"a"}), key=lambda g: (g.metric, g.label)) == [
        Gauge("connector_last_seen_timestamp_seconds", OTHER, 50),  # the most silent of them
        Gauge("held_undecided", OTHER, 5),
        Gauge("oldest_unsettled_age_seconds", "a", 10), Gauge("oldest_unsettled_age_seconds", OTHER, 30),
        Gauge("queue_pending", "apply", 4),  # not a source's
    ]
