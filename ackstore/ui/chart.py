"""The Ledger page's latency chart: an SVG drawn on the server (the machine reaches no CDN, and a
chart of 24 points needs no library)."""

from __future__ import annotations

from datetime import datetime, timedelta
from html import escape
from typing import Any, Sequence

WIDTH, HEIGHT = 640, 180
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 14, 26
SERIES = (("p50", "#2b6cb0", "p50"), ("p95", "#c05621", "p95"))


def latency_svg(rows: Sequence[dict[str, Any]], since: datetime, until: datetime, measure: str) -> str:
    """One source's ``measure`` (from report_latency, a row per bucket) as p50 and p95 lines over
    [since, until): x is the bucket's start, y seconds from 0 to the largest p95."""
    points = [row for row in rows if row["measure"] == measure and row["p50"] is not None]
    top = max([row["p95"] for row in points] + [1e-3])
    span = (until - since).total_seconds()
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(at: datetime) -> float:
        return LEFT + plot_w * min(max((at - since).total_seconds() / span, 0.0), 1.0)

    def y(seconds: float) -> float:
        return TOP + plot_h * (1 - seconds / top)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
             f'height="{HEIGHT}" role="img" aria-label="{escape(measure)} seconds, p50 and p95">',
             f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#ccc"/>',
             f'<text x="{LEFT - 6}" y="{TOP + 10}" text-anchor="end" font-size="11">{_seconds(top)}</text>',
             f'<text x="{LEFT - 6}" y="{TOP + plot_h}" text-anchor="end" font-size="11">0</text>']
    for hours in range(0, int(span // 3600), 6):  # the last tick (now) would run off the plot
        at = since + timedelta(hours=hours)
        parts.append(f'<text x="{x(at):.1f}" y="{HEIGHT - 8}" text-anchor="middle" font-size="11">'
                     f'{at:%H:%M}</text>')
    for key, colour, name in SERIES:
        coords = " ".join(f"{x(row['bucket_start']):.1f},{y(row[key]):.1f}" for row in points)
        if len(points) > 1:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{coords}"/>')
        parts += [f'<circle cx="{x(row["bucket_start"]):.1f}" cy="{y(row[key]):.1f}" r="3" fill="{colour}">'
                  f'<title>{name} {_seconds(row[key])} ({row["measured"]} signals from '
                  f'{row["bucket_start"]:%H:%M})</title></circle>' for row in points]
    parts.append(f'<text x="{LEFT + 8}" y="{TOP + 14}" font-size="11" fill="{SERIES[0][1]}">p50</text>'
                 f'<text x="{LEFT + 40}" y="{TOP + 14}" font-size="11" fill="{SERIES[1][1]}">p95</text>')
    if not points:
        parts.append(f'<text x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" text-anchor="middle" '
                     f'font-size="12">nothing decided in this window</text>')
    parts.append("</svg>")
    return "".join(parts)


def _seconds(value: float) -> str:
    return f"{value:.3g} s" if value < 120 else f"{value / 60:.3g} min"
