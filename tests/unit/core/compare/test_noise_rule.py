"""The noise rule's two margins, and side effects decided exactly like fields.

Each case is run twice: once with the difference in an output field (``$.label``) and once with the same
difference in a side effect (a second chat call for the same keys); the status and the verdict must be the
same. Rates are exact here: A' and B differ from A on fixed numbers of keys.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.compare import CompareConfig, compare_runs
from airflow_flink_replay.core.compare.synthetic import make_audit, make_run, write_jsonl

CHAT = "chat_model:llm.chat"


def outputs(n: int, changed: set[int]) -> list[dict[str, Any]]:
    return [{"id": f"r-{i}", "label": "other" if i in changed else "same", "tools": []} for i in range(n)]


def audit(n: int, doubled: set[int], variant: str) -> list[dict[str, Any]]:
    """One chat call per key; two for the keys in ``doubled`` (e.g. an extra round after a tool call)."""
    recs = make_audit(outputs(n, set()), variant)
    return [r for r in recs for _ in range(2 if int(r["key"].split("-")[1]) in doubled else 1)]


def compare_case(tmp_path: Path, n: int, x0: int, x1: int, where: str, **cfg: Any):
    """A' differs from A on ``x0`` keys, B on ``x1`` keys (different keys), in the field or the side effect."""
    rng = random.Random(n * 7 + x0 * 3 + x1)
    noise, cand = set(rng.sample(range(n), x0)), set(rng.sample(range(n), x1))
    field, side = where == "field", where == "side_effect"
    a = write_jsonl(tmp_path / "a.jsonl", outputs(n, set()))
    a2 = write_jsonl(tmp_path / "a2.jsonl", outputs(n, noise if field else set()))
    b = write_jsonl(tmp_path / "b.jsonl", outputs(n, cand if field else set()))
    audits = {
        "baseline": write_jsonl(tmp_path / "aa.jsonl", audit(n, set(), "baseline")),
        "baseline_2": write_jsonl(tmp_path / "aa2.jsonl", audit(n, noise if side else set(), "baseline_2")),
        "candidate": write_jsonl(tmp_path / "ab.jsonl", audit(n, cand if side else set(), "candidate")),
    }
    result = compare_runs(a, b, a2, key="$.id", audits=audits, config=CompareConfig(**cfg))
    label = next(f for f in result.fields if f.path == "$.label")
    chat = next(s for s in result.resources if s.signature == CHAT)
    if field:
        assert chat.status == "ok" and chat.candidate_rate == 0
        return result, label.status, label.noise_rate, label.candidate_rate, label.lower_bound
    assert label.status == "ok" and label.candidate_rate == 0
    return result, chat.status, chat.noise_rate, chat.candidate_rate, chat.lower_bound


WHERE = pytest.mark.parametrize("where", ["field", "side_effect"])


@WHERE
def test_beyond_the_absolute_margin_but_not_the_relative_one_is_no_regression(tmp_path: Path, where: str) -> None:
    # noise 40 %, candidate 48 %: +8 points > 2 (absolute) but < 25 % of 40 % = 10 points (relative)
    result, status, p0, p1, lower = compare_case(tmp_path, 2000, 800, 960, where)
    assert (p0, p1) == (0.4, 0.48)
    assert p1 - p0 > result.config.abs_threshold
    assert lower is not None and lower > 0  # significant: only the relative margin keeps it from failing
    assert status == "ok"
    assert result.verdict == "PASS", result.reasons


@WHERE
def test_beyond_the_relative_margin_but_not_the_absolute_one_is_no_regression(tmp_path: Path, where: str) -> None:
    # noise 2 %, candidate 3.5 %: +75 % of the noise (relative) but only +1.5 points (< 2, absolute)
    result, status, p0, p1, lower = compare_case(tmp_path, 2000, 40, 70, where)
    assert (p0, p1) == (0.02, 0.035)
    assert (p1 - p0) / p0 > result.config.rel_threshold
    assert lower is not None and lower > 0  # significant: only the absolute margin keeps it from failing
    assert status == "ok"
    assert result.verdict == "PASS", result.reasons


@WHERE
@pytest.mark.parametrize(("x0", "x1"), [(800, 1040), (40, 100)], ids=["past-relative", "past-absolute"])
def test_beyond_both_margins_is_a_regression(tmp_path: Path, where: str, x0: int, x1: int) -> None:
    """Controls for the two tests above: a little more and both margins are exceeded."""
    result, status, _, _, _ = compare_case(tmp_path, 2000, x0, x1, where)
    assert status == "regression"
    assert result.verdict == "FAIL"
    code = "FIELD_REGRESSION" if where == "field" else "SIDE_EFFECT_REGRESSION"
    assert [r.code for r in result.reasons if r.severity == "fail"] == [code]


@WHERE
def test_above_the_thresholds_but_not_significant_is_inconclusive(tmp_path: Path, where: str) -> None:
    # 2 of 25 keys (8 %) vs 0 %: both margins exceeded, but 25 keys cannot show it
    result, status, p0, p1, lower = compare_case(tmp_path, 25, 0, 2, where)
    assert (p0, p1) == (0.0, 0.08) and lower is not None and lower <= 0
    assert status == "not_significant"
    assert result.verdict == "INCONCLUSIVE"
    reason = next(r for r in result.reasons if r.code == "NOT_SIGNIFICANT")
    assert reason.severity == "inconclusive"
    assert reason.fields == (["$.label"] if where == "field" else [CHAT])
    assert "not significant" in reason.message and "replay more records" in reason.message
    if where == "side_effect":
        assert "chat_model llm (chat)" in reason.message


@WHERE
def test_noisier_than_the_limit_is_inconclusive(tmp_path: Path, where: str) -> None:
    # 60 % of keys differ between the baseline runs, and as many in the candidate
    result, status, p0, p1, _ = compare_case(tmp_path, 200, 120, 120, where)
    assert (p0, p1) == (0.6, 0.6)
    assert status == "too_noisy"
    assert result.verdict == "INCONCLUSIVE"
    reason = next(r for r in result.reasons if r.code == "NOISE_TOO_HIGH")
    assert reason.fields == (["$.label"] if where == "field" else [CHAT])
    # a higher limit makes the same comparison conclusive
    assert compare_case(tmp_path, 200, 120, 120, where, max_noise_rate=0.7)[0].verdict == "PASS"


def test_side_effect_noise_equal_in_baseline_2_and_candidate_passes(tmp_path: Path) -> None:
    """Tool calls and chat rounds vary from run to run; the candidate varies no more than the baseline."""
    n = 400
    outs = make_run(n, "baseline", 1)
    a, a2, b = (
        write_jsonl(tmp_path / f"{v}.jsonl", make_run(n, v, s))
        for v, s in (("baseline", 1), ("baseline_2", 2), ("candidate", 3))
    )

    def noisy(variant: str, seed: int) -> list[dict[str, Any]]:
        rng = random.Random(seed)
        twice = set(rng.sample(range(n), n // 5))  # a second chat round for 20 % of the keys
        notify = set(rng.sample(range(n), n // 10))  # the agent notifies support for some 10 % of the keys
        recs = []
        for r in make_audit(outs, variant):
            i = int(r["key"].split("-")[1])
            recs.extend([r] * (2 if i in twice else 1))
            if r["resource_type"] == "chat_model" and i in notify:
                recs.append(
                    {
                        **r,
                        "resource_type": "tool",
                        "resource_name": "lookup_account",
                        "method": "call",
                        "decision": "record",
                        "outcome": "recorded",
                    }
                )
        return recs

    audits = {
        "baseline": write_jsonl(tmp_path / "aa.jsonl", noisy("baseline", 11)),
        "baseline_2": write_jsonl(tmp_path / "aa2.jsonl", noisy("baseline_2", 12)),
        "candidate": write_jsonl(tmp_path / "ab.jsonl", noisy("candidate", 13)),
    }
    result = compare_runs(a, b, a2, key="$.id", audits=audits)
    assert result.verdict == "PASS", result.reasons
    by_sig = {s.signature: s for s in result.resources}
    for sig in (CHAT, "tool:lookup_account.call"):
        s = by_sig[sig]
        assert s.status == "ok", s
        assert s.noise_rate is not None and s.noise_rate > 0.1 and s.candidate_rate > 0.1  # the noise is real
    # the candidate's variation alone, without A' to calibrate it, fails by exact rules
    exact = compare_runs(a, b, a2, key="$.id", audits={k: v for k, v in audits.items() if k != "baseline_2"})
    assert exact.verdict == "FAIL"
    assert {r.fields[0] for r in exact.reasons if r.code == "SIDE_EFFECT_REGRESSION"} == set(by_sig)


def test_several_fields_beyond_the_thresholds_are_tested_together(tmp_path: Path) -> None:
    """Bonferroni: 20 vs 10 of 200 outputs is significant at 5 % for one field alone; when two fields (and
    the outputs-level rate) are each that far beyond the noise, each is tested at 5 %/3 and is not — with a
    noisy agent several fields drift by chance in every run, and the verdict must not FAIL more often for it."""
    rng = random.Random(5)
    noise, cand = set(rng.sample(range(200), 10)), set(rng.sample(range(200), 20))

    def run(path: str, changed: set[int], fields: tuple[str, ...]) -> Path:
        rows = [{"id": f"r-{i}", "label": "same", "mood": "calm"} for i in range(200)]
        for i in changed:
            rows[i].update({f: "other" for f in fields})
        return write_jsonl(tmp_path / path, rows)

    one = compare_runs(run("a.jsonl", set(), ()), run("b1.jsonl", cand, ("label",)),
                       run("a2_1.jsonl", noise, ("label",)), key="$.id")
    assert next(f for f in one.fields if f.path == "$.label").status == "regression" and one.verdict == "FAIL"
    two = compare_runs(run("a.jsonl", set(), ()), run("b2.jsonl", cand, ("label", "mood")),
                       run("a2_2.jsonl", noise, ("label", "mood")), key="$.id")
    assert {f.path: f.status for f in two.fields} == {"$.label": "not_significant", "$.mood": "not_significant",
                                                      "$.id": "ok"}
    assert two.verdict == "INCONCLUSIVE" and "Bonferroni" in two.method


def test_fields_the_baselines_never_disagreed_on_keep_alpha(tmp_path: Path) -> None:
    """One real change drives several fields of a deterministic agent at once (the label, the severity that
    follows it): with no noise to be fooled by, each is judged at alpha — 6 of 30 against 0 regresses."""
    changed = set(random.Random(2).sample(range(30), 6))

    def run(path: str, keys: set[int]) -> Path:
        return write_jsonl(tmp_path / path, [{"id": f"r-{i}", "label": "neg" if i in keys else "neutral",
                                              "severity": "high" if i in keys else "normal"} for i in range(30)])

    result = compare_runs(run("a.jsonl", set()), run("b.jsonl", changed), run("a2.jsonl", set()), key="$.id")
    assert {f.path: f.status for f in result.fields if f.path != "$.id"} == {"$.label": "regression",
                                                                             "$.severity": "regression"}
