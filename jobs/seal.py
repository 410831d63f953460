"""Step 7, seal: every fact written since the last seal becomes part of the next seal, and the
seal's head leaves the database (issue 28, decisions #101).

SQL computes each fact's leaf (the view ``fact_leaves``); ackstore.ledger.seals builds the tree
and chains the seal in one transaction; then every seal not yet exported is appended to the
heads file (``$ACKSTORE_HEADS``, signed with ``$ACKSTORE_SEAL_KEY`` when set:
ackstore.ledger.heads). A re-run after a kill at any point seals nothing twice (the seal is
whole or absent) and exports what the killed run did not.
"""

from __future__ import annotations

from typing import Any

from ackstore import faults
from ackstore.ledger import heads, seals
from jobs.settings import PipelineSettings
from jobs.step import Step

JOB = "seal"


def run(spark: Any, settings: PipelineSettings) -> dict[str, Any]:
    step = Step(JOB, settings, ())
    with step.locked():
        step.stats.update(seal=None, facts=0)
        made = step.timed("seal", lambda: seals.seal(step.engine))
        if made is not None:
            step.stats.update(seal=made.number, facts=made.leaves)
        faults.checkpoint(f"{JOB}:sealed")
        if settings.heads is not None:
            step.stats["exported"] = heads.export(step.engine, heads.HeadsFile(settings.heads, settings.seal_key))
        return step.record()
