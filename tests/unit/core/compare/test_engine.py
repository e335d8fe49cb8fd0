"""The comparison engine on generated runs with a known truth (acceptance of issue 7)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from airflow_flink_replay.core.compare import (
    AuditRule,
    CompareConfig,
    CompareInputError,
    FieldRule,
    compare_runs,
)
from airflow_flink_replay.core.compare.result import ResourceStat
from airflow_flink_replay.core.compare.stats import newcombe_lower, wilson
from airflow_flink_replay.core.compare.synthetic import make_audit, make_run, write_jsonl

N = 400


def runs(tmp_path: Path, a: dict | None = None, a2: dict | None = None, b: dict | None = None, n: int = N):
    """Write A, A', B with the given perturbations; returns their paths."""
    pa = write_jsonl(tmp_path / "a.jsonl", make_run(n, "baseline", 1, **(a or {})))
    pa2 = write_jsonl(tmp_path / "a2.jsonl", make_run(n, "baseline_2", 2, **(a2 or {})))
    pb = write_jsonl(tmp_path / "b.jsonl", make_run(n, "candidate", 3, **(b or {})))
    return pa, pa2, pb


def codes(result) -> set[str]:
    return {r.code for r in result.reasons if r.severity != "info"}


def test_identical_runs_pass(tmp_path: Path) -> None:
    a, a2, b = runs(tmp_path)
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "PASS", result.reasons
    assert result.mode == "noise_calibrated"
    assert result.counts.aligned_candidate == N and result.counts.aligned_noise == N
    assert all(f.candidate_rate == 0 and f.status == "ok" for f in result.fields)
    # eight fields, the replay bookkeeping field is never one of them
    assert {f.path for f in result.fields} == {
        "$.id", "$.customer", "$.label", "$.score", "$.summary", "$.tools", "$.count", "$.priority"
    }


def test_paraphrase_noise_equal_in_baseline_2_and_candidate_passes(tmp_path: Path) -> None:
    noise = {"paraphrase": 0.3}
    a, a2, b = runs(tmp_path, a=noise, a2=noise, b=noise)
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "PASS", result.reasons
    summary = next(f for f in result.fields if f.path == "$.summary")
    assert summary.comparator.startswith("text")
    assert summary.noise_rate and summary.noise_rate > 0.2  # the rewording really is seen as different
    assert summary.candidate_rate > 0.2
    assert summary.status == "ok"


def test_same_paraphrase_without_baseline_2_fails_by_exact_rules(tmp_path: Path) -> None:
    noise = {"paraphrase": 0.3}
    a, _, b = runs(tmp_path, a=noise, a2=noise, b=noise)
    result = compare_runs(a, b, key="$.id")
    assert result.mode == "exact"
    assert result.verdict == "FAIL"
    assert "NO_NOISE_BASELINE" in {r.code for r in result.reasons}
    assert "exact rules" in result.method.lower()


def test_categorical_change_while_baseline_stable_fails(tmp_path: Path) -> None:
    noise = {"paraphrase": 0.3}
    a, a2, b = runs(tmp_path, a=noise, a2=noise, b={**noise, "label_change": 0.15})
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "FAIL"
    assert "FIELD_REGRESSION" in codes(result)
    worst = result.worst_field
    assert worst is not None and worst.path == "$.label" and worst.status == "regression"
    assert worst.noise_rate == 0 and 0.08 < worst.candidate_rate < 0.25
    assert worst.lower_bound is not None and worst.lower_bound > 0
    assert worst.candidate_only_diffs == worst.candidate_diffs
    # the report's examples start with the label and show the candidate-only change
    assert result.examples and result.examples[0].field == "$.label"
    assert result.examples[0].candidate_only
    label = next(v for v in result.examples[0].values if v.path == "$.label")
    assert label.candidate_differs and label.baseline != label.candidate
    assert "label" in result.examples[0].structure


def test_missing_outputs_fail(tmp_path: Path) -> None:
    a, a2, b = runs(tmp_path, b={"drop": 0.05})
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "FAIL"
    assert "MISSING_OUTPUTS" in codes(result)
    assert result.counts.missing_in_candidate > 5
    assert result.missing and result.missing[0].key.startswith("r-")
    assert result.counts.aligned_candidate + result.counts.missing_in_candidate == N


def test_extra_outputs_fail(tmp_path: Path) -> None:
    a, a2, b = runs(tmp_path, n=N)
    more = make_run(N + 30, "candidate", 3)
    write_jsonl(b, more)
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "FAIL"
    assert "EXTRA_OUTPUTS" in codes(result)
    assert result.counts.extra_in_candidate == 30


def test_shuffled_order_passes(tmp_path: Path) -> None:
    # three outputs per key: within a key they align by the input offset in _replay, not by line order
    a = write_jsonl(tmp_path / "a.jsonl", make_run(150, "baseline", 1, outputs_per_key=3))
    a2 = write_jsonl(tmp_path / "a2.jsonl", make_run(150, "baseline_2", 2, outputs_per_key=3))
    lines = make_run(150, "candidate", 3, outputs_per_key=3)
    random.Random(5).shuffle(lines)
    b = write_jsonl(tmp_path / "b.jsonl", lines)
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "PASS", result.reasons
    assert result.counts.aligned_candidate == 450
    count = next(f for f in result.fields if f.path == "$.count")
    assert count.candidate_diffs == 0  # 'count' is the output's index within its key


def test_shuffled_without_replay_meta_misaligns_within_key(tmp_path: Path) -> None:
    """Control for the test above: without _replay the order within a key is the file order."""
    strip = lambda recs: [{k: v for k, v in r.items() if k != "_replay"} for r in recs]  # noqa: E731
    a = write_jsonl(tmp_path / "a.jsonl", strip(make_run(150, "baseline", 1, outputs_per_key=3)))
    a2 = write_jsonl(tmp_path / "a2.jsonl", strip(make_run(150, "baseline_2", 2, outputs_per_key=3)))
    lines = strip(make_run(150, "candidate", 3, outputs_per_key=3))
    random.Random(5).shuffle(lines)
    b = write_jsonl(tmp_path / "b.jsonl", lines)
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "FAIL"
    assert result.worst_field is not None and result.worst_field.path == "$.count"


def test_numeric_jitter_within_tolerance_passes(tmp_path: Path) -> None:
    a, a2, b = runs(tmp_path, b={"jitter": 0.004})
    config = CompareConfig(fields=[FieldRule(path="$.score", comparator="numeric", abs_tol=0.01)])
    result = compare_runs(a, b, a2, key="$.id", config=config)
    assert result.verdict == "PASS", result.reasons
    score = next(f for f in result.fields if f.path == "$.score")
    assert score.candidate_rate == 0 and score.comparator.startswith("numeric")


def test_numeric_jitter_beyond_tolerance_fails(tmp_path: Path) -> None:
    a, a2, b = runs(tmp_path, b={"jitter": 0.05})
    config = CompareConfig(fields=[FieldRule(path="$.score", comparator="numeric", abs_tol=0.01)])
    result = compare_runs(a, b, a2, key="$.id", config=config)
    assert result.verdict == "FAIL"
    assert result.worst_field is not None and result.worst_field.path == "$.score"


def test_changed_tool_call_set_fails(tmp_path: Path) -> None:
    a, a2, b = runs(tmp_path, b={"tool_change": 0.1})
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "FAIL"
    assert result.worst_field is not None and result.worst_field.path == "$.tools"
    assert result.worst_field.comparator == "set"


def test_tool_order_does_not_matter_as_a_set(tmp_path: Path) -> None:
    recs = make_run(N, "baseline", 1, tool_change=0.3)
    a = write_jsonl(tmp_path / "a.jsonl", recs)
    a2 = write_jsonl(tmp_path / "a2.jsonl", recs)
    b = write_jsonl(tmp_path / "b.jsonl", [{**r, "tools": list(reversed(r["tools"]))} for r in recs])
    assert compare_runs(a, b, a2, key="$.id").verdict == "PASS"
    by_index = CompareConfig(list_mode="index")
    assert compare_runs(a, b, a2, key="$.id", config=by_index).verdict == "FAIL"


def test_side_effect_change_fails_even_when_outputs_match(tmp_path: Path) -> None:
    a, a2, b = runs(tmp_path)
    outs = make_run(N, "baseline", 1)
    aa = write_jsonl(tmp_path / "aa.jsonl", make_audit(outs, "baseline"))
    aa2 = write_jsonl(tmp_path / "aa2.jsonl", make_audit(outs, "baseline_2"))
    ab = write_jsonl(tmp_path / "ab.jsonl", make_audit(outs, "candidate", extra_tool_keys=0.1))
    result = compare_runs(a, b, a2, key="$.id", audits={"baseline": aa, "baseline_2": aa2, "candidate": ab})
    assert result.verdict == "FAIL"
    assert all(f.status == "ok" for f in result.fields)  # the text output looks fine
    reason = next(r for r in result.reasons if r.code == "SIDE_EFFECT_REGRESSION")
    notify = next(s for s in result.resources if s.resource_name == "notify_support")
    assert notify.status == "regression" and notify.new_keys > 20
    assert f"candidate now calls tool notify_support for {notify.new_keys} keys" in reason.message
    assert result.resources[0].resource_name == "notify_support"  # worst first
    # the same audits without the extra calls pass
    ok = compare_runs(a, b, a2, key="$.id", audits={"baseline": aa, "baseline_2": aa2, "candidate": aa2})
    assert ok.verdict == "PASS", ok.reasons


def test_more_calls_on_the_same_keys_are_named_as_such(tmp_path: Path) -> None:
    """A second chat round on the same keys (after a tool call) is a change in call counts, not new keys."""
    a, a2, b = runs(tmp_path)
    outs = make_run(N, "baseline", 1)
    base = make_audit(outs, "baseline")
    twice = [r for r in make_audit(outs, "candidate") for _ in range(2 if r["resource_type"] == "chat_model"
                                                                       and int(r["key"].split("-")[1]) % 3 == 0 else 1)]
    audits = {
        "baseline": write_jsonl(tmp_path / "aa.jsonl", base),
        "baseline_2": write_jsonl(tmp_path / "aa2.jsonl", make_audit(outs, "baseline_2")),
        "candidate": write_jsonl(tmp_path / "ab.jsonl", twice),
    }
    result = compare_runs(a, b, a2, key="$.id", audits=audits)
    reason = next(r for r in result.reasons if r.code == "SIDE_EFFECT_REGRESSION")
    chat = next(s for s in result.resources if s.resource_type == "chat_model")
    assert chat.new_keys == 0 and chat.dropped_keys == 0
    assert "candidate calls chat_model llm (chat) a different number of times for" in reason.message, reason.message
    assert "for 0 keys" not in reason.message


def test_new_resource_and_audit_rule(tmp_path: Path) -> None:
    a, a2, b = runs(tmp_path, b={"tool_change": 0.02})
    outs_a = make_run(N, "baseline", 1)
    outs_b = make_run(N, "candidate", 3, tool_change=0.02)
    aa = write_jsonl(tmp_path / "aa.jsonl", make_audit(outs_a, "baseline"))
    ab = write_jsonl(tmp_path / "ab.jsonl", make_audit(outs_b, "candidate"))
    cfg = CompareConfig(audit_rules=[AuditRule(resource_name="issue_*", resource_type="tool")])
    result = compare_runs(a, b, a2, key="$.id", config=cfg, audits={"baseline": aa, "candidate": ab})
    got = codes(result)
    assert {"NEW_RESOURCE_CALL", "AUDIT_RULE"} <= got
    new = next(r for r in result.reasons if r.code == "NEW_RESOURCE_CALL")
    assert "issue_refund" in new.message and "baseline never did" in new.message


def test_audit_needs_both_baseline_and_candidate(tmp_path: Path) -> None:
    a, a2, b = runs(tmp_path, n=30)
    aa = write_jsonl(tmp_path / "aa.jsonl", make_audit(make_run(30, "baseline", 1), "baseline"))
    with pytest.raises(CompareInputError, match="both the baseline and the candidate audit"):
        compare_runs(a, b, a2, key="$.id", audits={"baseline": aa})


def test_bad_audit_record_names_line_and_field(tmp_path: Path) -> None:
    a, a2, b = runs(tmp_path, n=30)
    recs = make_audit(make_run(30, "baseline", 1), "baseline")
    recs[4]["decision"] = "maybe"
    aa = write_jsonl(tmp_path / "aa.jsonl", recs)
    with pytest.raises(CompareInputError, match=r"aa.jsonl:5: audit record field 'decision'"):
        compare_runs(a, b, a2, key="$.id", audits={"baseline": aa, "candidate": aa})


def test_must_not_change_fails_below_the_noise_thresholds(tmp_path: Path) -> None:
    a, a2, b = runs(tmp_path)
    recs = make_run(N, "candidate", 3)
    for r in recs[:2]:
        r["priority"] = "urgent"
    write_jsonl(b, recs)
    plain = compare_runs(a, b, a2, key="$.id")
    assert plain.verdict == "PASS"  # 2 of 400 is under the 2-point absolute margin
    strict = CompareConfig(fields=[FieldRule(path="$.priority", must_not_change=True)])
    result = compare_runs(a, b, a2, key="$.id", config=strict)
    assert result.verdict == "FAIL"
    assert "MUST_NOT_CHANGE" in codes(result)
    assert result.worst_field is not None and result.worst_field.path == "$.priority"
    assert result.worst_field.status == "changed"


def test_too_few_aligned_is_inconclusive(tmp_path: Path) -> None:
    a, a2, b = runs(tmp_path, n=10)
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict == "INCONCLUSIVE"
    assert "TOO_FEW_ALIGNED" in codes(result)


def test_wrong_key_path_is_inconclusive_with_a_hint(tmp_path: Path) -> None:
    a, a2, b = runs(tmp_path, n=50)
    result = compare_runs(a, b, a2, key="$.request_id")
    assert result.verdict == "INCONCLUSIVE"
    msg = next(r.message for r in result.reasons if r.code == "TOO_FEW_ALIGNED")
    assert "lack the key $.request_id" in msg


def test_field_noisier_than_the_limit_is_inconclusive(tmp_path: Path) -> None:
    # score jitters in every run (far beyond the default tolerance): the noise itself is ~100%. Counted by
    # occurrence (numeric_noise_band off) it cannot decide; judged by size (the default) the same jitter in
    # the candidate passes (test_engine_not_fooled.py).
    jitter = {"jitter": 0.05}
    a, a2, b = runs(tmp_path, a=jitter, a2=jitter, b=jitter)
    result = compare_runs(a, b, a2, key="$.id", config=CompareConfig(numeric_noise_band=False))
    assert result.verdict == "INCONCLUSIVE"
    assert "NOISE_TOO_HIGH" in codes(result)
    score = next(f for f in result.fields if f.path == "$.score")
    assert score.status == "too_noisy"
    # ignoring it (or giving it a tolerance) makes the comparison conclusive again
    assert compare_runs(a, b, a2, key="$.id", ignore=["$.score"]).verdict == "PASS"


def test_few_outputs_above_threshold_are_not_significant(tmp_path: Path) -> None:
    a, a2, b = runs(tmp_path, n=25)
    recs = make_run(25, "candidate", 3)
    recs[0]["label"] = recs[1]["label"] = "flipped"
    write_jsonl(b, recs)
    result = compare_runs(a, b, a2, key="$.id")
    label = next(f for f in result.fields if f.path == "$.label")
    assert label.status == "not_significant"  # 8% vs 0%, but 25 outputs cannot show it
    assert result.verdict == "INCONCLUSIVE"
    assert "NOT_SIGNIFICANT" in codes(result)


def test_replay_field_and_ignored_paths(tmp_path: Path) -> None:
    # _replay differs between runs (variant name) and is never compared
    a, _, b = runs(tmp_path, b={"paraphrase": 0.5})
    result = compare_runs(a, b, key="$.id", ignore=["$.summary"])
    assert result.verdict == "PASS", result.reasons
    assert "$._replay" in result.ignore and "$.summary" in result.ignore
    assert not any(f.path.startswith("$._replay") or f.path == "$.summary" for f in result.fields)


def test_nested_key_and_nested_fields(tmp_path: Path) -> None:
    def rec(i: int, color: str) -> dict:
        return {"meta": {"req": {"id": i}}, "items": [{"sku": f"s{i}", "qty": 1}, {"sku": "x", "qty": 2}],
                "color": color}

    a = write_jsonl(tmp_path / "a.jsonl", [rec(i, "red") for i in range(60)])
    b = write_jsonl(tmp_path / "b.jsonl", [rec(i, "red") if i % 3 else {**rec(i, "red"), "items": [
        {"sku": f"s{i}", "qty": 5}, {"sku": "x", "qty": 2}]} for i in range(60)])
    result = compare_runs(a, b, a, key="$.meta.req.id")
    assert result.verdict == "FAIL"
    assert result.worst_field is not None and result.worst_field.path == "$.items[0].qty"
    # a jsonpath-ng expression works as key too
    result2 = compare_runs(a, b, a, key="$.items[?(@.qty < 2)].sku")
    assert result2.counts.aligned_candidate == 40  # outputs whose first item changed have no such key


def test_bad_json_line_names_the_line(tmp_path: Path) -> None:
    a, a2, b = runs(tmp_path, n=5)
    b.write_text(b.read_text() + "{not json\n")
    with pytest.raises(CompareInputError, match=r"b\.jsonl:6: invalid JSON"):
        compare_runs(a, b, a2, key="$.id")
    b.write_text('{"id": 1}\n[1, 2]\n')
    with pytest.raises(CompareInputError, match=r"b\.jsonl:2: expected a JSON object"):
        compare_runs(a, b, a2, key="$.id")
    with pytest.raises(CompareInputError, match="file not found"):
        compare_runs(a, tmp_path / "nope.jsonl", key="$.id")
    with pytest.raises(CompareInputError, match="must start with"):
        compare_runs(a, a, key="id")


def test_summary_is_json_and_small(tmp_path: Path) -> None:
    a, a2, b = runs(tmp_path, b={"label_change": 0.2})
    result = compare_runs(a, b, a2, key="$.id")
    summary = result.summary()
    assert json.loads(json.dumps(summary))["verdict"] == "FAIL"
    assert summary["worst_fields"][0]["path"] == "$.label"
    assert [r["code"] for r in summary["reasons"]] == ["FIELD_REGRESSION"]


def test_wilson_and_newcombe_match_published_values() -> None:
    # Newcombe (1998), example (a): 56/70 vs 48/80, method 10 95% CI for the difference = (0.0524, 0.3339)
    lo, hi = wilson(56, 70, 1.959964)
    assert (round(lo, 4), round(hi, 4)) == (0.6918, 0.8770)
    assert round(newcombe_lower(56, 70, 48, 80, 1.959964), 4) == 0.0524
    assert round(-newcombe_lower(48, 80, 56, 70, 1.959964), 4) == 0.3339  # the upper limit, by symmetry
    assert wilson(0, 0, 1.96) == (0.0, 1.0)


def test_audit_keyed_by_agent_key_other_than_output_key(tmp_path: Path) -> None:
    """The agent may be keyed by customer while outputs are keyed by request id: rates use audit keys."""
    a, a2, b = runs(tmp_path)
    outs = make_run(N, "baseline", 1)

    def by_customer(recs: list[dict]) -> list[dict]:
        return [{**r, "key": next(o["customer"] for o in outs if o["id"] == r["key"])} for r in recs]

    aa = write_jsonl(tmp_path / "aa.jsonl", by_customer(make_audit(outs, "baseline")))
    ab = write_jsonl(tmp_path / "ab.jsonl", by_customer(make_audit(outs, "candidate", extra_tool_keys=0.1)))
    result = compare_runs(a, b, a2, key="$.id", audits={"baseline": aa, "candidate": ab})
    notify = next(s for s in result.resources if s.resource_name == "notify_support")
    customers = len({o["customer"] for o in outs})
    # the rate is over the customers seen in the audits, not diluted by the request ids of the outputs
    differing = notify.candidate_rate * customers
    assert differing == pytest.approx(round(differing)) and round(differing) >= notify.new_keys > 0
    assert notify.candidate_rate > 0.1  # over N + customers keys it would be diluted to ~0.04
    assert notify.example_keys and notify.example_keys[0].startswith("c-")


def test_audit_folder_of_worker_files(tmp_path: Path) -> None:
    """The replay job writes audit-<variant>-<pid>.jsonl per worker: a folder reads them all."""
    a, a2, b = runs(tmp_path)
    outs = make_run(N, "baseline", 1)
    recs_b = make_audit(outs, "candidate", extra_tool_keys=0.1)
    folder = tmp_path / "audit_candidate"
    write_jsonl(folder / "audit-candidate-101.jsonl", recs_b[: len(recs_b) // 2])
    write_jsonl(folder / "audit-candidate-102.jsonl", recs_b[len(recs_b) // 2 :])
    aa = write_jsonl(tmp_path / "aa.jsonl", make_audit(outs, "baseline"))
    single = write_jsonl(tmp_path / "ab.jsonl", recs_b)
    split = compare_runs(a, b, a2, key="$.id", audits={"baseline": aa, "candidate": folder})
    whole = compare_runs(a, b, a2, key="$.id", audits={"baseline": aa, "candidate": single})
    assert split.counts.audit_records == whole.counts.audit_records
    assert [s.model_dump() for s in split.resources] == [s.model_dump() for s in whole.resources]
    assert split.verdict == "FAIL"


def test_a_call_named_by_its_key_hash_in_one_variant_counts_under_its_key(tmp_path: Path) -> None:
    """An action restored in flight from a savepoint may run before the task saw its key's next input: its audit
    names the key hash (Java hashCode, + 31 or + 62) in one variant and the key in another, as timing goes. The
    comparison counts it under the key in both; a hash that names no key of the audits stays as it is."""
    from airflow_flink_replay.core.audit import key_hashes

    a, a2, b = runs(tmp_path)
    outs = make_run(N, "baseline", 1)
    base, base_2, cand = (make_audit(outs, v) for v in ("baseline", "baseline_2", "candidate"))
    # the baseline's first call of 5 keys ran before their input: the hash, with each of the three offsets
    for key, offset in (("r-0", 0), ("r-1", 1), ("r-100", 0), ("r-5", 2), ("r-7", 2)):
        first = next(r for r in base if r["key"] == key)
        first["key"] = str(key_hashes(key)[offset])
    audits = {v: write_jsonl(tmp_path / f"{v}.audit.jsonl", recs)
              for v, recs in (("baseline", base), ("baseline_2", base_2), ("candidate", cand))}  # fmt: skip

    def chat(audits: dict[str, Path]) -> ResourceStat:
        return next(s for s in compare_runs(a, b, a2, key="$.id", audits=audits).resources
                    if s.resource_type == "chat_model")  # fmt: skip

    assert (chat(audits).new_keys, chat(audits).dropped_keys) == (0, 0)

    # a hash two keys may have (r-10 + 62 = r-20 + 31) names neither: it stays a key of its own, as does a
    # number that is no key's hash
    first = next(r for r in base if r["key"] == "r-10")
    first["key"] = str(key_hashes("r-10")[2])
    audits["baseline"] = write_jsonl(tmp_path / "baseline.audit.jsonl", base)
    cand.append({**cand[0], "key": "12345"})
    audits["candidate"] = write_jsonl(tmp_path / "candidate.audit.jsonl", cand)
    assert (chat(audits).new_keys, chat(audits).dropped_keys) == (2, 1)
