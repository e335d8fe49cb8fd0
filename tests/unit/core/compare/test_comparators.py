"""Comparators: numeric relative tolerance, the text similarity threshold, and a comparator chosen per path
(a rule on a path overriding the by-type default), each directly and through the engine's verdict."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from airflow_flink_replay.core.compare import CompareConfig, FieldRule, compare_runs
from airflow_flink_replay.core.compare.comparators import ComparatorResolver
from airflow_flink_replay.core.compare.synthetic import make_run, write_jsonl

N = 200
SUMMARY = "Customer c-1 reports that the mobile app stopped working after the last update and asks for help."
SMALL_EDIT = SUMMARY.replace("asks for help", "asks for some help")  # rapidfuzz ratio 0.975
REWORDED = "After updating, c-1 says the mobile app no longer works and requests assistance from support."  # ~0.5


def differs(resolver: ComparatorResolver, path: str, a: object, b: object) -> bool:
    return resolver.compare(path, a, b)[0]


def amounts_run(path: Path, factor: float, n: int = 120) -> Path:
    """Outputs whose ``amount`` spans six orders of magnitude, multiplied by ``factor`` (a relative change)."""
    return write_jsonl(
        path, [{"id": f"o-{i}", "amount": round(10 ** (i % 7) * (1 + i / 100) * factor, 9)} for i in range(n)]
    )


def summaries_run(path: Path, edit: dict[int, str], n: int = N) -> Path:
    """Synthetic outputs whose summary is replaced for the keys in ``edit``."""
    recs = make_run(n, "candidate", 3)
    for i, text in edit.items():
        recs[i]["summary"] = text
    return write_jsonl(path, recs)


# --------------------------------------------------------------------------------------- numeric rel_tol


def test_numeric_rel_tol_scales_with_the_value() -> None:
    rule = CompareConfig(fields=[FieldRule(path="$.amount", comparator="numeric", rel_tol=0.01, abs_tol=0)])
    resolver = ComparatorResolver(rule)
    assert not differs(resolver, "$.amount", 1000.0, 1009.0)  # 0.9 % of the larger value
    assert differs(resolver, "$.amount", 1000.0, 1011.0)  # 1.1 %
    assert not differs(resolver, "$.amount", 0.001, 0.001009)  # the same 0.9 % on a tiny value
    assert differs(resolver, "$.amount", 0.001, 0.00102)  # 2 %: an absolute tolerance of 0 does not help
    assert resolver.compare("$.amount", 1000.0, 1011.0)[2] == "numeric(rel=0.01,abs=0)"
    # the config-wide default applies to numbers of any path without a rule
    by_type = ComparatorResolver(CompareConfig(rel_tol=0.01))
    assert not differs(by_type, "$.other", 500.0, 504.0)
    assert differs(by_type, "$.other", 500.0, 506.0)
    assert differs(ComparatorResolver(CompareConfig()), "$.other", 500.0, 504.0)  # default 1e-6


def test_numeric_rel_tol_decides_the_verdict(tmp_path: Path) -> None:
    """A 0.5 % drift on values from 1 to 10^6: no single absolute tolerance fits, a relative one does."""
    a = amounts_run(tmp_path / "a.jsonl", 1.0)
    drift = amounts_run(tmp_path / "b.jsonl", 1.005)
    jump = amounts_run(tmp_path / "c.jsonl", 1.02)
    rel = CompareConfig(fields=[FieldRule(path="$.amount", comparator="numeric", rel_tol=0.01)])
    ok = compare_runs(a, drift, a, key="$.id", config=rel)
    assert ok.verdict == "PASS", ok.reasons
    amount = next(f for f in ok.fields if f.path == "$.amount")
    assert amount.candidate_rate == 0 and amount.comparator == "numeric(rel=0.01,abs=1e-09)"
    assert compare_runs(a, drift, a, key="$.id").verdict == "FAIL"  # default tolerance: every value differs
    bad = compare_runs(a, jump, a, key="$.id", config=rel)
    assert bad.verdict == "FAIL" and bad.worst_field is not None and bad.worst_field.path == "$.amount"
    assert bad.worst_field.candidate_rate == 1.0
    # the same via the config-wide default instead of a rule
    assert compare_runs(a, drift, a, key="$.id", config=CompareConfig(rel_tol=0.01)).verdict == "PASS"


# --------------------------------------------------------------------------------------- text threshold


def test_text_threshold_small_edit_equal_big_edit_not() -> None:
    resolver = ComparatorResolver(CompareConfig())  # text_threshold 0.85
    d, score, name = resolver.compare("$.summary", SUMMARY, SMALL_EDIT)
    assert (d, name) == (False, "text") and 0.95 < score < 1
    d, score, name = resolver.compare("$.summary", SUMMARY, REWORDED)
    assert (d, name) == (True, "text") and score < 0.6
    strict = ComparatorResolver(CompareConfig(text_threshold=0.99))
    assert differs(strict, "$.summary", SUMMARY, SMALL_EDIT)
    lax = ComparatorResolver(CompareConfig(text_threshold=0.4))
    assert not differs(lax, "$.summary", SUMMARY, REWORDED)


def test_text_threshold_decides_the_verdict_under_exact_rules(tmp_path: Path) -> None:
    """Without baseline-2 every difference counts, so only the threshold separates an edit from a rewrite."""
    a = summaries_run(tmp_path / "a.jsonl", {})
    small = summaries_run(
        tmp_path / "small.jsonl",
        {i: make_run(N, "x")[i]["summary"].replace("asks for help", "asks for some help") for i in range(0, N, 3)},
    )
    big = summaries_run(tmp_path / "big.jsonl", {i: REWORDED for i in range(0, N, 3)})
    ok = compare_runs(a, small, key="$.id")
    assert ok.verdict == "PASS", ok.reasons
    assert next(f for f in ok.fields if f.path == "$.summary").candidate_rate == 0
    bad = compare_runs(a, big, key="$.id")
    assert bad.verdict == "FAIL" and bad.worst_field is not None and bad.worst_field.path == "$.summary"
    assert bad.worst_field.candidate_diffs == len(range(0, N, 3))
    # a threshold of 1 makes the small edit a difference too; a per-path threshold overrides the default
    assert compare_runs(a, small, key="$.id", config=CompareConfig(text_threshold=1.0)).verdict == "FAIL"
    per_path = CompareConfig(fields=[FieldRule(path="$.summary", comparator="text", text_threshold=0.3)])
    loose = compare_runs(a, big, key="$.id", config=per_path)
    assert loose.verdict == "PASS", loose.reasons
    assert next(f for f in loose.fields if f.path == "$.summary").comparator == "text(>=0.3)"


def test_a_zero_threshold_in_an_auto_rule_is_a_setting(tmp_path: Path) -> None:
    """``text_threshold=0`` (or a tolerance of 0) on an auto rule is applied, not mistaken for 'unset'."""
    a = summaries_run(tmp_path / "a.jsonl", {})
    big = summaries_run(tmp_path / "big.jsonl", {i: REWORDED for i in range(0, N, 3)})
    anything_goes = CompareConfig(fields=[FieldRule(path="$.summary", text_threshold=0.0)])
    result = compare_runs(a, big, key="$.id", config=anything_goes)
    assert result.verdict == "PASS", result.reasons
    exact_numbers = ComparatorResolver(CompareConfig(rel_tol=0.5, fields=[FieldRule(path="$.n", rel_tol=0.0)]))
    assert differs(exact_numbers, "$.n", 100.0, 101.0)  # the rule's 0 wins over the config's 0.5
    assert not differs(exact_numbers, "$.m", 100.0, 101.0)


# --------------------------------------------------------------------------------------- per-path comparator


@pytest.mark.parametrize(
    ("rule", "name"),
    [
        (FieldRule(path="$.label", comparator="text"), "text(>=0.85)"),
        (FieldRule(path="$.label", comparator="text", text_threshold=0.9), "text(>=0.9)"),
    ],
)
def test_text_rule_on_a_short_token_path_overrides_exact(tmp_path: Path, rule: FieldRule, name: str) -> None:
    """'negative' -> 'negatives' is a different label by type (short token: exact) but equal as text."""
    recs = make_run(N, "baseline", 1)
    a = write_jsonl(tmp_path / "a.jsonl", recs)
    b = write_jsonl(tmp_path / "b.jsonl", [{**r, "label": r["label"] + "s"} for r in recs])
    by_type = compare_runs(a, b, key="$.id")
    assert by_type.verdict == "FAIL" and by_type.worst_field is not None
    assert (by_type.worst_field.path, by_type.worst_field.comparator) == ("$.label", "exact")
    result = compare_runs(a, b, key="$.id", config=CompareConfig(fields=[rule]))
    assert result.verdict == "PASS", result.reasons
    assert next(f for f in result.fields if f.path == "$.label").comparator == name
    # the rule is for its path only: 'high' -> 'highs' on the priority still fails exactly
    c = write_jsonl(
        tmp_path / "c.jsonl", [{**r, "label": r["label"] + "s", "priority": r["priority"] + "s"} for r in recs]
    )
    other = compare_runs(a, c, key="$.id", config=CompareConfig(fields=[rule]))
    assert other.verdict == "FAIL" and other.worst_field is not None and other.worst_field.path == "$.priority"


def test_exact_rule_on_a_text_path_overrides_similarity(tmp_path: Path) -> None:
    a = summaries_run(tmp_path / "a.jsonl", {})
    small = summaries_run(
        tmp_path / "small.jsonl",
        {i: make_run(N, "x")[i]["summary"].replace("asks for help", "asks for some help") for i in range(0, N, 5)},
    )
    assert compare_runs(a, small, key="$.id").verdict == "PASS"  # by type: text, the edit is within 0.85
    exact = CompareConfig(fields=[FieldRule(path="$.summary", comparator="exact")])
    result = compare_runs(a, small, key="$.id", config=exact)
    assert result.verdict == "FAIL"
    worst = result.worst_field
    assert worst is not None and (worst.path, worst.comparator) == ("$.summary", "exact")
    assert worst.candidate_diffs == len(range(0, N, 5))


def test_exact_rule_on_a_list_path_makes_order_matter(tmp_path: Path) -> None:
    """Lists of scalars are sets by default; ``exact`` on that path compares them as ordered lists."""
    recs = [{"id": f"k-{i}", "tools": ["lookup", "notify", "refund"]} for i in range(40)]
    a = write_jsonl(tmp_path / "a.jsonl", recs)
    b = write_jsonl(tmp_path / "b.jsonl", [{**r, "tools": list(reversed(r["tools"]))} for r in recs])
    assert compare_runs(a, b, key="$.id").verdict == "PASS"
    result = compare_runs(
        a, b, key="$.id", config=CompareConfig(fields=[FieldRule(path="$.tools", comparator="exact")])
    )
    assert result.verdict == "FAIL"
    assert result.worst_field is not None and result.worst_field.path == "$.tools"
    assert result.worst_field.comparator == "exact" and result.worst_field.candidate_rate == 1.0


def test_first_matching_rule_wins() -> None:
    cfg = CompareConfig(
        fields=[
            FieldRule(path="$.meta.note", comparator="exact"),
            FieldRule(path="$.meta.*", comparator="text", text_threshold=0.5),
        ]
    )
    resolver = ComparatorResolver(cfg)
    assert resolver.compare("$.meta.note", SUMMARY, SMALL_EDIT)[:3:2] == (True, "exact")
    assert resolver.compare("$.meta.title", SUMMARY, SMALL_EDIT)[:3:2] == (False, "text(>=0.5)")


def test_long_texts_are_compared_in_linear_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above text_max_length the similarity is the overlap of word multisets: rapidfuzz's ratio (quadratic)
    is never called for them — asserted by behaviour, not by the clock (timings live in benchmarks/)."""
    from airflow_flink_replay.core.compare import comparators
    from airflow_flink_replay.core.compare.comparators import word_overlap

    rng = random.Random(1)
    words = [f"w{rng.randrange(5000)}" for _ in range(100_000)]  # ~600 KB
    a = " ".join(words)
    b = " ".join([*words[:-1], "changed"])
    other = " ".join(f"x{rng.randrange(5000)}" for _ in range(100_000))
    ratio_calls: list[int] = []
    real_ratio = comparators.fuzz.ratio

    def counting_ratio(x: str, y: str, **kwargs: object) -> float:
        ratio_calls.append(max(len(x), len(y)))
        return real_ratio(x, y, **kwargs)

    monkeypatch.setattr(comparators.fuzz, "ratio", counting_ratio)
    resolver = ComparatorResolver(CompareConfig())
    assert resolver.compare("$.summary", a, b)[0] is False  # one word of 100,000: equal as text
    differs, score, name = resolver.compare("$.summary", a, other)
    assert differs and score < 0.1 and name == "text"
    assert ratio_calls == []  # the quadratic measure never saw the long texts
    resolver.compare("$.summary", "short text here", "short text there")
    assert ratio_calls == [16]  # below the cap it does
    assert word_overlap("a b c", "c b a") == 1.0 and word_overlap("a a", "a") == 2 / 3


# ------------------------------------------------------------------------------ integers beyond floats
BIG = 10**400  # JSON allows it; a float cannot hold it


def test_integers_beyond_the_float_range_compare_exactly() -> None:
    """math.isclose(10**400, 1) raised OverflowError: the CLI died with a traceback (exit 1, read as FAIL)."""
    resolver = ComparatorResolver(CompareConfig(rel_tol=0.01))
    assert differs(resolver, "$.n", BIG, 1) and differs(resolver, "$.n", 1.5, BIG)
    assert differs(resolver, "$.n", BIG, -BIG)
    assert not differs(resolver, "$.n", BIG, BIG) and not differs(resolver, "$.n", BIG, BIG + 1)  # within 1 %
    assert differs(resolver, "$.n", BIG, BIG * 2) and differs(resolver, "$.n", float("inf"), BIG)
    assert 0.0 <= resolver.compare("$.n", BIG, BIG * 3)[1] <= 1.0


def test_a_run_with_integers_beyond_the_float_range_gets_a_verdict(tmp_path: Path) -> None:
    """Through the engine, baselines moving (the numeric noise band) and the candidate differing."""
    rows = [{"id": f"o-{i}", "n": i} for i in range(40)]
    a = write_jsonl(tmp_path / "a.jsonl", [{**r, "n": BIG if r["id"] == "o-1" else r["n"]} for r in rows])
    a2 = write_jsonl(tmp_path / "a2.jsonl", [{**r, "n": -BIG if r["id"] == "o-1" else r["n"]} for r in rows])
    b = write_jsonl(tmp_path / "b.jsonl", [{**r, "n": BIG * 7 if r["id"] in ("o-1", "o-2") else r["n"]} for r in rows])
    result = compare_runs(a, b, a2, key="$.id")
    assert result.verdict in ("PASS", "FAIL", "INCONCLUSIVE")
