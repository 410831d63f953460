"""What a Prometheus endpoint serves, parsed (prometheus_client's own parser): every sample by its
name and its labels, sorted — the one reading the metrics tests share."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]


def samples(exposition: str) -> Samples:
    """Every sample of a Prometheus text exposition, by name and sorted labels."""
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(exposition) for sample in family.samples}


def scrape(url: str, timeout: float = 30) -> Samples:
    """Every sample served at ``url`` (a ``…/metrics`` address)."""
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return samples(answer.read().decode())
