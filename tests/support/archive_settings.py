"""The pipeline's settings for archiving a test's ledger: into ``root``, everything sealed (a
retention of 0 days)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

from jobs.settings import PipelineSettings


def settings_for(engine: Engine, root: Path) -> PipelineSettings:
    return PipelineSettings(database_url=engine.url.render_as_string(hide_password=False), partitions=2,
                            archive_root=str(root), retention_days=0)
