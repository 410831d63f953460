"""Everything that talks to PostgreSQL: the schema (one module), the engine, migrations, the
store API, search over the index. It builds on :mod:`ackstore.rules` and SQLAlchemy only.
"""
