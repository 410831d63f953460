"""The Ledger page's HTML read back: its tables as rows of cell texts, its text, and the health
strip's figures."""

from __future__ import annotations

from html.parser import HTMLParser


class Tables(HTMLParser):
    """Every <table id=…> of a page as rows of cell texts (headers included), and its text."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.text: list[str] = []
        self.ids: list[str] = []
        self._table: str | None = None
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs).get("id")
        if named:
            self.ids.append(named)
        if tag == "table" and named:
            self._table = named
            self.tables[named] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table:
            self.tables[self._table][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


class Strip(Tables):
    """The strip's status, its figures by id: (name, value, detail), their <li> classes (a figure's
    status), and the lines listed under a figure (the connectors) with theirs."""

    def __init__(self, html: str) -> None:
        self.figures: dict[str, list[str]] = {}
        self.classes: dict[str, str] = {}
        self.lines: dict[str, list[tuple[str, str]]] = {}
        self.status: str | None = None
        self._figure: str | None = None
        self._part: list[str] | None = None
        self._line: tuple[str, list[str]] | None = None
        self._in_status = False
        super().__init__(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        super().handle_starttag(tag, attrs)
        named = dict(attrs)
        if tag == "p" and named.get("id") == "status":
            self.status = named.get("class") or ""
        elif tag == "li" and (named.get("id") or "").startswith("health-"):
            self._figure = named["id"].removeprefix("health-")
            self.figures[self._figure] = []
            self.classes[self._figure] = named.get("class") or ""
            self.lines[self._figure] = []
        elif tag == "li" and self._figure:
            self._line = (named.get("class") or "", [])
        elif tag == "div" and self._figure:
            self._part = []

    def handle_endtag(self, tag: str) -> None:
        super().handle_endtag(tag)
        if tag == "div" and self._figure and self._part is not None:
            self.figures[self._figure].append(" ".join("".join(self._part).split()))
            self._part = None
        elif tag == "li" and self._line is not None and self._figure:
            self.lines[self._figure].append((" ".join("".join(self._line[1]).split()), self._line[0]))
            self._line = None
        elif tag == "li":
            self._figure = None

    def handle_data(self, data: str) -> None:
        super().handle_data(data)
        if self._part is not None:
            self._part.append(data)
        if self._line is not None:
            self._line[1].append(data)
