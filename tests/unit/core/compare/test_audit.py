"""The side-effect comparison's account of the resources the candidate changed (``CHANGED_RESOURCES``): which
ones the agent check found changed, and how the candidate's replay treated their calls — none was served
production's recording. (Counts, arguments and outcomes: test_call_changes.py, test_engine.py.)"""

from __future__ import annotations

import json
from pathlib import Path

from airflow_flink_replay.core.audit import AuditRecord
from airflow_flink_replay.core.compare import CompareConfig, compare_runs
from airflow_flink_replay.core.compare.audit import changed_resources_reasons, compare_audits
from tests.unit.core.compare.test_call_changes import N, audit


def _changed(records: list[AuditRecord], **update: object) -> list[AuditRecord]:
    """``records`` with every call of the tool marked as the candidate's changed tool (and ``update`` applied)."""
    return [r.model_copy(update={"changed": True, **update}) if r.resource_type == "tool" else r for r in records]


def test_a_changed_pure_tool_that_ran_is_listed_with_its_calls_and_the_changed_prompt_too() -> None:
    """A pure tool is allowed in every variant: the candidate's ran its own code, nothing else differs."""
    stats, reasons = compare_audits(audit("baseline"), _changed(audit("candidate")), audit("baseline_2"), [],
                                    CompareConfig(), changed={"notify_support": "changed", "review_prompt": "changed"})
    [reason] = reasons
    assert (reason.code, reason.severity) == ("CHANGED_RESOURCES", "info")
    assert reason.message == (
        "the candidate changed 2 resources (fingerprints differ from production's), never served production's "
        f"recorded results: tool notify_support (changed; executed: allow, {N // 3} calls); review_prompt (changed; "
        "no call of its own in the window)"
    )
    assert reason.fields == ["notify_support", "review_prompt"]
    assert all(s.status == "ok" for s in stats)


def test_a_changed_side_effecting_tool_recorded_instead_of_replayed_fails_saying_why() -> None:
    replayed = {"decision": "replay", "outcome": "replayed"}
    candidate = _changed(audit("candidate", **replayed), decision="record", outcome="recorded")
    _, reasons = compare_audits(audit("baseline", **replayed), candidate, audit("baseline_2", **replayed), [],
                                CompareConfig(), changed={"notify_support": "changed"})  # fmt: skip
    by_code = {r.code: r for r in reasons}
    assert set(by_code) == {"SIDE_EFFECT_OUTCOME", "CHANGED_RESOURCES"}
    assert "replay/replayed → record/recorded (changed: not replayed)" in by_code["SIDE_EFFECT_OUTCOME"].message
    assert f"tool notify_support (changed; recorded (not executed): record, {N // 3} calls)" in (
        by_code["CHANGED_RESOURCES"].message
    )


def test_nothing_changed_nothing_listed_and_the_audit_alone_names_a_changed_resource() -> None:
    assert changed_resources_reasons(audit("candidate"), None) == []
    assert changed_resources_reasons(audit("candidate"), {}) == []
    [reason] = changed_resources_reasons(_changed(audit("candidate")), None)  # the audit marks the calls
    assert "tool notify_support (changed; executed: allow" in reason.message


def test_a_candidate_whose_changed_tool_changes_its_outputs_fails(tmp_path: Path) -> None:
    """Through compare_runs: the candidate's tool ran (not served production's answer) and its outputs moved."""
    paths: dict[str, object] = {}
    for variant, records in (("baseline", audit("baseline")), ("baseline_2", audit("baseline_2")),
                             ("candidate", _changed(audit("candidate")))):  # fmt: skip
        paths[variant] = tmp_path / f"{variant}.audit.jsonl"
        (tmp_path / f"{variant}.audit.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
    label = {"baseline": "label r-{i}", "baseline_2": "label r-{i}", "candidate": "LABEL r-{i}"}
    outs = {}
    for variant, text in label.items():
        outs[variant] = tmp_path / f"{variant}.jsonl"
        outs[variant].write_text("".join(json.dumps({"id": f"c-{i}", "label": text.format(i=i)}) + "\n"
                                         for i in range(N)))  # fmt: skip
    result = compare_runs(outs["baseline"], outs["candidate"], outs["baseline_2"], key="$.id",
                          audits={**paths, "changed": {"notify_support": "changed"}})  # fmt: skip
    codes = {r.code for r in result.reasons}
    assert result.verdict == "FAIL" and "FIELD_REGRESSION" in codes and "CHANGED_RESOURCES" in codes


def test_a_pipelines_side_effects_name_the_stage_whose_agent_called() -> None:
    """A call of a pipeline's agent carries its stage (the replay's proxies set it): the statistic, its reasons
    name it; a job of one agent's calls carry none."""
    staged = [r.model_copy(update={"stage": "analysis"}) for r in audit("candidate", changed_every=1, reason="late")]
    stats, reasons = compare_audits(
        [r.model_copy(update={"stage": "analysis"}) for r in audit("baseline")], staged,
        [r.model_copy(update={"stage": "analysis"}) for r in audit("baseline_2")], [], CompareConfig(),
    )  # fmt: skip
    assert {s.stage for s in stats} == {"analysis"}
    [reason] = reasons
    assert reason.code == "SIDE_EFFECT_ARGUMENTS", reason
    assert reason.message.startswith("candidate calls tool notify_support of stage analysis with other arguments")
    plain, _ = compare_audits(audit("baseline"), audit("candidate"), audit("baseline_2"), [], CompareConfig())
    assert {s.stage for s in plain} == {None}
