"""Side effects beyond counts: calls whose arguments or decision/outcome changed, judged against A/A noise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_replayed_and_unmatched_recorded_are_one_outcome_but_blocked_or_run_is_another() -> None:
    """Whether a call matched production's recording follows from its arguments (the arguments aspect's finding):
    served or recorded instead is no outcome change; an unmatched call that was blocked, or ran, is."""
    def unmatched(records: list[AuditRecord], outcome: str = "recorded", fallback: str = "record") -> list[AuditRecord]:
        return [r.model_copy(update={"outcome": outcome, "fallback": fallback}) if r.resource_type == "tool" else r
                for r in records]

    replayed = {"decision": "replay", "outcome": "replayed"}
    stats, reasons = compare_audits(audit("baseline", **replayed), unmatched(audit("candidate", **replayed)),
                                    audit("baseline_2", **replayed), [], CompareConfig())
    assert reasons == [] and stat(stats, "notify_support").outcome_changed_keys == 0
    stats, reasons = compare_audits(audit("baseline", **replayed),
                                    unmatched(audit("candidate", **replayed), "blocked", "block"),
                                    audit("baseline_2", **replayed), [], CompareConfig())
    [reason] = reasons
    assert reason.code == "SIDE_EFFECT_OUTCOME" and "notify_support" in reason.message
    assert "decision/outcome: replay/replayed → replay/blocked (unmatched: block)" in reason.message
    assert stat(stats, "notify_support").outcome_changed_keys == N // 3


# --- few keys, a model that words the tool's reason: the noisy demo's case (issue 46)
KEYS = 6


def notify_audit(variant: str, *, seed: int, unmatched: set[int] = frozenset(), customer_of=None,
                 calls_per_key: int = 3, why: str = "broken item number") -> list[AuditRecord]:
    """``notify_support(review_id, customer, reason)`` for 6 customers: the reason paraphrased per run (``seed``),
    the identifying arguments in ``identity_digest`` as the replay writes them; call numbers in ``unmatched`` were
    not served production's recording (fallback record); ``customer_of`` changes the customer argument, ``why``
    what the reason says."""
    import random

    from airflow_flink_replay.core.call_match import CallArguments, MatchRule

    rng, rule, out, n = random.Random(seed), MatchRule(free_text=frozenset({"reason"})), [], 0
    for c in range(KEYS):
        for r in range(calls_per_key):
            customer = customer_of(c) if customer_of else f"c-{c}"
            kwargs = {"review_id": f"r-{c}-{r}", "customer": customer,
                      "reason": rng.choice(["negative (1/5): ", "negative, 1/5: "]) + f"{why} {r}"}
            served = n not in unmatched
            out.append(AuditRecord.for_call(
                variant=variant, key=f"c-{c}", resource_type="tool", resource_name="notify_support", method="call",
                args=(), kwargs=kwargs, decision="replay", outcome="replayed" if served else "recorded",
                fallback=None if served else "record", matched="arguments" if served else None,
                similarity=0.9 if served else None, identity_digest=rule.identity_digest(CallArguments.of((), kwargs))))
            n += 1
    return out


@pytest.mark.parametrize("noise_unmatched", [set(), {9, 15}])
def test_few_keys_matched_or_unmatched_at_random_and_reworded_reasons_are_no_change(noise_unmatched: set) -> None:
    """Issue 46: with 6 keys one unmatched call in the candidate read 16.7% of keys vs noise 0.0% (NOT_SIGNIFICANT),
    and every reworded reason was an argument change."""
    stats, reasons = compare_audits(notify_audit("baseline", seed=1), notify_audit("candidate", seed=3, unmatched={4}),
                                    notify_audit("baseline_2", seed=2, unmatched=noise_unmatched), [], CompareConfig())
    assert [r for r in reasons if r.severity != "info"] == []
    tool = stat(stats, "notify_support")
    assert tool.status == "ok" and tool.change_unit == "calls" and tool.outcome_changed_keys == 0
    assert tool.arguments_changed_keys == 0 and tool.free_text_changed_keys == 0  # paraphrased: no change
    assert tool.changed_calls == {"arguments": 0, "free_text": 0, "outcome": 0}


def test_few_keys_a_changed_identifying_argument_still_fails() -> None:
    stats, reasons = compare_audits(
        notify_audit("baseline", seed=1), notify_audit("candidate", seed=3, customer_of=lambda c: f"C{c}"),
        notify_audit("baseline_2", seed=2, unmatched={9}), [], CompareConfig())
    fails = [r for r in reasons if r.severity == "fail"]
    assert [r.code for r in fails] == ["SIDE_EFFECT_ARGUMENTS"]
    assert "with other arguments for 18 calls (100.0% of calls vs noise 0.0%)" in fails[0].message
    assert 'kwargs.customer: "c-0" → "C0"' in fails[0].message
    tool = stat(stats, "notify_support")
    assert tool.status == "regression" and tool.changed_calls["arguments"] == 18 and tool.noise_calls["arguments"] == 0


def test_with_few_keys_calls_are_the_units() -> None:
    """2 of 6 keys changed in all their 10 calls: per key 33% vs 0% is not significant with 6 keys; per call, 20
    of 60 calls vs 0 are."""
    def changed(c: int) -> str:
        return f"C{c}" if c < 2 else f"c-{c}"

    a, b, a2 = (notify_audit("baseline", seed=1, calls_per_key=10),
                notify_audit("candidate", seed=1, calls_per_key=10, customer_of=changed),
                notify_audit("baseline_2", seed=1, calls_per_key=10))
    stats, reasons = compare_audits(a, b, a2, [], CompareConfig())
    [reason] = reasons
    assert reason.code == "SIDE_EFFECT_ARGUMENTS" and reason.severity == "fail"
    assert "for 20 calls (33.3% of calls vs noise 0.0%)" in reason.message
    tool = stat(stats, "notify_support")
    assert (tool.change_unit, tool.changed_calls["arguments"], tool.arguments_changed_keys) == ("calls", 20, 2)
    _, by_keys = compare_audits(a, b, a2, [], CompareConfig(call_units_below_keys=0))
    assert [(r.code, r.severity) for r in by_keys] == [("NOT_SIGNIFICANT", "inconclusive")]
    assert "33.3% of keys vs noise 0.0%" in by_keys[0].message


def test_free_text_is_judged_by_similarity_against_the_baselines_own_rewording() -> None:
    """A paraphrased reason is no change; a reason that says something else is, unless the baselines write other
    reasons as often themselves."""
    def other(variant: str, seed: int, every: int) -> list[AuditRecord]:
        records = notify_audit(variant, seed=seed, why="customer demands a full refund and will dispute")
        plain = notify_audit(variant, seed=seed)
        return [r if i % every == 0 else plain[i] for i, r in enumerate(records)]

    baseline, baseline_2 = notify_audit("baseline", seed=1), notify_audit("baseline_2", seed=2)
    _, reasons = compare_audits(baseline, notify_audit("candidate", seed=3), baseline_2, [], CompareConfig())
    assert reasons == []
    stats, reasons = compare_audits(baseline, other("candidate", 3, 1), baseline_2, [], CompareConfig())
    [reason] = reasons
    assert reason.code == "SIDE_EFFECT_ARGUMENTS" and reason.severity == "fail"
    assert "with other free text for 18 calls (100.0% of calls vs noise 0.0%)" in reason.message
    assert "kwargs.reason:" in reason.message and "refund" in reason.message
    tool = stat(stats, "notify_support")
    assert tool.arguments_changed_keys == 0 and tool.free_text_changed_keys == KEYS
    assert [c.aspect for c in tool.changes] == ["free_text"]
    _, reasons = compare_audits(baseline, other("candidate", 3, 2), other("baseline_2", 2, 2), [], CompareConfig())
    assert [r.severity for r in reasons if r.severity != "info"] == []
