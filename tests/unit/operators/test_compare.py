"""CompareReplayOutputsOperator in a real DAG under dag.test(): PASS succeeds and pushes the summary;
FAIL with a gate fails the task (and still writes the reports and links them); without one it only reports; the
settings objects' templated members are rendered (and their XComArgs make upstream tasks).
``build_dag``, ``register_and_test``, ``states`` and the ``runs`` fixture serve the report link's test too."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

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


def build_dag(
    dag_id: str,
    candidate: Any,
    runs: Path,
    gate: bool,
    *,
    audits: dict[str, Any] | None = None,
    report: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """A DAG of the comparison (``audits``: ``ComparedRuns``' audit members; ``report``: ``ReportSettings``' members
    besides ``gate``) and a task that records what it pushed."""
    from airflow.sdk import DAG, TriggerRule, task

    from airflow_flink_replay.operators.compare import ComparedRuns, CompareReplayOutputsOperator, ReportSettings

    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        compare = CompareReplayOutputsOperator(
            task_id="compare",
            runs=ComparedRuns(
                baseline=str(runs / "baseline.jsonl"),
                baseline_2=f"file://{runs}/baseline_2.jsonl",  # a URI goes through ObjectStoragePath
                candidate=candidate if not isinstance(candidate, Path) else str(candidate),
                **(audits or {}),
            ),
            key="$.id",
            manifest_uri=f"file://{runs}/manifest.json",
            config={"fields": [{"path": "$.score", "comparator": "numeric", "abs_tol": 0.001}]},
            report=ReportSettings(gate=gate, **(report or {})),
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
    _write_manifest(d / "manifest.json")  # a real, sealed one: the operator verifies it before comparing
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
    # the extra link: the report's page in the Airflow UI (the provider's plugin serves the written file)
    assert out["link"] == f"/flink-replay/runs/{dag_id}/{quote(dr.run_id, safe='')}/report.html"


def test_fail_with_gate_fails_the_task(airflow_db: Path, runs: Path, tmp_path: Path) -> None:
    dag_id = f"issue7_compare_fail_{uuid.uuid4().hex[:6]}"
    report_dir = tmp_path / "reports"
    dag = build_dag(
        dag_id,
        runs / "candidate_bad.jsonl",
        runs,
        gate=True,
        report={"uri": str(report_dir), "url": "http://reports.example/{report}"},
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
        audits={"baseline_audit": str(runs / "audit_baseline.jsonl"), "candidate_audit": f"file://{folder}"},
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


def test_the_settings_templated_members_are_rendered_and_their_xcomargs_are_upstream(
    airflow_db: Path, runs: Path, tmp_path: Path
) -> None:
    """``ComparedRuns``, ``ReportSettings`` and ``FidelitySettings`` are NamedTuples: under dag.test() Airflow renders
    their members (an XComArg, Jinja) into new tuples of the same class, and an XComArg member makes its task
    upstream without ``>>``. The DAG's own settings keep their templates (nothing is rendered in place)."""
    from airflow.sdk import DAG, task

    from airflow_flink_replay.operators.compare import (
        ComparedRuns,
        CompareReplayOutputsOperator,
        FidelitySettings,
        ReportSettings,
    )

    class Seen(CompareReplayOutputsOperator):
        def execute(self, context: Any) -> dict[str, Any]:
            RESULTS[self.dag_id] = {"runs": self.runs, "report": self.report, "fidelity": self.fidelity}
            return super().execute(context)

    dag_id = f"issue45_compare_rendered_{uuid.uuid4().hex[:6]}"
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:

        @task
        def candidate() -> str:
            return str(runs / "candidate_ok.jsonl")

        Seen(
            task_id="compare",
            runs=ComparedRuns(
                baseline=str(runs / "baseline.jsonl"),
                candidate=candidate(),
                baseline_2="{{ params.runs }}/baseline_2.jsonl",
            ),
            manifest_uri=f"file://{runs}/manifest.json",
            params={"runs": str(runs)},
            report=ReportSettings(
                uri=f"{tmp_path}/reports/{{{{ dag.dag_id }}}}", url="https://r.example/{{ run_id }}", gate=True
            ),
            fidelity=FidelitySettings(output_topic="{{ dag.dag_id }}-outputs"),
        )
    assert dag.get_task("compare").upstream_task_ids == {"candidate"}
    dr = register_and_test(dag)
    assert states(dr) == {"candidate": "success", "compare": "success"}
    seen = RESULTS[dag_id]
    assert type(seen["runs"]) is ComparedRuns and type(seen["report"]) is ReportSettings
    assert (seen["runs"].candidate, seen["runs"].baseline_2) == (str(runs / "candidate_ok.jsonl"),
                                                                 f"{runs}/baseline_2.jsonl")  # fmt: skip
    assert seen["report"] == ReportSettings(uri=f"{tmp_path}/reports/{dag_id}", url=f"https://r.example/{dr.run_id}")
    assert seen["fidelity"] == FidelitySettings(output_topic=f"{dag_id}-outputs")
    assert (tmp_path / "reports" / dag_id / "report.html").is_file()
    kept = dag.get_task("compare")
    assert "{{" in kept.report.uri and "{{" in kept.runs.baseline_2 and "{{" in kept.fidelity.output_topic


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


# ------------------------------------------------------------------ the run's manifest: verified, or the task fails
SIGNING_KEY = "compare-side-hmac-key-3"


@pytest.fixture
def small_run(tmp_path: Path) -> Path:
    d = tmp_path / "small"
    outs = make_run(20, "baseline", 1)
    write_jsonl(d / "baseline.jsonl", outs)
    write_jsonl(d / "candidate.jsonl", make_run(20, "candidate", 3))
    return d


def _write_manifest(path: Path, signing_key: str | None = None) -> None:
    from airflow_flink_replay.core.manifest import ReplayManifest
    from airflow_flink_replay.core.manifest_io import save_manifest
    from tests.unit.core.test_manifest import _data

    doc = _data()
    doc["capture"]["production_outputs"] = {"topic": "outputs", "start_offsets": {"0": 7}}
    save_manifest(ReplayManifest.parse(doc, verify=False), path, signing_key=signing_key)


def _claim_savepoint_mode(path: Path, *, redigest: bool) -> None:
    """What someone who can write the runs folder does to turn the fidelity floor off: claim savepoint mode."""
    from airflow_flink_replay.core.manifest import ReplayManifest

    doc = json.loads(path.read_text())
    doc["production"]["savepoint"]["quiesce_mode"] = "savepoint"
    if redigest:
        doc["digest"] = ReplayManifest.model_validate({**doc, "digest": None}).compute_digest()
    path.write_text(json.dumps(doc))


def _compare_op(run: Path, manifest: Path | None, **kwargs: Any) -> Any:
    """The comparison of ``run``'s baseline and candidate, reporting into ``run/reports`` without a gate; ``kwargs``
    named as a ``ComparedRuns`` member go there, the others to the operator."""
    from airflow_flink_replay.operators.compare import ComparedRuns, CompareReplayOutputsOperator, ReportSettings

    files = {name: kwargs.pop(name) for name in list(kwargs) if name in ComparedRuns._fields}
    return CompareReplayOutputsOperator(
        task_id="compare",
        runs=ComparedRuns(baseline=str(run / "baseline.jsonl"), candidate=str(run / "candidate.jsonl"), **files),
        manifest_uri=f"file://{manifest}" if manifest else None,
        report=ReportSettings(uri=str(run / "reports"), gate=False),
        **kwargs,
    )


def _execute(op: Any) -> Any:
    from tests.unit.operators.stubs import context

    return op.execute(context("compare"))


def test_a_tampered_manifest_fails_the_comparison(small_run: Path) -> None:
    """Issue 42 §4: a manifest that did not verify used to be treated as no manifest (a warning only)."""
    from airflow.sdk.exceptions import AirflowFailException

    manifest = small_run / "manifest.json"
    _write_manifest(manifest)
    _claim_savepoint_mode(manifest, redigest=False)
    with pytest.raises(AirflowFailException) as err:
        _execute(_compare_op(small_run, manifest))
    message = str(err.value)
    assert str(manifest) in message and "digest: mismatch" in message and "Fix:" in message
    assert not (small_run / "reports").exists()  # refused before anything is compared or written


def test_a_re_digested_manifest_fails_the_comparison_when_signing_is_on(
    small_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv("AIRFLOW_CONN_AFR_SIGNING", json.dumps({"conn_type": "generic", "password": SIGNING_KEY}))
    manifest = small_run / "manifest.json"
    _write_manifest(manifest, SIGNING_KEY)
    op = _compare_op(small_run, manifest, signing_conn_id="afr_signing")
    assert op._manifest is not None and op._manifest.production.savepoint.quiesce_mode == "drain"
    _claim_savepoint_mode(manifest, redigest=True)
    op = _compare_op(small_run, manifest, signing_conn_id="afr_signing")
    with pytest.raises(AirflowFailException) as err:
        _execute(op)
    assert "signature: mismatch" in str(err.value) and SIGNING_KEY not in str(err.value)
    assert not (small_run / "reports").exists()


def test_a_manifest_that_is_not_there_fails_the_comparison(small_run: Path) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match=r"(?s)manifest .*not found.*Fix:"):
        _execute(_compare_op(small_run, small_run / "missing" / "manifest.json"))


def test_a_run_without_a_manifest_compares_without_one(small_run: Path) -> None:
    summary = _execute(_compare_op(small_run, None))
    assert summary["verdict"] in ("PASS", "INCONCLUSIVE") and (small_run / "reports" / "report.html").is_file()


# ------------------------------------------------------------------ more A/A replays (aa_replays > 1)
@pytest.fixture
def aa_run(small_run: Path) -> Path:
    """``small_run`` with baseline_2, baseline_3 and every run's audit (baseline_3's a folder of worker files)."""
    outs = make_run(20, "baseline", 1)
    write_jsonl(small_run / "baseline_2.jsonl", make_run(20, "baseline_2", 2))
    write_jsonl(small_run / "baseline_3.jsonl", make_run(20, "baseline_3", 4))
    for variant in ("baseline", "baseline_2", "candidate"):
        write_jsonl(small_run / f"audit_{variant}.jsonl", make_audit(outs, variant))
    write_jsonl(small_run / "audit_baseline_3" / "audit-baseline_3-1.jsonl", make_audit(outs, "baseline_3"))
    return small_run


def test_extra_baselines_and_their_audits_reach_the_comparison(aa_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each extra baseline is opened as baseline_2 is (a path, or a URI through ObjectStoragePath; an audit folder as
    its files) and handed to the engine after baseline_2; the noise is measured on more than one pair of baselines."""
    import airflow_flink_replay.core.compare.engine as engine

    seen: dict[str, Any] = {}
    real = engine.compare_runs

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs, audit_names=[[s.name for s in a] for a in kwargs["audits"]["extra_baselines"]])
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "compare_runs", spy)
    summary = _execute(
        _compare_op(
            aa_run,
            None,
            baseline_2=str(aa_run / "baseline_2.jsonl"),
            extra_baselines=[str(aa_run / "baseline_3.jsonl")],
            baseline_audit=str(aa_run / "audit_baseline.jsonl"),
            candidate_audit=str(aa_run / "audit_candidate.jsonl"),
            baseline_2_audit=str(aa_run / "audit_baseline_2.jsonl"),
            extra_baseline_audits=[f"file://{aa_run / 'audit_baseline_3'}"],
        )
    )
    assert seen["extra_baselines"] == [aa_run / "baseline_3.jsonl"]
    assert seen["audit_names"] == [[str(aa_run / "audit_baseline_3" / "audit-baseline_3-1.jsonl")]]
    assert summary["noise_pairs"] > 1  # the noise is measured on more than one pair of baselines


def test_extra_baselines_given_as_text_are_refused(small_run: Path) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match=r"extra_baselines must be a list of URIs .*Fix:"):
        _execute(_compare_op(small_run, None, extra_baselines="/runs/a.jsonl,/runs/b.jsonl"))


def test_the_fidelity_opens_every_baseline_only_when_productions_outputs_can_be_read(
    small_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """baseline_2 and the extra baselines tell how often the baseline reproduces itself: opened lazily, as the
    baseline is, and handed to the fidelity reference in order."""
    from types import SimpleNamespace

    import airflow_flink_replay.core.compare.fidelity as fidelity

    seen: dict[str, Any] = {}

    class Reference:
        def __init__(self, baseline: Any, **kwargs: Any) -> None:
            seen.update(kwargs, baseline=baseline)
            raise RuntimeError("measured elsewhere")  # the figure is then missing; the comparison stands

    monkeypatch.setattr(fidelity, "FidelityReference", Reference)
    opened: list[str] = []

    def opener(name: str) -> Any:
        return lambda: opened.append(name) or name

    from airflow_flink_replay.operators.compare import FidelitySettings

    op = _compare_op(small_run, None, fidelity=FidelitySettings(output_topic="outputs"))
    result: Any = SimpleNamespace(key="$.id", ignore=[])
    extras = [opener("baseline_3"), opener("baseline_4")]

    def with_fidelity() -> Any:
        return op._with_fidelity(result, op.fidelity, opener("baseline"), opener("baseline_2"), None,
                                 extra_baselines=extras)  # fmt: skip

    monkeypatch.setattr(op, "_output_offsets", lambda topic: (None, None))  # no offsets: nothing is read
    assert with_fidelity() is result
    assert opened == [] and not seen
    monkeypatch.setattr(op, "_output_offsets", lambda topic: ({0: 7}, "drain"))
    assert with_fidelity() is result
    assert opened == ["baseline", "baseline_2", "baseline_3", "baseline_4"]
    assert (seen["baseline_2"], seen["extra_baselines"]) == ("baseline_2", ["baseline_3", "baseline_4"])


def test_every_baselines_unmatched_calls_count_against_an_uncovered_window(
    small_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls production's cassette did not match in baseline_3 (and not in baseline or baseline_2) make a window
    production had not fully processed INCONCLUSIVE, as baseline_2's do."""
    import airflow_flink_replay.operators.replay as replay
    from airflow_flink_replay.core.compare import compare_runs
    from airflow_flink_replay.core.window_coverage import WindowCoverage
    from tests.unit.operators.stubs import StubTI

    unmatched = {"a.jsonl": 0, "a2.jsonl": 0, "a3.jsonl": 3}
    monkeypatch.setattr(replay, "audit_counts", lambda audit: ({}, {"unmatched": unmatched[Path(audit).name]}))

    class TI(StubTI):
        def xcom_pull(self, task_ids: str, key: str) -> Any:
            return WindowCoverage(records=20, reached=15).model_dump() if key == "cassette_coverage" else None

    runs = {
        v: write_jsonl(small_run / f"{v}.out.jsonl", make_run(20, v, seed, label_change=change))
        for v, seed, change in (("baseline", 1, 0.0), ("baseline_2", 2, 0.0), ("candidate", 3, 0.5))
    }
    failing = compare_runs(runs["baseline"], runs["candidate"], runs["baseline_2"], key="$.id")
    op = _compare_op(
        small_run,
        None,
        submit_task_id="submit_replays",
        baseline_audit="a.jsonl",
        baseline_2_audit="a2.jsonl",
        extra_baseline_audits=["a3.jsonl"],
    )
    judged = op._with_coverage({"ti": TI("compare")}, failing)
    assert judged.verdict == "INCONCLUSIVE"
    incomplete = next(r for r in judged.reasons if r.code == "CASSETTE_INCOMPLETE")
    assert "baseline_3: 3" in incomplete.message and "baseline_2" not in incomplete.message
