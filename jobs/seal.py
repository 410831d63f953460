"""Step 7, seal: every fact written since the last seal becomes part of the next seal, and the
seal's head leaves the database (issue 28, decisions #101).

SQL computes each fact's leaf (the view ``fact_leaves``); ackstore.ledger.seals builds the tree
and chains the seal in one transaction; then every seal not yet exported is appended to the
heads file (``$ACKSTORE_HEADS``, signed with ``$ACKSTORE_SEAL_KEY`` when set:
ackstore.ledger.heads). A re-run after a kill at any point seals nothing twice (the seal is
whole or absent) and exports what the killed run did not.

Most of a run's facts are sealed before this step, beside sweep and validate (``EarlySeal``,
started by jobs.pipeline.run): this step seals what came after them.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ackstore import faults
from ackstore.ledger import heads, seals
from jobs.settings import PipelineSettings
from jobs.step import Step, engine_for

JOB = "seal"
log = logging.getLogger("ackstore.seal")
EARLY_AFTER = ("index_search", "sweep")  # the steps after which an early seal starts (pipeline.run)


def run(spark: Any, settings: PipelineSettings) -> dict[str, Any]:
    step = Step(JOB, settings, ())
    with step.locked():
        step.stats.update(seal=None, facts=0)
        made = step.timed("seal", lambda: seals.seal(step.engine, metric_sources=settings.rules.metric_sources))
        if made is not None:
            step.stats.update(seal=made.number, facts=made.leaves)
        faults.checkpoint(f"{JOB}:sealed")
        if settings.heads is not None:
            step.stats["exported"] = heads.export(step.engine, heads.HeadsFile(settings.heads, settings.seal_key))
        return step.record()


class EarlySeal:
    """The facts final once ``index_search`` has run — ingestion's, apply_twin's and
    index_search's, most of a run's — sealed in a thread while sweep runs, then sweep's while
    validate runs, on the core each leaves idle (one statement, one Python process at a time); the
    seal step then seals only what came after (decisions #101). The position is taken before the
    next step writes, so the thread never waits for one; a later early seal waits for the one
    before (one sealer at a time)."""

    def __init__(self, settings: PipelineSettings) -> None:
        self.engine, self._owns_engine = engine_for(settings.database_url)
        self.metric_sources = settings.rules.metric_sources
        try:
            self.upto = seals.position(self.engine)
        except BaseException:
            self._dispose()
            raise
        self.sealed: seals.Seal | None = None
        self.seconds = 0.0
        self.failure: Exception | None = None
        self._thread = threading.Thread(target=self._seal, name="ackstore-early-seal", daemon=True)
        self._thread.start()

    def _seal(self) -> None:
        started = time.perf_counter()
        try:
            if self.upto is not None:
                self.sealed = seals.seal(self.engine, self.upto, one_core=True, metric_sources=self.metric_sources)
        except Exception as failure:  # noqa: BLE001 — said by finish(); the seal step seals it
            self.failure = failure
        finally:
            self.seconds = time.perf_counter() - started

    def finish(self) -> seals.Seal | None:
        """Wait for the seal; what it sealed, or None when it failed (said in the log): it is
        whole or absent, and the seal step seals what it did not."""
        self._thread.join()
        self._dispose()
        if self.failure is not None:
            log.error("the early seal up to fact %s failed; the seal step seals it: %r", self.upto, self.failure)
        return self.sealed

    def _dispose(self) -> None:
        if self._owns_engine:
            self.engine.dispose()


def early_stats(early: list[EarlySeal]) -> dict[str, Any]:
    """What the early seals of a run sealed, for the seal step's stats (each waited for)."""
    made = [seal for seal in (each.finish() for each in early) if seal is not None]
    return {"early_seals": [seal.number for seal in made], "early_facts": sum(seal.leaves for seal in made),
            "early_seconds": round(sum(each.seconds for each in early), 3)}
