"""Text that changes meaning (issue 41, item 4).

A flipped decision inside a sentence ("is approved" -> "is not approved", "approved" -> "rejected", "3 items" ->
"30 items", "Berlin" -> "Munich") is lexically closer to the original than the A/A's paraphrases are, so the
similarity rule counts it as noise. The meaning rule learns from the A/A which words change between paraphrases
and flags the candidate's negations, decision words, numbers and names that change more often than there.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from airflow_flink_replay.core.compare import CompareConfig, compare_runs
from airflow_flink_replay.core.compare.meaning import pair_changes
from airflow_flink_replay.core.compare.reports import render_html, render_junit
from airflow_flink_replay.core.compare.synthetic import write_jsonl
from airflow_flink_replay.exceptions import CompareInputError

N = 1000
NAMES = ("Anna Schmidt", "Ben Martin", "Clara Rossi", "David Novak", "Emma Berg", "Farid Keller")
CITIES = ("Berlin", "Hamburg", "Munich", "Cologne", "Leipzig")
#: The agent's usual wording (0) and two paraphrases with the same facts.
REPLY = (
    "Dear {name}, your refund of {amount} EUR for {items} items is {verdict}. The parcel goes back to our depot "
    "in {city}.",
    "Hello {name}: we have {verdict} the refund ({amount} EUR, {items} items). Please send the parcel to the "
    "{city} depot.",
    "{name}, the refund for your {items} items ({amount} EUR) has been {verdict}; our warehouse in {city} handles "
    "the return.",
)
Facts = dict[str, Any]
Change = Callable[[str, Facts], str]


def facts(seed: int) -> list[Facts]:
    """What the agent decides for each ticket (the same in every run)."""
    rng = random.Random(seed)
    return [
        {
            "id": f"t-{i:04d}",
            "decision": rng.choice(("approve", "reject")),
            "name": rng.choice(NAMES),
            "amount": f"{rng.uniform(5, 400):.2f}",
            "items": rng.randrange(1, 6),
            "city": rng.choice(CITIES),
        }
        for i in range(N)
    ]


def render(f: Facts, wording: int) -> str:
    verdict = "approved" if f["decision"] == "approve" else "rejected"
    return REPLY[wording].format(verdict=verdict, **{k: v for k, v in f.items() if k != "decision"})


def run(
    rows: list[Facts],
    rng: random.Random,
    paraphrase: float = 0.0,
    noise: Change | None = None,
    noise_frac: float = 0.0,
    change: Change | None = None,
    frac: float = 0.0,
) -> list[dict[str, Any]]:
    """One run: ``paraphrase`` of the replies reworded, ``noise`` applied to ``noise_frac`` of them and ``change``
    to exactly ``frac`` of them (each drawn independently)."""
    noisy = set(rng.sample(range(len(rows)), round(noise_frac * len(rows))))
    changed = set(rng.sample(range(len(rows)), round(frac * len(rows))))
    out = []
    for i, f in enumerate(rows):
        text = render(f, rng.choice((1, 2)) if rng.random() < paraphrase else 0)
        if noise is not None and i in noisy:
            text = noise(text, f)
        if change is not None and i in changed:
            text = change(text, f)
        out.append({"id": f["id"], "decision": f["decision"], "reply": text})
    return out


def negate(text: str, f: Facts) -> str:
    return re.sub(r"\b(approved|rejected)\b", r"not \1", text, count=1)


def flip_decision(text: str, f: Facts) -> str:
    return re.sub(r"\b(approved|rejected)\b", lambda m: "rejected" if m[1] == "approved" else "approved", text)


def tenfold_items(text: str, f: Facts) -> str:
    return text.replace(f"{f['items']} items", f"{f['items'] * 10} items")


def whole_euros(text: str, f: Facts) -> str:
    return text.replace(f"{f['amount']} EUR", f"{round(float(f['amount']))} EUR")


def other_city(text: str, f: Facts) -> str:
    return text.replace(f["city"], "Munich" if f["city"] != "Munich" else "Berlin")


def compare(
    tmp_path: Path, seed: int, *, candidate: dict[str, Any] | None = None, aa: dict[str, Any] | None = None, **cfg: Any
):
    """A, A' and B of the same facts; A' and B paraphrase 30% of the replies (plus ``aa`` in both), B also gets
    ``candidate``."""
    rows = facts(seed)
    rng = random.Random(seed * 7919)
    a = run(rows, rng)
    a2 = run(rows, rng, 0.3, **(aa or {}))
    b = run(rows, rng, 0.3, **(aa or {}), **(candidate or {}))
    pa, pa2, pb = (write_jsonl(tmp_path / f"{n}.jsonl", r) for n, r in (("a", a), ("a2", a2), ("b", b)))
    return compare_runs(pa, pb, pa2, key="$.id", config=CompareConfig(**cfg))


def reason(result: Any, code: str) -> Any:
    return next((r for r in result.reasons if r.code == code), None)


def failed(result: Any) -> list[Any]:
    return [m for m in result.meaning if m.status == "fail"]


# ------------------------------------------------------------------------------------------- the rule
def test_negation_inserted_in_4_percent_fails(tmp_path: Path) -> None:
    result = compare(tmp_path, 1, candidate={"change": negate, "frac": 0.04})
    assert result.verdict == "FAIL", result.reasons
    found = reason(result, "TEXT_MEANING")
    assert found is not None and found.severity == "fail" and found.fields == ["$.reply"]
    assert "$.reply: 40 of 1000 outputs (4.0%) insert a negation ('not'), which the A/A never does (0 of 1000)" in (
        found.message
    )
    assert "-> “" in found.message and ("not approved" in found.message or "not rejected" in found.message)
    [stat] = failed(result)
    assert (stat.kind, stat.signature, stat.candidate_outputs, stat.noise_outputs) == ("negation", "negation+", 40, 0)
    assert stat.words == {"'not'": 40} and stat.examples and stat.p_value is not None and stat.p_value < 1e-9
    # the similarity rule alone sees nothing: the paraphrases are farther from A than the negation is
    assert all(f.status == "ok" for f in result.fields)


def test_decision_word_flip_fails(tmp_path: Path) -> None:
    result = compare(tmp_path, 2, candidate={"change": flip_decision, "frac": 0.04})
    assert result.verdict == "FAIL", result.reasons
    found = reason(result, "TEXT_MEANING")
    assert found is not None and "substitute" in found.message
    kinds = {(s.kind, s.signature) for s in failed(result)}
    assert kinds <= {("decision", "decision approv -> reject"), ("decision", "decision reject -> approv")}
    assert sum(s.candidate_outputs for s in failed(result)) == 40
    assert any("'approved' -> 'rejected'" in s.words for s in failed(result))


def test_number_changed_fails(tmp_path: Path) -> None:
    result = compare(tmp_path, 3, candidate={"change": tenfold_items, "frac": 0.04})
    assert result.verdict == "FAIL", result.reasons
    [stat] = failed(result)
    assert (stat.kind, stat.candidate_outputs, stat.noise_outputs) == ("number", 40, 0)
    assert "change a number" in reason(result, "TEXT_MEANING").message
    assert any(re.fullmatch(r"'\d' -> '\d0'", w) for w in stat.words)


def test_name_changed_fails(tmp_path: Path) -> None:
    result = compare(tmp_path, 4, candidate={"change": other_city, "frac": 0.04})
    assert result.verdict == "FAIL", result.reasons
    [stat] = failed(result)
    assert (stat.kind, stat.candidate_outputs, stat.noise_outputs) == ("entity", 40, 0)
    assert "change a name" in reason(result, "TEXT_MEANING").message


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_pure_paraphrase_passes(tmp_path: Path, seed: int) -> None:
    result = compare(tmp_path, seed)
    assert result.verdict == "PASS", result.reasons
    assert not failed(result)


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_paraphrases_that_vary_numbers_in_the_aa_as_often_pass(tmp_path: Path, seed: int) -> None:
    """A' and B both round the amount to whole euros in 10% of the replies: the A/A changes numbers as often as
    the candidate does, so those changes are the agent's noise."""
    result = compare(tmp_path, seed, aa={"noise": whole_euros, "noise_frac": 0.10})
    assert result.verdict == "PASS", result.reasons
    [stat] = [s for s in result.meaning if s.kind == "number"]
    assert stat.noise_outputs and stat.candidate_outputs and stat.status == "within_noise"
    assert reason(result, "TEXT_MEANING_WITHIN_NOISE") is not None


def test_a_real_change_on_top_of_the_same_noise_still_fails(tmp_path: Path) -> None:
    result = compare(
        tmp_path,
        24,
        aa={"noise": whole_euros, "noise_frac": 0.10},
        candidate={"change": negate, "frac": 0.04},
    )
    assert result.verdict == "FAIL" and [s.kind for s in failed(result)] == ["negation"]


def test_turned_off_it_passes_as_before(tmp_path: Path) -> None:
    result = compare(tmp_path, 1, candidate={"change": negate, "frac": 0.04}, text_meaning=False)
    assert result.verdict == "PASS", result.reasons
    assert result.meaning == []


def test_without_baseline_2_it_lists_the_changes_and_decides_nothing(tmp_path: Path) -> None:
    """No A/A: nothing tells a paraphrase's "no longer" from a negation; listed, not judged."""
    rows = facts(8)
    rng = random.Random(8)
    pa, pb = (
        write_jsonl(tmp_path / "a.jsonl", run(rows, rng)),
        write_jsonl(tmp_path / "b.jsonl", run(rows, rng, change=negate, frac=0.04)),
    )
    result = compare_runs(pa, pb, key="$.id")
    assert result.verdict == "PASS", result.reasons
    [stat] = result.meaning
    assert (stat.status, stat.candidate_outputs, stat.noise_outputs) == ("uncalibrated", 40, None)
    assert "run the baseline twice" in reason(result, "TEXT_MEANING_UNCALIBRATED").message


def test_spilled_comparison_counts_the_same(tmp_path: Path) -> None:
    """Partitioned on disk and aligned by two processes: the same counts, words, examples and judge's sample."""
    cfg: dict[str, Any] = {"text_judge": f"{__name__}:NegationSetStandInJudge", "text_judge_sample": 50}
    memory = compare(tmp_path, 5, candidate={"change": negate, "frac": 0.04}, **cfg)
    spilled = compare(tmp_path, 5, candidate={"change": negate, "frac": 0.04}, spill_above_mb=0, spill_workers=2, **cfg)
    assert spilled.verdict == memory.verdict == "FAIL"
    assert [s.model_dump() for s in spilled.meaning] == [s.model_dump() for s in memory.meaning]
    assert {s.kind for s in memory.meaning} == {"negation", "judge"}


def test_report_highlights_the_changed_words(tmp_path: Path) -> None:
    result = compare(tmp_path, 1, candidate={"change": negate, "frac": 0.04})
    html = render_html(result)
    assert "Meaning of free text" in html and "<ins>not" in html
    junit = render_junit(result)
    assert 'classname="compare.meaning" name="$.reply negation+"' in junit and "insert a negation" in junit


def test_pair_changes_see_through_paraphrase() -> None:
    """Moved words, a name moved to the start of a sentence, a number written another way: no change."""
    a = "Dear Anna Schmidt, your refund of 40.00 EUR is approved. It isn't late."
    assert pair_changes(a, "Anna Schmidt, we have approved your refund (40 EUR). It is not late.", frozenset()) == {}
    assert pair_changes(a, a.replace("approved", "not approved"), frozenset()) == {"negation+": "'not'"}
    assert pair_changes("refund of 3 items", "refund of 30 items", frozenset()) == {"number": "'3' -> '30'"}
    assert pair_changes("we ship from Berlin today", "we ship from Munich today", frozenset()) == {
        "entity": "'Berlin' -> 'Munich'"
    }
    vocab = frozenset({"gold", "silver"})
    assert pair_changes("your tier is gold now", "your tier is silver now", vocab) == {
        "decision gold -> silver": "'gold' -> 'silver'"
    }


# ------------------------------------------------------------------------------------------- the judge
class NegationSetStandInJudge:
    """A deterministic stand-in for a chat or embedding model: "different meaning" when the two texts' sets of
    negations differ. Remembers what it was asked."""

    asked: ClassVar[list[tuple[str, str]]] = []

    def __init__(self, connection: str | None = None) -> None:
        self.connection = connection

    def same_meaning(self, a: str, b: str) -> bool:
        type(self).asked.append((a, b))
        return _negations(a) == _negations(b)


class EveryChangeStandInJudge:
    """A stand-in judge that calls every reworded text a different meaning (a badly calibrated model): its
    "different" rate on the A/A is the noise, so paraphrases alone still pass."""

    def same_meaning(self, a: str, b: str) -> float:
        return 1.0 if a == b else 0.2


def _negations(text: str) -> set[str]:
    return set(re.findall(r"\b(?:not|no|never)\b", text))


JUDGE = f"{__name__}:NegationSetStandInJudge"


def test_judge_sees_a_negation_and_is_calibrated_on_the_aa(tmp_path: Path) -> None:
    NegationSetStandInJudge.asked.clear()
    result = compare(
        tmp_path,
        6,
        candidate={"change": negate, "frac": 0.04},
        text_meaning=False,
        text_judge=JUDGE,
        text_judge_connection="judge_default",
        text_judge_sample=1000,
    )
    assert result.verdict == "FAIL", result.reasons
    found = reason(result, "TEXT_JUDGE")
    assert (
        found is not None
        and found.fields == ["$.reply"]
        and "differ in meaning by the judge tests.unit" in found.message
    )
    [stat] = [s for s in result.meaning if s.kind == "judge"]
    assert stat.status == "fail" and stat.candidate_outputs == 40 and stat.noise_outputs == 0
    assert stat.noise_asked and stat.asked  # asked about A/A pairs too
    baseline_2_pairs = {b for _, b in NegationSetStandInJudge.asked}
    assert len(NegationSetStandInJudge.asked) == stat.asked + stat.noise_asked and baseline_2_pairs


@pytest.mark.parametrize("seed", [31, 32, 33])
def test_judge_that_flags_every_paraphrase_passes_paraphrase(tmp_path: Path, seed: int) -> None:
    result = compare(
        tmp_path, seed, text_meaning=False, text_judge=f"{__name__}.EveryChangeStandInJudge", text_judge_sample=300
    )
    assert result.verdict == "PASS", result.reasons
    [stat] = [s for s in result.meaning if s.kind == "judge"]
    assert stat.noise_outputs and stat.candidate_outputs and stat.status == "within_noise"


def test_judge_that_cannot_be_loaded_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CompareInputError, match=r"text_judge.*no_such_module.*Fix"):
        compare(tmp_path, 7, text_judge="no_such_module:Judge")
