"""SubmitReplayJobOperator with a stubbed Flink hook: it defers to the job-state trigger after submitting and
when a retry reattaches to its running job, and the trigger cancels the replay job if the task is killed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred
from pydantic import ValidationError

from airflow_flink_replay.core.flink_models import JobPlan
from airflow_flink_replay.core.identity import IdentityPlan
from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec, replay_job_name_prefix
from airflow_flink_replay.core.replay_plans import IDENTITY_REFUSED, IdentityCheck, VariantPlan
from airflow_flink_replay.exceptions import FlinkRestError, FlinkSubmissionError
from airflow_flink_replay.operators import replay as replay_ops
from airflow_flink_replay.operators.replay import SubmitReplayJobOperator
from airflow_flink_replay.triggers.flink import FlinkJobStateTrigger
from tests.unit.operators.stubs import StubFlinkHook, StubSubmitter, context, job


@pytest.fixture(autouse=True)
def _sealed_manifest(tmp_path: Path) -> Path:
    """The run's sealed manifest at ``<tmp_path>/manifest.json``: the submitting task reads it and carries it in
    the submission (the job side reads no file)."""
    from tests.unit.core.test_replay_job_spec import _saved

    return _saved(tmp_path)


def _replay(tmp_path: Path, hook: StubFlinkHook) -> SubmitReplayJobOperator:
    spec = ReplayJobSpec(
        variant="candidate", agent_factory="pkg.agent:build", job_identifier="replay-t-candidate",
        action_state_topic="afr-t-candidate", output_dir=str(tmp_path / "out"), audit_dir=str(tmp_path / "audit"),
        kafka_bootstrap="localhost:9092", manifest=str(tmp_path / "manifest.json"),
    )
    op = SubmitReplayJobOperator(task_id="replay_candidate", spec=spec, savepoint_path="file:///sp/savepoint-1",
                                 deferrable=True)
    op.__dict__["hook"] = hook
    return op


def _job_name(ctx: dict) -> str:
    return replay_job_name_prefix("dag", ctx["ti"].run_id) + "candidate"


def test_replay_submits_once_then_defers_with_cancel_on_kill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hook = StubFlinkHook()
    submitter = StubSubmitter("d" * 32)
    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: submitter)
    ctx = context("replay_candidate")
    with pytest.raises(TaskDeferred) as deferred:
        _replay(tmp_path, hook).execute(ctx)
    trigger = deferred.value.trigger
    assert isinstance(trigger, FlinkJobStateTrigger) and deferred.value.method_name == "execute_complete"
    assert (trigger.job_id, trigger.target_states, trigger.cancel_on_kill) == ("d" * 32, ["FINISHED"], True)
    assert trigger.carry["job_id"] == "d" * 32
    assert [s["savepoint_path"] for s in submitter.submitted] == ["file:///sp/savepoint-1"]
    assert submitter.submitted[0]["program"].job_name == _job_name(ctx)  # what cancel_leftover_replays matches
    # the submission carries the sealed manifest: the job side needs no path shared with this worker
    submitted_spec = ReplayJobSpec.from_argv(submitter.submitted[0]["program"].program_args)
    assert submitted_spec.manifest_text and json.loads(submitted_spec.manifest_text)["digest"] == json.loads(
        (tmp_path / "manifest.json").read_text())["digest"]
    assert ctx["ti"].pushed["flink_job_id"] == "d" * 32


def test_replay_retry_reattaches_to_its_running_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = context("replay_candidate", try_number=2)
    hook = StubFlinkHook([job("e" * 32, _job_name(ctx), "RUNNING")])
    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: pytest.fail("a retry must not submit again"))
    with pytest.raises(TaskDeferred) as deferred:
        _replay(tmp_path, hook).execute(ctx)
    trigger = deferred.value.trigger
    assert (trigger.job_id, trigger.cancel_on_kill, trigger.carry["preflight"]) == ("e" * 32, True, "reattached")


# ------------------------------------------------------------
# SubmitReplayJobOperator used on its own: a spec naming production's action-state topic or job identifier
# is refused before anything reaches Flink; a spec that does not name production's is accepted with a warning.

def _spec(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    return {
        "variant": "candidate",
        "agent_factory": "pkg.agent:build",
        "job_identifier": "replay-t-candidate",
        "action_state_topic": "afr-t-candidate",
        "output_dir": str(tmp_path / "out"),
        "audit_dir": str(tmp_path / "audit"),
        "kafka_bootstrap": "localhost:9092",
        "manifest": str(tmp_path / "manifest.json"),
        "production_action_state_topic": "prod-action-state",
        "production_job_identifier": "prod-agent",
        **changes,
    }


def _op(spec: dict[str, Any], hook: StubFlinkHook) -> SubmitReplayJobOperator:
    op = SubmitReplayJobOperator(task_id="replay_candidate", spec=spec, savepoint_path="file:///sp/1", deferrable=True)
    op.__dict__["hook"] = hook
    return op


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"action_state_topic": "prod-action-state"}, "is production's action-state topic"),
        ({"job_identifier": "prod-agent"}, "is production's job identifier"),
    ],
)
def test_a_spec_on_productions_state_is_refused_before_submitting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changes: dict[str, Any], named: str
) -> None:
    hook = StubFlinkHook()
    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: pytest.fail("nothing may be submitted"))
    with pytest.raises(ValidationError) as err:
        _op(_spec(tmp_path, **changes), hook).execute(context("replay_candidate"))
    assert named in str(err.value) and "Fix:" in str(err.value)
    assert hook.calls == []


def test_without_productions_names_it_submits_and_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    submitter = StubSubmitter("d" * 32)
    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: submitter)
    spec = _spec(tmp_path, production_action_state_topic=None, production_job_identifier=None)
    with pytest.raises(TaskDeferred):  # the task log goes through structlog to stdout
        _op(spec, StubFlinkHook()).execute(context("replay_candidate"))
    assert len(submitter.submitted) == 1
    assert "does not name production's action-state topic and job identifier" in capsys.readouterr().out
    with pytest.raises(TaskDeferred):
        _op(_spec(tmp_path), StubFlinkHook()).execute(context("replay_candidate"))
    assert "does not name production's" not in capsys.readouterr().out


# ------------------------------------------------------------
# The DAG's split: the submit task returns once the job is submitted, the replay task waits for that job.

def test_submit_without_waiting_returns_the_job_and_the_await_task_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    submitter = StubSubmitter("f" * 32)
    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: submitter)
    ctx = context("submit_replay_candidate")
    op = _op(_spec(tmp_path), StubFlinkHook())
    op.wait_for_completion = False
    submitted = op.execute(ctx)  # no TaskDeferred: it does not wait
    assert (submitted["job_id"], submitted["variant"], submitted["job_name"]) == ("f" * 32, "candidate", _job_name(ctx))
    assert ctx["ti"].pushed["flink_job_id"] == "f" * 32 and len(submitter.submitted) == 1

    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: pytest.fail("waiting must not submit"))
    waiting = replay_ops.AwaitReplayJobOperator(task_id="replay_candidate", spec=_spec(tmp_path), submitted=submitted,
                                                deferrable=True)
    waiting.__dict__["hook"] = StubFlinkHook()
    wctx = context("replay_candidate")
    with pytest.raises(TaskDeferred) as deferred:
        waiting.execute(wctx)
    trigger = deferred.value.trigger
    assert (trigger.job_id, trigger.cancel_on_kill, trigger.carry["started"]) == ("f" * 32, True, submitted["started"])
    assert wctx["ti"].pushed["flink_job_id"] == "f" * 32  # the run record finds the job if the wait fails


def test_await_of_a_job_that_already_finished_collects_without_deferring(tmp_path: Path) -> None:
    """A small window's replay is often done before its waiting task starts: the task collects at once instead of
    deferring to a trigger that would fire immediately (a race Airflow's scheduler loses: apache/airflow#72716)."""
    spec = _spec(tmp_path)
    part = Path(spec["output_dir"]) / "2026-12-02--07" / "part-0.jsonl"
    part.parent.mkdir(parents=True)
    part.write_text('{"id": "r1"}\n{"id": "r2"}\n')
    submitted = {"job_id": "f" * 32, "started": 1.0}
    waiting = replay_ops.AwaitReplayJobOperator(task_id="replay_candidate", spec=spec, submitted=submitted,
                                                deferrable=True)
    waiting.__dict__["hook"] = StubFlinkHook([job("f" * 32, "afr-replay-candidate", "FINISHED")])
    result = waiting.execute(context("replay_candidate"))  # no TaskDeferred
    assert (result["job_id"], result["state"], result["output_records"]) == ("f" * 32, "FINISHED", 2)

    waiting.__dict__["hook"] = StubFlinkHook([job("f" * 32, "afr-replay-candidate", "RUNNING")])
    with pytest.raises(TaskDeferred):  # still running: the trigger waits
        waiting.execute(context("replay_candidate"))


def test_await_without_a_submitted_job_names_the_submit_task(tmp_path: Path) -> None:
    waiting = replay_ops.AwaitReplayJobOperator(task_id="replay_candidate", spec=_spec(tmp_path), submitted=None)
    waiting.__dict__["hook"] = StubFlinkHook()
    with pytest.raises(Exception, match="no submitted Flink job to wait for"):
        waiting.execute(context("replay_candidate"))


# ------------------------------------------------------------
# The variants planned together (PlanReplayJobsOperator, with a stubbed submitter; the job-side program itself
# runs on the real cluster in tests/integration/test_flink_side.py) and the submit task that takes its reports.

_PLANS = Path(__file__).resolve().parents[2] / "fixtures" / "plans"


def _plan(name: str) -> dict[str, Any]:
    return json.loads((_PLANS / name).read_text())["plan"]


class _PlansSubmitter(StubSubmitter):
    def __init__(self, plans: list[VariantPlan]) -> None:
        super().__init__("d" * 32)
        self.plans, self.programs = plans, []

    def plan_replays(self, program: Any) -> list[VariantPlan]:
        self.programs.append(program)
        return self.plans

    def plan(self, program: Any) -> Any:
        raise AssertionError("a variant planned with the others must not be planned again")


def _planner(tmp_path: Path) -> replay_ops.PlanReplayJobsOperator:
    specs = [_spec(tmp_path, variant=v, job_identifier=f"replay-t-{v}", action_state_topic=f"afr-t-{v}")
             for v in ("baseline", "candidate")]
    production = json.loads((_PLANS / "prod_job_details.json").read_text())
    return replay_ops.PlanReplayJobsOperator(task_id="plan_replays", specs=specs, production_plan=production)


def test_the_variants_are_planned_in_one_program_and_each_plan_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pinned = _plan("jar_plan_replay-pinned.json")
    submitter = _PlansSubmitter([VariantPlan(variant="baseline", plan=pinned),
                                 VariantPlan(variant="candidate", plan=pinned)])
    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: submitter)
    reports = _planner(tmp_path).execute(context("plan_replays"))
    assert set(reports) == {"baseline", "candidate"} and all("MAPS" in r for r in reports.values())
    (program,) = submitter.programs
    specs = [ReplayJobSpec.model_validate_json(a) for a in program.program_args if a.startswith("{")]
    # planned as they will be submitted: named for the run, pinned to production's agent vertex
    assert [s.job_name for s in specs] == [_job_name(context("x")).replace("candidate", v)
                                           for v in ("baseline", "candidate")]
    assert {s.agent_uid_hash for s in specs} == {"4aab10bf863e9ada48b1abaa99285148"}

    # the submit task takes the report and does not plan again
    op = _op(_spec(tmp_path), StubFlinkHook())
    op.production_plan = json.loads((_PLANS / "prod_job_details.json").read_text())
    op.identity_preflight, op.wait_for_completion = reports, False
    assert op.execute(context("submit_replay_candidate"))["preflight"] == reports["candidate"]
    assert len(submitter.submitted) == 1


def test_a_refused_or_unbuildable_variant_fails_the_planning_with_every_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    submitter = _PlansSubmitter([
        VariantPlan(variant="baseline", plan=_plan("jar_plan_replay-dedupe-renamed.json")),
        VariantPlan(variant="candidate", error="Traceback (most recent call last):\nModuleNotFoundError: pkg"),
    ])  # fmt: skip
    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: submitter)
    with pytest.raises(AirflowFailException) as failed:
        _planner(tmp_path).execute(context("plan_replays"))
    message = str(failed.value)
    assert "replay baseline: identity preflight: REFUSED" in message and "STATE_DROPPED" in message
    assert "replay candidate: its job could not be built" in message and "ModuleNotFoundError: pkg" in message


# ------------------------------------------------------------
# Every variant submitted in one job-side run (SubmitReplayJobsOperator, stubbed submitter; the program itself
# submits the replays of every gate run in the integration tests).


class _JobsSubmitter(StubSubmitter):
    """Records the submission; the jobs the program would start appear on ``hook`` under their names."""

    def __init__(self, hook: StubFlinkHook) -> None:
        super().__init__("f" * 32)
        self.hook = hook

    def submit(self, program: Any, **kwargs: Any) -> Any:
        done = super().submit(program, **kwargs)
        for n, spec in enumerate(ReplayJobSpec.all_from_argv(program.program_args)):
            self.hook.jobs[f"{n}" * 32] = job(f"{n}" * 32, spec.job_name or "", "RUNNING")
        return done


def _submitter_op(tmp_path: Path, hook: StubFlinkHook, reports: dict[str, str] | None) -> Any:
    specs = [_spec(tmp_path, variant=v, job_identifier=f"replay-t-{v}", action_state_topic=f"afr-t-{v}")
             for v in ("baseline", "baseline_2", "candidate")]
    production = json.loads((_PLANS / "prod_job_details.json").read_text())
    op = replay_ops.SubmitReplayJobsOperator(task_id="submit_replays", specs=specs, savepoint_path="file:///sp/1",
                                             production_plan=production, identity_preflight=reports)
    op.__dict__["hook"] = hook
    return op


_REPORTS = {v: f"identity preflight: MAPS ({v})" for v in ("baseline", "baseline_2", "candidate")}


def test_every_variant_is_submitted_in_one_program_and_each_job_found_by_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = StubFlinkHook()
    submitter = _JobsSubmitter(hook)
    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: submitter)
    jobs = _submitter_op(tmp_path, hook, _REPORTS).execute(context("submit_replays"))
    (call,) = submitter.submitted
    specs = ReplayJobSpec.all_from_argv(call["program"].program_args)
    assert [s.variant for s in specs] == ["baseline", "baseline_2", "candidate"]
    assert call["program"].module == replay_ops.REPLAY_JOB_MODULE and call["program"].job_name is None
    assert (call["savepoint_path"], call["allow_non_restored_state"]) == ("file:///sp/1", True)
    assert {s.agent_uid_hash for s in specs} == {"4aab10bf863e9ada48b1abaa99285148"}  # pinned as planned
    assert {v: (j["job_id"], j["job_name"], j["preflight"]) for v, j in jobs.items()} == {
        s.variant: (f"{n}" * 32, s.job_name, _REPORTS[s.variant]) for n, s in enumerate(specs)
    }

    # the wait task of each variant takes its own entry
    waiting = replay_ops.AwaitReplayJobOperator(task_id="replay_baseline_2", spec=specs[1].model_dump(mode="json"),
                                               submitted=jobs, deferrable=True)
    waiting.__dict__["hook"] = hook
    with pytest.raises(TaskDeferred) as deferred:
        waiting.execute(context("replay_baseline_2"))
    assert deferred.value.trigger.job_id == "1" * 32


def test_a_retry_submits_only_the_variants_without_a_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = context("submit_replays", try_number=2)
    name = _job_name(ctx).replace("candidate", "baseline")
    hook = StubFlinkHook([job("a" * 32, name, "FINISHED")])
    submitter = _JobsSubmitter(hook)
    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: submitter)
    jobs = _submitter_op(tmp_path, hook, _REPORTS).execute(ctx)
    (call,) = submitter.submitted
    specs = [ReplayJobSpec.model_validate_json(a) for a in call["program"].program_args if a.startswith("{")]
    assert [s.variant for s in specs] == ["baseline_2", "candidate"]
    assert (jobs["baseline"]["job_id"], jobs["baseline"]["preflight"]) == ("a" * 32, "reattached")

    # every variant has its job: nothing is submitted again
    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: pytest.fail("nothing left to submit"))
    again = _submitter_op(tmp_path, hook, _REPORTS).execute(ctx)
    assert {v: j["job_id"] for v, j in again.items()} == {v: j["job_id"] for v, j in jobs.items()}


def test_a_variant_without_an_identity_report_is_not_submitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: pytest.fail("nothing may be submitted"))
    reports = {k: v for k, v in _REPORTS.items() if k != "candidate"}
    with pytest.raises(AirflowFailException, match="replay candidate: identity_preflight holds no report"):
        _submitter_op(tmp_path, StubFlinkHook(), reports).execute(context("submit_replays"))


def test_a_job_that_never_appears_fails_the_submission_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    submitter = StubSubmitter("f" * 32)  # the program "ran" but started no job
    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: submitter)
    op = _submitter_op(tmp_path, StubFlinkHook(), _REPORTS)
    op.submit_timeout = 0.5
    with pytest.raises(AirflowException, match="replay baseline: the replay program ran but no Flink job named"):
        op.execute(context("submit_replays"))


# ------------------------------------------------------------
# Without a plan task the submission program checks every variant itself (the DAG's way): the check travels
# as program arguments, a refusal fails at once with the program's reports, and each report is rendered again
# from the plan of the job that runs.


class _CheckedJobsSubmitter(_JobsSubmitter):
    """Like :class:`_JobsSubmitter`, and the plan of each started job is the given job graph."""

    def __init__(self, hook: StubFlinkHook, plan: dict[str, Any]) -> None:
        super().__init__(hook)
        hook.get_plan = lambda job_id: JobPlan.model_validate(plan)  # type: ignore[method-assign]


def test_the_submission_program_checks_the_variants_and_each_report_is_the_running_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = StubFlinkHook()
    submitter = _CheckedJobsSubmitter(hook, _plan("jar_plan_replay-pinned.json"))
    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: submitter)
    jobs = _submitter_op(tmp_path, hook, None).execute(context("submit_replays"))
    (call,) = submitter.submitted
    check = IdentityCheck.from_argv(call["program"].program_args)
    production = json.loads((_PLANS / "prod_job_details.json").read_text())
    assert check is not None and check.production == IdentityPlan.from_rest(production)
    assert {v: j["preflight"].splitlines()[0] for v, j in jobs.items()} == {
        v: "identity preflight: MAPS" for v in ("baseline", "baseline_2", "candidate")}


def test_a_refusal_of_the_submission_program_fails_the_task_with_its_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reports = {"candidate": IdentityCheck(production=IdentityPlan.from_rest(
        json.loads((_PLANS / "prod_job_details.json").read_text()))).reports(
        [(ReplayJobSpec.model_validate(_spec(tmp_path)), _plan("jar_plan_replay-dedupe-renamed.json"))])["candidate"]}
    refusal = IdentityCheck.refusal(reports)
    assert refusal and refusal.startswith(IDENTITY_REFUSED) and "(refused: candidate)" in refusal

    class Refusing(StubSubmitter):
        def submit(self, program: Any, **kwargs: Any) -> Any:
            raise FlinkSubmissionError("Submitting ... failed: IdentityRefusedError: ...",
                                       output=f"Traceback (most recent call last):\nIdentityRefusedError: {refusal}")

    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: Refusing("f" * 32))
    with pytest.raises(AirflowFailException) as failed:
        _submitter_op(tmp_path, StubFlinkHook(), None).execute(context("submit_replays"))
    message = str(failed.value)
    assert message.startswith(IDENTITY_REFUSED) and "STATE_DROPPED" in message


def test_running_jobs_that_do_not_map_are_cancelled_and_fail_the_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay program that does not check (a custom one) submitted jobs that do not map: all are cancelled."""
    hook = StubFlinkHook()
    submitter = _CheckedJobsSubmitter(hook, _plan("jar_plan_replay-dedupe-renamed.json"))
    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: submitter)
    with pytest.raises(AirflowFailException, match="do not map onto production's savepoint"):
        _submitter_op(tmp_path, hook, None).execute(context("submit_replays"))
    assert sorted(c[1] for c in hook.calls if c[0] == "cancel_job") == sorted(hook.jobs)


def test_an_unreadable_running_plan_counts_as_checked_only_for_this_packages_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = StubFlinkHook()
    submitter = _JobsSubmitter(hook)

    def no_plan(job_id: str) -> Any:
        raise FlinkRestError("503 Service Unavailable", operation="get job plan", job_id=job_id, status_code=503)

    hook.get_plan = no_plan  # type: ignore[method-assign]
    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: submitter)
    jobs = _submitter_op(tmp_path, hook, None).execute(context("submit_replays"))
    assert all(j["preflight"].startswith("identity preflight: MAPS (checked by the submission program)")
               for j in jobs.values())
    # another replay program may not have checked: its jobs are cancelled
    hook.jobs.clear()
    op = _submitter_op(tmp_path, hook, None)
    op.replay_program = "/opt/my_replay.py"
    with pytest.raises(AirflowFailException, match="do not map"):
        op.execute(context("submit_replays"))


def test_only_the_candidate_s_spec_carries_its_changed_resources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent check's changed resources (its XCom) reach the candidate's replay, which never serves them
    production's cassette; the baselines run production's own code and keep being served."""
    hook = StubFlinkHook()
    submitter = _JobsSubmitter(hook)
    monkeypatch.setattr(replay_ops, "get_submitter", lambda kind, h: submitter)
    op = _submitter_op(tmp_path, hook, _REPORTS)
    op.changed_resources = {"notify_support": "changed", "review_prompt": "changed"}
    op.execute(context("submit_replays"))
    (call,) = submitter.submitted
    specs = ReplayJobSpec.all_from_argv(call["program"].program_args)
    assert {s.variant: s.changed_resources for s in specs} == {
        "baseline": (), "baseline_2": (), "candidate": ("notify_support", "review_prompt")
    }
    assert "changed_resources" in replay_ops.SubmitReplayJobsOperator.template_fields
    with pytest.raises(AirflowFailException, match="must be a mapping or a list"):
        replay_ops.with_changed_resources(specs, "{'notify_support': 'changed'}", None)


def test_collecting_part_files_replaces_a_symlink_planted_at_the_collected_file(tmp_path: Path) -> None:
    parts = tmp_path / "output-parts" / "0"
    parts.mkdir(parents=True)
    (parts / "part-0.jsonl").write_text('{"id": 1}\n\n{"id": 2}\n')
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = tmp_path / "candidate.outputs.jsonl"
    target.symlink_to(victim)
    assert replay_ops.collect_jsonl(tmp_path / "output-parts", target) == 2
    assert victim.read_text() == "keep me"
    assert not target.is_symlink() and target.read_text() == '{"id": 1}\n{"id": 2}\n'
