"""What each group role may do on the ledger's database, read from the catalog, and the same as
docs/roles.md states it (its table "Every privilege, role by role"): tests/pipeline/test_roles.py compares
the two."""

from __future__ import annotations

import re

from sqlalchemy import Connection, text

from ackstore.ledger.objects import component_roles
from tests.support.paths import ROOT

ROLES_MD = ROOT / "docs" / "roles.md"
TABLE_HEADING = "## Every privilege, role by role"
GROUPS = component_roles()  # grants.sql's roles (ackstore_admin owns everything: it holds no grant)

# (role, privilege, object): an object is "database", "schema public", a table or view by name, a
# column as "table.column", a function by name. Privileges a role holds through PUBLIC count
# (TEMPORARY on the database, EXECUTE on a SECURITY DEFINER function); EXECUTE on an ordinary
# function does not (it runs with the caller's privileges, and touches nothing they do not allow).
CATALOG = """
SELECT r.rolname, p.privilege, 'database'
FROM pg_roles r CROSS JOIN unnest(ARRAY['CONNECT', 'TEMPORARY', 'CREATE']) AS p(privilege)
WHERE r.rolname = ANY (:roles) AND has_database_privilege(r.rolname, current_database(), p.privilege)
UNION ALL
SELECT r.rolname, p.privilege, 'schema public'
FROM pg_roles r CROSS JOIN unnest(ARRAY['USAGE', 'CREATE']) AS p(privilege)
WHERE r.rolname = ANY (:roles) AND has_schema_privilege(r.rolname, 'public', p.privilege)
UNION ALL
SELECT g.grantee, g.privilege_type, g.table_name
FROM information_schema.role_table_grants g WHERE g.grantee = ANY (:roles) AND g.table_schema = 'public'
UNION ALL
SELECT g.grantee, g.privilege_type, g.table_name || '.' || g.column_name
FROM information_schema.role_column_grants g
WHERE g.grantee = ANY (:roles) AND g.table_schema = 'public'
  AND NOT EXISTS (SELECT FROM information_schema.role_table_grants t WHERE t.grantee = g.grantee
                  AND t.table_name = g.table_name AND t.privilege_type = g.privilege_type)
UNION ALL
SELECT r.rolname, 'EXECUTE', f.proname
FROM pg_roles r CROSS JOIN pg_proc f JOIN pg_namespace n ON n.oid = f.pronamespace
WHERE r.rolname = ANY (:roles) AND n.nspname = 'public' AND f.prosecdef
  AND has_function_privilege(r.rolname, f.oid, 'EXECUTE')
"""


def granted(conn: Connection) -> set[tuple[str, str, str]]:
    """Every privilege the group roles hold on the database, as (role, privilege, object)."""
    return {tuple(row) for row in conn.execute(text(CATALOG), {"roles": list(GROUPS)})}


def stated(document: str | None = None) -> set[tuple[str, str, str]]:
    """The privileges docs/roles.md states: each row of its table is a role, a privilege and the
    objects it applies to — `name`s, a table's columns as `table` (`column`, …)."""
    text_ = ROLES_MD.read_text() if document is None else document
    section = text_.split(TABLE_HEADING, 1)[1].split("\n## ", 1)[0]
    found = set()
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        role, privilege, objects = cells[0].strip("`"), cells[1], cells[2]
        for name, columns in re.findall(r"`([^`]+)`(?: \(([^)]*)\))?", objects):
            if columns:
                found |= {(role, privilege, f"{name}.{column}") for column in re.findall(r"`([^`]+)`", columns)}
            else:
                found.add((role, privilege, name))
    return found


def as_table(privileges: set[tuple[str, str, str]]) -> str:
    """The rows of the table for ``privileges`` (to write the document from a migrated database)."""
    rows = []
    for role in GROUPS:
        by_privilege: dict[str, dict[str, list[str]]] = {}
        for holder, privilege, name in sorted(privileges):
            if holder == role:
                table, _, column = name.partition(".")
                by_privilege.setdefault(privilege, {}).setdefault(table, []).append(column)
        for privilege, objects in by_privilege.items():
            cells = ", ".join(f"`{table}`" + (" (" + ", ".join(f"`{c}`" for c in columns) + ")" if columns[0] else "")
                              for table, columns in objects.items())
            rows.append(f"| `{role}` | {privilege} | {cells} |")
    return "\n".join(rows)
