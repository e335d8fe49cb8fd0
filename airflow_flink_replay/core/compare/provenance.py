"""What the report must say about where a replay's starting point came from (pure).

Drain/stop runs replay from an exact boundary and need no note. A ``savepoint``-mode run (production kept
running) and an ``existing`` run (an earlier run's savepoint and window) are still fair comparisons —
baseline, baseline-2 and candidate all start from the same savepoint and read the same window — but
their fidelity to production is weaker, and a person reading the verdict should know by how much.
"""

from __future__ import annotations

from airflow_flink_replay.core.compare.result import Reason
from airflow_flink_replay.core.manifest import ReplayManifest


def provenance_reasons(manifest: ReplayManifest) -> list[Reason]:
    """Info reasons describing the savepoint's provenance (empty for drain/stop runs)."""
    savepoint = manifest.production.savepoint
    reasons: list[Reason] = []
    if savepoint.quiesce_mode == "existing":
        origin = (manifest.reused_from or "an earlier run").split(" ")[0]
        reasons.append(
            Reason(
                code="REUSED_SAVEPOINT",
                severity="info",
                message=f"replayed the savepoint and capture window of run {origin} again (quiesce_mode=existing): "
                "production was not touched; the memory forks were copied when this run started, not at the "
                "savepoint",
            )
        )
    if savepoint.racing_records is not None or savepoint.quiesce_mode == "savepoint":
        racing = savepoint.racing_records or 0
        reasons.append(
            Reason(
                code="SAVEPOINT_WHILE_RUNNING",
                severity="info",
                message="production kept running during the savepoint (quiesce_mode=savepoint): "
                f"{racing} capture record(s) raced the savepoint barrier and are not replayed, in-flight agent "
                "runs may be inside the savepoint, and the memory forks were copied after it",
            )
        )
    return reasons
