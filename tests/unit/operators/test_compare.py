"""CompareReplayOutputsOperator in a real DAG under dag.test(): PASS succeeds and pushes the summary;
FAIL with gate=True fails the task (and still writes the reports and links them); gate=False only reports.
``build_dag``, ``register_and_test``, ``states`` and the ``runs`` fixture serve the report link's test too."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.compare.synthetic import make_audit, make_run, write_jsonl
from tests.dag_testing import register_dag

pytestmark = pytest.mark.timeout(300)

RESULTS: dict[str, dict[str, Any]] = {}
N = 200


def register_and_test(dag: Any) -> Any:
    """Write the in-test DAG to the metadata DB (as the DAG processor would), then dag.test() it."""
    register_dag(dag, "issue7-tests")
    return dag.test()


def build_dag(dag_id: str, candidate: Path, runs: Path, gate: bool, **kwargs: Any) -> Any:
    from airflow.sdk import DAG, TriggerRule, task

    from airflow_flink_replay.operators.compare import CompareReplayOutputsOperator

    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        compare = CompareReplayOutputsOperator(
            task_id="compare",
            baseline=str(runs / "baseline.jsonl"),
            baseline_2=f"file://{runs}/baseline_2.jsonl",  # a URI goes through ObjectStoragePath
            candidate=str(candidate),
            key="$.id",
            manifest_uri=f"file://{runs}/manifest.json",
            config={"fields": [{"path": "$.score", "comparator": "numeric", "abs_tol": 0.001}]},
            gate=gate,
            **kwargs,
        )

        @task(trigger_rule=TriggerRule.ALL_DONE)
        def record(**context: Any) -> None:
            ti = context["ti"]
            RESULTS[dag_id] = {
                "return_value": ti.xcom_pull(task_ids="compare"),
                "comparison": ti.xcom_pull(task_ids="compare", key="comparison"),
                "link": ti.xcom_pull(task_ids="compare", key="_link_ReplayReportLink"),
            }

        compare >> record()
    return dag


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    d = tmp_path / "runs"
    outs = make_run(N, "baseline", 1, paraphrase=0.2)
    write_jsonl(d / "baseline.jsonl", outs)
    write_jsonl(d / "baseline_2.jsonl", make_run(N, "baseline_2", 2, paraphrase=0.2))
    write_jsonl(d / "candidate_ok.jsonl", make_run(N, "candidate", 3, paraphrase=0.2))
    write_jsonl(d / "candidate_bad.jsonl", make_run(N, "candidate", 3, paraphrase=0.2, label_change=0.25))
    write_jsonl(d / "audit_baseline.jsonl", make_audit(outs, "baseline"))
    write_jsonl(d / "audit_candidate.jsonl", make_audit(outs, "candidate", extra_tool_keys=0.2))
    (d / "manifest.json").write_text("{}")  # stand-in: only its folder matters to this operator
    return d


def states(dr: Any) -> dict[str, str]:
    return {ti.task_id: ti.state for ti in dr.get_task_instances()}


def test_pass_succeeds_pushes_summary_and_links_report(airflow_db: Path, runs: Path) -> None:
    dag_id = f"issue7_compare_pass_{uuid.uuid4().hex[:6]}"
    dr = register_and_test(build_dag(dag_id, runs / "candidate_ok.jsonl", runs, gate=True))
    assert dr.state == "success"
    assert states(dr) == {"compare": "success", "record": "success"}
    out = RESULTS[dag_id]
    summary = out["return_value"]
    assert summary["verdict"] == "PASS" and summary == out["comparison"]
    assert summary["counts"]["aligned_candidate"] == N
    # reports next to the manifest, in a folder named after the run
    report = Path(summary["report_uri"].removeprefix("file://"))
    assert report.parent.parent == runs and report.parent.name.startswith("compare-")
    assert report.name == "report.html" and "PASS" in report.read_text()
    assert json.loads(Path(summary["summary_uri"].removeprefix("file://")).read_text())["verdict"] == "PASS"
    assert out["link"] == summary["report_uri"]


def test_fail_with_gate_fails_the_task(airflow_db: Path, runs: Path, tmp_path: Path) -> None:
    dag_id = f"issue7_compare_fail_{uuid.uuid4().hex[:6]}"
    report_dir = tmp_path / "reports"
    dag = build_dag(
        dag_id,
        runs / "candidate_bad.jsonl",
        runs,
        gate=True,
        report_uri=str(report_dir),
        report_url="http://reports.example/{report}",
    )
    dr = register_and_test(dag)
    assert states(dr)["compare"] == "failed"  # (the run itself follows its all_done leaf, 'record')
    out = RESULTS[dag_id]
    assert out["return_value"] is None  # no return value from a failed task ...
    comparison = out["comparison"]  # ... but the summary was pushed before failing
    assert comparison["verdict"] == "FAIL"
    assert comparison["worst_fields"][0]["path"] == "$.label"
    assert (report_dir / "report.html").is_file() and (report_dir / "junit.xml").is_file()
    assert out["link"] == f"http://reports.example/{(report_dir / 'report.html').resolve().as_uri()}"


def test_fail_without_gate_only_reports_and_audits_count(airflow_db: Path, runs: Path) -> None:
    """Audits from a folder URI (one file per replay worker); config from an upstream task's XCom."""
    from airflow.sdk import task

    folder = runs / "audit_candidate"
    folder.mkdir()
    lines = (runs / "audit_candidate.jsonl").read_text().splitlines(keepends=True)
    (folder / "audit-candidate-1.jsonl").write_text("".join(lines[::2]))
    (folder / "audit-candidate-2.jsonl").write_text("".join(lines[1::2]))
    dag_id = f"issue7_compare_report_{uuid.uuid4().hex[:6]}"
    dag = build_dag(
        dag_id,
        runs / "candidate_ok.jsonl",
        runs,
        gate=False,
        baseline_audit=str(runs / "audit_baseline.jsonl"),
        candidate_audit=f"file://{folder}",
    )
    with dag:

        @task
        def compare_config() -> dict:
            return {"fields": [{"path": "$.score", "comparator": "numeric", "abs_tol": 0.001}], "min_aligned": 50}

        compare = dag.get_task("compare")
        compare.config = compare_config()
        compare.config.operator >> compare
    dr = register_and_test(dag)
    assert dr.state == "success"
    summary = RESULTS[dag_id]["return_value"]
    assert summary["verdict"] == "FAIL"  # side effects changed, outputs did not
    assert [r["code"] for r in summary["reasons"]] == ["SIDE_EFFECT_REGRESSION"]
    full = json.loads(Path(summary["summary_uri"].removeprefix("file://")).read_text())
    assert full["config"]["min_aligned"] == 50  # the config came through XCom
    assert "audit-candidate-1.jsonl" in full["inputs"]["candidate_audit"]


# ------------------------------------------------------------------ waiting for production's window outputs
class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _looks(aligned: list[int], clock: _Clock, wait: float = 60.0) -> tuple[int, int]:
    """``wait_for_production`` over successive looks at which production had output ``aligned[i]`` of 100."""
    import logging

    from airflow_flink_replay.core.compare.result import FidelityStat
    from airflow_flink_replay.operators.compare import wait_for_production

    looks = iter(aligned)
    calls = []

    def measure() -> tuple[FidelityStat, int]:
        n = next(looks)
        calls.append(n)
        return FidelityStat(production="t", baseline_outputs=100, production_outputs=n, aligned=n, equal=n,
                            rate=n / 100), n

    stat, _ = wait_for_production(measure, wait, log=logging.getLogger("t"), sleep=clock.sleep,
                                  clock=lambda: clock.now)
    return stat.aligned, len(calls)


def test_fidelity_waits_while_production_catches_up_on_the_window() -> None:
    assert _looks([48, 80, 100], _Clock()) == (100, 3)  # production behind a backlog: its outputs arrive


def test_fidelity_stops_waiting_when_production_makes_no_progress_or_time_is_up() -> None:
    assert _looks([48, 48, 100], _Clock()) == (48, 2)  # no output in a poll: it will not come by waiting
    assert _looks([10, 20, 30, 40, 50], _Clock(), wait=12) == (30, 3)  # two polls fit in 12 s
    assert _looks([100, 0], _Clock()) == (100, 1)  # everything there at once: no wait
