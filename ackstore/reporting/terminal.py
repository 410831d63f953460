"""The reports and a signal's timeline in a terminal (rich), readable at 80 columns and piped.

Tables stay whole: a header is never folded (its column is at least as wide as it); a value may
fold within its column; and a report whose headers alone do not fit is printed one record per
block instead. Every cell and title is a rich ``Text`` of shown text (``tables``,
``shown_text.shown``): never parsed as markup, its width measured on what is shown.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timezone
from typing import Any, Protocol, Sequence

from rich import box
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from ackstore.reporting.tables import TERMINAL, Cell, Column, Table, on
from ackstore.reporting.shown_text import shown
from ackstore.reporting.timeline import TIMELINE, described

GAP = 2  # the space between two columns of a report's table
NOTHING = "(nothing)"


def print_table(table: Table, console: Console | None = None) -> None:
    """A table whose headers stay whole, or one block per record when even the headers do not fit."""
    console = console or Console()
    cells = table.cells()
    widths = _widths(table.columns, cells, console.width)
    if widths is None:
        return _print_blocks(console, table, cells)
    console.print(Text(table.title))  # wrapped at the console's width, not the (narrower) table's
    grid = RichTable(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for column, width in zip(table.columns, widths):
        grid.add_column(Text(column.header), width=width, overflow="fold", no_wrap=column.numeric,
                        justify="right" if column.numeric else "left")
    for row in cells:
        grid.add_row(*(Text(cell.text) for cell in row))
    console.print(grid)
    if not cells:
        console.print(Text(NOTHING))


def _widths(columns: Sequence[Column], cells: list[list[Cell]], room: int) -> list[int] | None:
    """Each column's width so the table fits ``room``: numbers whole, every header whole, the
    widest text columns folded first; None when even that does not fit."""
    from rich.cells import cell_len

    natural = [max([cell_len(column.header), *(cell_len(row[i].text) for row in cells)])
               for i, column in enumerate(columns)]
    least = [natural[i] if column.numeric else cell_len(column.header) for i, column in enumerate(columns)]
    room -= GAP * (len(columns) - 1)
    if sum(least) > room:
        return None
    widths = list(natural)
    while sum(widths) > room:  # fold the widest text column by one, down to its header
        widest = max((i for i in range(len(widths)) if widths[i] > least[i]), key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def _print_blocks(console: Console, table: Table, cells: list[list[Cell]]) -> None:
    console.print(Text(table.title))
    if not cells:
        console.print(Text(NOTHING))
    for n, row in enumerate(cells, 1):
        block = RichTable.grid(padding=(0, 2))
        block.add_column(no_wrap=True)
        block.add_column(overflow="fold")
        for cell in row:
            block.add_row(Text(cell.column.header), Text(cell.text))
        console.print(Text(f"— {n} —"))
        console.print(block)


# --- how each report prints (registry.Report.render) ----------------------------------------------

class Printed(Protocol):
    """What the terminal reads of a report: ``registry.Report`` is one, and this module imports no
    registry (the registry names these functions as its reports' ``render``)."""

    @property
    def name(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def key(self) -> str: ...  # the key its rows are nested under when another report carries it

    @property
    def columns(self) -> tuple[Column, ...]: ...

    @property
    def carries(self) -> Printed | None: ...


def print_rows(report: Printed, heading: str, rows: list[dict[str, Any]], console: Console) -> None:
    """One table of the report's rows."""
    print_table(Table(on(TERMINAL, report.columns), rows, heading), console)


def print_per_source(report: Printed, heading: str, rows: list[dict[str, Any]], console: Console) -> None:
    """One table per source (latency: each bucket's measures in order)."""
    if not rows:
        console.print(Text(heading))
        console.print(Text(NOTHING))
    for source in dict.fromkeys(row["source"] for row in rows):
        ours = [row for row in rows if row["source"] == source]
        print_table(Table(on(TERMINAL, report.columns), ours, f"{heading}\nsource {shown(source)}"), console)


def print_with_carried(report: Printed, heading: str, rows: list[dict[str, Any]], console: Console) -> None:
    """The report's table, then each source's carried rows (watermarks: the unsettled after it, with why)."""
    print_rows(report, heading, rows, console)
    carried = report.carries
    assert carried is not None, f"{report.name} carries no report"
    for row in rows:
        if row[carried.key]:
            print_table(Table(on(TERMINAL, carried.columns), row[carried.key],
                              f"{shown(row['source'])}: {carried.title}"), console)


# --- ackstore show --------------------------------------------------------------------------------

def render_timeline(state: dict[str, Any], timeline: list[dict[str, Any]], console: Console | None = None) -> None:
    """A signal's checkpoints, oldest first, under a line that names the signal. Readable when
    piped or at 80 columns: every column but the detail is kept whole (an ack's label goes with
    its checkpoint), the detail wraps at words, and times show their date only when the
    checkpoints span more than one day (the title names it otherwise)."""
    days = {row["at"].astimezone(timezone.utc).date() for row in timeline}
    title = (f"{shown(state['correlation_id'])}: {described(state)}"
             + (f"; times on {next(iter(days))} (UTC)" if len(days) == 1 else "; times in UTC"))
    columns = [replace(column, kind="clock") if column.kind == "moment" and len(days) == 1 else column
               for column in on(TERMINAL, TIMELINE)]
    console = console or Console()
    console.print(Text(title))
    if state.get("archived"):
        where = state["archived"]
        console.print(Text(f"archived: sealed in seal {where['seal']}, archive {where['archive']} "
                           f"({shown(where['location'])}, {where['archived_at']})"))
    grid = RichTable(box=None, pad_edge=False)
    for column in columns:
        folds = column.key == "detail"
        grid.add_column(Text(column.header), justify="right" if column.numeric else "left", no_wrap=not folds,
                        overflow="fold" if folds else "ellipsis", ratio=1 if folds else None)
    for row in timeline:
        labelled = {**row, "checkpoint": f"{row['checkpoint']} {row['label']}" if row["label"] else row["checkpoint"]}
        grid.add_row(*(Text(column.text(labelled[column.key])) for column in columns))
    console.print(grid)
