"""Side effects beyond counts: calls whose arguments or decision/outcome changed, judged against A/A noise."""

from __future__ import annotations

import json
from pathlib import Path

from airflow_flink_replay.core.audit import REPLAY_NAMESPACE, AuditRecord
from airflow_flink_replay.core.compare import CompareConfig, compare_runs
from airflow_flink_replay.core.compare.audit import compare_audits
from airflow_flink_replay.core.compare.call_changes import changed_fields

N = 60


def call(variant: str, key: str, resource_type: str, name: str, method: str, kwargs: dict, *,
         decision: str = "allow", outcome: str = "ok", namespace: str = "") -> AuditRecord:
    return AuditRecord.for_call(variant=variant, key=key, resource_type=resource_type, resource_name=name,
                                method=method, args=(), kwargs=kwargs, decision=decision, outcome=outcome,
                                replace={namespace: REPLAY_NAMESPACE} if namespace else None)


def audit(variant: str, *, reason: str = "broken item", changed_every: int = 0, prompt: str = "rate it",
          decision: str = "allow", outcome: str = "ok") -> list[AuditRecord]:
    """Per key: one chat call, one memory write under the variant's own namespace, one tool call every third
    key; ``changed_every``: every n-th tool call gets ``reason`` (else 'broken item')."""
    namespace = f"afr-run-7-{variant}"
    out = []
    for i in range(N):
        key = f"c-{i}"
        out.append(call(variant, key, "chat_model", "llm", "chat", {"messages": [prompt, f"review {i}"]}))
        out.append(call(variant, key, "vector_store", "memory", "remember",
                        {"user_id": namespace, "agent_id": key, "text": f"review {i}"}, namespace=namespace))
        if i % 3 == 0:
            why = reason if changed_every and (i // 3) % changed_every == 0 else "broken item"
            out.append(call(variant, key, "tool", "notify_support", "call",
                            {"review_id": f"r-{i}", "reason": why, "api_key": "sk-planted"},
                            decision=decision, outcome=outcome))
    return out


def stat(stats, name):
    return next(s for s in stats if s.resource_name == name)


def test_a_and_a_prime_with_their_own_namespaces_show_no_change() -> None:
    stats, reasons = compare_audits(audit("baseline"), audit("candidate"), audit("baseline_2"), [], CompareConfig())
    assert reasons == []
    assert all(s.status == "ok" and s.arguments_changed_keys == 0 and s.outcome_changed_keys == 0 for s in stats)


def test_tool_called_with_other_arguments_fails_naming_tool_and_field() -> None:
    stats, reasons = compare_audits(audit("baseline"), audit("candidate", reason="refund", changed_every=1),
                                    audit("baseline_2"), [], CompareConfig())
    [reason] = reasons
    assert reason.code == "SIDE_EFFECT_ARGUMENTS" and reason.severity == "fail"
    assert "candidate calls tool notify_support with other arguments for 20 keys" in reason.message
    assert 'kwargs.reason: "broken item" → "refund"' in reason.message
    tool = stat(stats, "notify_support")
    assert tool.status == "regression" and tool.arguments_changed_keys == 20 and tool.arguments_noise_keys == 0
    [change] = tool.changes
    assert change.key == "c-0" and change.aspect == "arguments"
    assert "sk-planted" not in change.baseline + change.candidate + reason.message  # secrets masked


def test_argument_changes_within_the_baseline_runs_noise_pass() -> None:
    """The baseline runs themselves disagree on a tool's free-text argument for a third of its keys: the same
    share in the candidate is noise."""
    a2 = audit("baseline_2", reason="refund", changed_every=3)
    b = audit("candidate", reason="refund", changed_every=3)
    stats, reasons = compare_audits(audit("baseline"), b, a2, [], CompareConfig())
    assert reasons == []
    assert stat(stats, "notify_support").arguments_changed_keys == stat(stats, "notify_support").arguments_noise_keys


def test_a_changed_prompt_is_not_a_side_effect_but_a_changed_decision_is() -> None:
    stats, reasons = compare_audits(audit("baseline"), audit("candidate", prompt="rate it harshly"),
                                    audit("baseline_2"), [], CompareConfig())
    assert reasons == [] and stat(stats, "llm").arguments_changed_keys == 0  # chat arguments are not compared
    with_chat = CompareConfig(compare_arguments_of=["chat_model"])
    _, reasons = compare_audits(audit("baseline"), audit("candidate", prompt="rate it harshly"),
                                audit("baseline_2"), [], with_chat)
    assert [r.code for r in reasons] == ["SIDE_EFFECT_ARGUMENTS"] and "chat_model llm" in reasons[0].message

    _, reasons = compare_audits(audit("baseline"), audit("candidate", decision="record", outcome="recorded"),
                                audit("baseline_2"), [], CompareConfig())
    [reason] = reasons
    assert reason.code == "SIDE_EFFECT_OUTCOME"
    assert "decision/outcome: allow/ok → record/recorded" in reason.message


def test_without_baseline_2_any_argument_change_fails_by_exact_rules() -> None:
    _, reasons = compare_audits(audit("baseline"), audit("candidate", reason="refund", changed_every=20), None, [],
                                CompareConfig())
    assert [r.code for r in reasons] == ["SIDE_EFFECT_ARGUMENTS"] and "exact rules" in reasons[0].message


def test_noisy_arguments_are_reported_not_judged() -> None:
    a2 = audit("baseline_2", reason="refund", changed_every=1)
    _, reasons = compare_audits(audit("baseline"), audit("candidate", reason="other", changed_every=1), a2, [],
                                CompareConfig(max_noise_rate=0.2))
    assert [(r.code, r.severity) for r in reasons] == [("SIDE_EFFECT_NOISY", "info")]


def test_changed_fields_lists_paths_and_handles_truncated_previews() -> None:
    assert changed_fields('{"a": 1, "b": {"c": [1, 2]}}', '{"a": 1, "b": {"c": [1, 3]}, "d": true}') == [
        "b.c[1]: 2 → 3",
        "d: (absent) → true",
    ]
    assert changed_fields('{"a": "x…', '{"a": "y"}') == []


def test_gate_report_shows_the_argument_change(tmp_path: Path) -> None:
    """Through compare_runs: the verdict, the summary's resource entry and the HTML report."""
    from airflow_flink_replay.core.compare import write_reports

    outs = [{"id": f"c-{i}", "label": "ok"} for i in range(N)]
    paths = {}
    for name, records in (("baseline", audit("baseline")), ("baseline_2", audit("baseline_2")),
                          ("candidate", audit("candidate", reason="refund", changed_every=1))):
        (tmp_path / f"{name}.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
        paths[name] = tmp_path / f"{name}.jsonl"
    (tmp_path / "out.jsonl").write_text("".join(json.dumps(o) + "\n" for o in outs))
    out = tmp_path / "out.jsonl"
    result = compare_runs(out, out, out, key="$.id", audits=paths)
    assert result.verdict == "FAIL" and result.reasons[0].code == "SIDE_EFFECT_ARGUMENTS"
    files = write_reports(result, tmp_path / "report")
    html = Path(str(files["html"])).read_text()
    assert "sk-planted" not in html
    table = html[html.index('id="side-effects"'):]
    assert "other arguments for" in table
    assert "<code>kwargs.reason: &#34;broken item&#34; → &#34;refund&#34;</code>" in table
    assert "<ins>refund</ins>" in table


def test_calls_that_went_from_replayed_to_unmatched_fail_as_an_outcome_change() -> None:
    def unmatched(records: list[AuditRecord]) -> list[AuditRecord]:
        return [r.model_copy(update={"outcome": "recorded", "fallback": "record"}) if r.resource_type == "tool" else r
                for r in records]

    replayed = {"decision": "replay", "outcome": "replayed"}
    stats, reasons = compare_audits(audit("baseline", **replayed), unmatched(audit("candidate", **replayed)),
                                    audit("baseline_2", **replayed), [], CompareConfig())
    [reason] = reasons
    assert reason.code == "SIDE_EFFECT_OUTCOME" and "notify_support" in reason.message
    assert "decision/outcome: replay/replayed → replay/recorded (unmatched: record)" in reason.message
    assert stat(stats, "notify_support").outcome_changed_keys == N // 3
