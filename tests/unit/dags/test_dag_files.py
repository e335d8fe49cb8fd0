"""The three DAG files in ``dags/`` parse with a user's spec (``$FLINK_REPLAY_SPEC``) the way Airflow's DAG
processor reads them: no import errors, the right ids, schedules, forms and the gate's Asset."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.unit.core.test_replay_spec import _spec

DAGS = Path(__file__).resolve().parents[3] / "dags"


@pytest.fixture
def dagbag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from airflow.dag_processing.dagbag import DagBag

    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(_spec(runs_uri=f"file://{tmp_path}/runs", candidate_agent_factory=None)))
    monkeypatch.setenv("FLINK_REPLAY_SPEC", str(spec))
    return DagBag(dag_folder=str(DAGS))


def test_dag_files_parse_with_the_users_spec(dagbag) -> None:
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == {"flink_agents_replay", "flink_agents_nightly_replay", "flink_agents_release_gate"}
    manual = dagbag.dags["flink_agents_replay"]
    nightly = dagbag.dags["flink_agents_nightly_replay"]
    gate = dagbag.dags["flink_agents_release_gate"]
    assert type(manual.timetable).__name__ == type(gate.timetable).__name__ == "NullTimetable"  # triggered only
    assert nightly.timetable.expression == "0 0 * * *" and not nightly.catchup
    assert manual.params.get_param("quiesce_mode").schema["enum"] == ["drain", "stop", "savepoint", "existing"]
    assert "approve" in gate.task_dict and "approve" not in nightly.task_dict
    outlets = [o.uri for o in gate.task_dict["approve"].outlets]
    assert outlets == ["flink-agents-replay://review-triage/approved"]
    for dag in (manual, nightly, gate):
        assert dag.max_active_runs == 1  # two runs would stop production twice
        assert dag.task_dict["resume_production"].trigger_rule == "all_done"
        assert dag.task_dict["run_record"].trigger_rule == "all_done"


def test_dag_files_fail_loudly_without_a_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("FLINK_REPLAY_SPEC", str(tmp_path / "missing.yaml"))
    import airflow_flink_replay.dag_factory as factory

    monkeypatch.setattr(factory, "__file__", str(tmp_path / "pkg" / "dag_factory.py"))  # no demo spec there
    bag = DagBag(dag_folder=str(DAGS))
    assert len(bag.import_errors) == 3
    assert all("FLINK_REPLAY_SPEC" in err for err in bag.import_errors.values())
