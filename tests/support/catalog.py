"""A database's schema as PostgreSQL's catalog describes it, for comparing two databases: tables
and their columns, constraints, indexes, triggers and statistics targets; views; functions (their
whole definition: arguments, result, volatility, parallel safety, security, settings, body);
sequences; who owns each and who may do what (privileges). Names only the current schema's
objects; columns are compared by name, not position (a migration adds a column at the end, a
declaration anywhere)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

# One query per kind of object; each returns (name, description) rows of the current schema.
_CATALOG = {
    "relations": """
        SELECT c.relname, jsonb_build_object('kind', c.relkind, 'persistence', c.relpersistence,
                                             'owner', pg_get_userbyid(c.relowner),
                                             'acl', (SELECT array_agg(a::text ORDER BY a::text) FROM unnest(c.relacl) a))
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'm', 'S', 'p')""",
    "columns": """
        SELECT c.relname || '.' || a.attname,
               jsonb_build_object('type', format_type(a.atttypid, a.atttypmod), 'not_null', a.attnotnull,
                                  'default', pg_get_expr(d.adbin, d.adrelid), 'identity', a.attidentity,
                                  'statistics', a.attstattarget,
                                  'acl', (SELECT array_agg(x::text ORDER BY x::text) FROM unnest(a.attacl) x))
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'p') AND a.attnum > 0 AND NOT a.attisdropped""",
    "constraints": """
        SELECT c.relname || '.' || k.conname, to_jsonb(pg_get_constraintdef(k.oid))
        FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema()""",
    "indexes": """
        SELECT i.indexname, to_jsonb(i.indexdef) FROM pg_indexes i WHERE i.schemaname = current_schema()""",
    "triggers": """
        SELECT c.relname || '.' || t.tgname, to_jsonb(pg_get_triggerdef(t.oid))
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND NOT t.tgisinternal""",
    "views": """
        SELECT c.relname, to_jsonb(pg_get_viewdef(c.oid))
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind = 'v'""",
    "functions": """
        SELECT p.oid::regprocedure::text,
               jsonb_build_object('definition', pg_get_functiondef(p.oid), 'owner', pg_get_userbyid(p.proowner),
                                  'acl', (SELECT array_agg(a::text ORDER BY a::text) FROM unnest(p.proacl) a))
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = current_schema()""",
    "schema": """
        SELECT n.nspname, jsonb_build_object('acl', (SELECT array_agg(a::text ORDER BY a::text) FROM unnest(n.nspacl) a))
        FROM pg_namespace n WHERE n.nspname = current_schema()""",
}

# Alembic's own bookkeeping is the migrations', not the schema's.
_NOT_SCHEMA = ("alembic_version",)


def catalog(conn: Connection) -> dict[str, dict[str, Any]]:
    """Every object of the current schema by kind and name, as the catalog describes it."""
    described: dict[str, dict[str, Any]] = {}
    for kind, query in _CATALOG.items():
        rows = conn.execute(text(query)).all()
        described[kind] = {name: value for name, value in rows if not name.startswith(_NOT_SCHEMA)}
    return described


def differences(left: dict[str, dict[str, Any]], right: dict[str, dict[str, Any]]) -> list[str]:
    """What differs between two catalogs, one line per object (empty: the same schema)."""
    lines = []
    for kind in _CATALOG:
        for name in sorted(left[kind].keys() | right[kind].keys()):
            if left[kind].get(name) != right[kind].get(name):
                lines.append(f"{kind} {name}: {left[kind].get(name)!r} != {right[kind].get(name)!r}")
    return lines
