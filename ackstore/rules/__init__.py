"""The pure rules: labels, durations, headers, envelopes, aggregation, settlement, wire shapes,
errors, RQL, the twin fold and index rows. No I/O: the standard library and msgspec only
(an import-linter contract in pyproject.toml keeps it so). The store, the jobs and the CLI
all call these same functions.
"""
