"""What the report says about where a replay's starting point came from (savepoint mode, a reused savepoint)."""

from __future__ import annotations

from airflow_flink_replay.core.manifest import ReplayManifest
from tests.unit.core.test_manifest import _data


def test_provenance_reasons_tell_savepoint_and_existing_runs_apart() -> None:
    from airflow_flink_replay.core.compare.provenance import provenance_reasons

    drained = ReplayManifest.parse(_data(), verify=False)
    assert provenance_reasons(drained) == []
    data = _data()
    data["production"]["savepoint"].update(quiesce_mode="savepoint", racing_records=3)
    (reason,) = provenance_reasons(ReplayManifest.parse(data, verify=False))
    assert (reason.code, reason.severity) == ("SAVEPOINT_WHILE_RUNNING", "info")
    assert "3 capture record" in reason.message
    reused = drained.sealed().for_reuse("r2")
    codes = [r.code for r in provenance_reasons(reused)]
    assert codes == ["REUSED_SAVEPOINT"] and drained.run_id in provenance_reasons(reused)[0].message
