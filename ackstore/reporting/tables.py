"""The table model the terminal and the Ledger page both render: a report's columns and rows,
each cell formatted (``shown_values``) and shown (``shown_text.shown``) once, for either surface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ackstore.reporting.shown_text import shown
from ackstore.reporting.shown_values import FORMATS

TERMINAL, PAGE = "terminal", "page"  # the surfaces a column may be shown on


@dataclass(frozen=True)
class Column:
    """A report column: its row key, its header, how a value is shown (``values.FORMATS``), on
    which surfaces, and what stands for NULL."""

    key: str
    header: str
    kind: str = "text"  # text | count | seconds | time | bucket | measure | moment | clock | statuses
    on: tuple[str, ...] = (TERMINAL, PAGE)
    absent: str = ""

    @property
    def numeric(self) -> bool:
        return self.kind in ("count", "seconds")

    @property
    def page_header(self) -> str:
        return f"{self.header} (UTC)" if self.kind in ("time", "moment") else self.header

    def text(self, value: Any) -> str:
        """``value`` as this column shows it: formatted, every character visible."""
        return self.absent if value is None else shown(FORMATS[self.kind](value))


@dataclass(frozen=True)
class Cell:
    column: Column
    value: Any  # as read (the page links a correlation id by it)
    text: str  # as shown


@dataclass(frozen=True)
class Table:
    """Rows in the columns of one surface, under a title (already shown: whoever writes stored
    text into a title passes it through ``shown_text.shown``)."""

    columns: tuple[Column, ...]
    rows: Sequence[dict[str, Any]]
    title: str = ""

    def cells(self) -> list[list[Cell]]:
        return [[Cell(column, row.get(column.key), column.text(row.get(column.key))) for column in self.columns]
                for row in self.rows]


def on(surface: str, columns: Sequence[Column]) -> tuple[Column, ...]:
    return tuple(column for column in columns if surface in column.on)
