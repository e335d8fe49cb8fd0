"""Content audits of text fields (issue 49): findings a reviewer flags even when they are rare.

Each audit is tried on 1,000 generated outputs whose A' and B paraphrase 20 % of the replies (the A/A noise):
a finding in 0.5 % of B's outputs that the A/A never shows FAILs; the same finding as often in A' PASSes; the
baseline's own values repeated by the candidate are no finding. Everything goes through ``compare_runs``.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.compare import CompareConfig, compare_runs, render_html, render_junit
from airflow_flink_replay.core.compare.content_audits import Hit, ends_properly, language_of, mask
from airflow_flink_replay.core.compare.synthetic import write_jsonl

Row = dict[str, Any]
Finding = Callable[[Row, random.Random], None]

FIRST = ("Anna", "Ben", "Clara", "David", "Emma", "Farid", "Greta", "Hugo")
LAST = ("Schmidt", "Martin", "Rossi", "Novak", "Berg", "Keller", "Dubois", "Weber")
REPLIES = (
    "{name} reported that order {order} arrived damaged; the refund of {amount} EUR is approved.",
    "Order {order} reached {name} broken, so we approved a refund of {amount} EUR for the customer.",
    "After checking the policy we approved the {amount} EUR refund for {name}, whose order {order} broke.",
)
SPANISH = "{name} indica que el pedido {order} llegó dañado; el reembolso de {amount} EUR ha sido aprobado."


def phone(rng: random.Random) -> str:
    return f"+49 30 {rng.randrange(100, 1000)} {rng.randrange(1000, 10000)}"


def email(rng: random.Random) -> str:
    return f"{rng.choice(FIRST).lower()}.{rng.choice(LAST).lower()}{rng.randrange(10, 100)}@mail.example.com"


def iban(rng: random.Random) -> str:
    bban = f"{rng.randrange(10**7, 10**8)}{rng.randrange(10**9, 10**10)}"
    check = 98 - int(bban + "131400") % 97
    text = f"DE{check:02d}{bban}"
    return " ".join(text[i : i + 4] for i in range(0, len(text), 4))


def card(rng: random.Random) -> str:
    digits = [4] + [rng.randrange(10) for _ in range(14)]
    total = sum((d * 2 - 9 if d * 2 > 9 else d * 2) if i % 2 == 0 else d for i, d in enumerate(reversed(digits)))
    text = "".join(map(str, [*digits, (10 - total % 10) % 10]))
    return " ".join(text[i : i + 4] for i in range(0, 16, 4))


def reply(row: Row, template: int = 0) -> str:
    c = row["customer"]
    return REPLIES[template].format(name=c["name"], order=row["order"], amount=f"{row['amount']:.2f}")


def output(i: int) -> Row:
    rng = random.Random(i)
    row: Row = {
        "id": f"t-{i:04d}",
        "label": rng.choice(("positive", "neutral", "negative")),
        "order": f"A-{rng.randrange(10**6):06d}",
        "amount": round(rng.uniform(5, 400), 2),
        "customer": {"name": f"{rng.choice(FIRST)} {rng.choice(LAST)}", "phone": phone(rng), "email": email(rng)},
    }
    row["reply"] = reply(row)
    return row


def paraphrase(row: Row, rng: random.Random) -> None:
    row["reply"] = reply(row, rng.choice((1, 2)))


def append(sentence: Callable[[Row, random.Random], str]) -> Finding:
    def fn(row: Row, rng: random.Random) -> None:
        row["reply"] += " " + sentence(row, rng)

    return fn


def in_spanish(row: Row, rng: random.Random) -> None:
    c = row["customer"]
    row["reply"] = SPANISH.format(name=c["name"], order=row["order"], amount=f"{row['amount']:.2f}")


def truncate(row: Row, rng: random.Random) -> None:
    words = row["reply"].split()
    row["reply"] = " ".join(words[: len(words) // 2]).rstrip(".,;")


def empty(row: Row, rng: random.Random) -> None:
    row["reply"] = rng.choice(("", " ", "\n"))


def compare(
    tmp_path: Path,
    finding: Finding,
    candidate: int = 5,
    aa: int = 0,
    n: int = 1000,
    with_aa: bool = True,
    seed: int = 7,
    **config: Any,
) -> Any:
    """A, A' and B of ``n`` outputs; A' and B paraphrase 20 % of the replies; B has ``finding`` in ``candidate``
    outputs, A' in ``aa`` (other outputs, drawn at random)."""
    rng = random.Random(seed)
    runs = [[output(i) for i in range(n)] for _ in range(3)]
    a, a2, b = runs
    for run in (a2, b):
        for i in rng.sample(range(n), n // 5):
            paraphrase(run[i], rng)
    for i in rng.sample(range(n), candidate):
        finding(b[i], rng)
    for i in rng.sample(range(n), aa):
        finding(a2[i], rng)
    fa = write_jsonl(tmp_path / "a.jsonl", a)
    fa2 = write_jsonl(tmp_path / "a2.jsonl", a2)
    fb = write_jsonl(tmp_path / "b.jsonl", b)
    return compare_runs(fa, fb, fa2 if with_aa else None, key="$.id", config=CompareConfig(**config))


def reason(result: Any, code: str) -> Any:
    return next((r for r in result.reasons if r.code == code), None)


def stat(result: Any, audit: str, field: str = "$.reply") -> Any:
    return next((s for s in result.content_audits if s.audit == audit and s.field == field), None)


LEAKS: dict[str, Finding] = {
    "email": append(lambda row, rng: f"We have also copied {email(rng)} on this reply."),
    "phone": append(lambda row, rng: f"For details, call our client {rng.choice(FIRST)} at {phone(rng)}."),
    "iban": append(lambda row, rng: f"The refund goes to IBAN {iban(rng)}."),
    "card": append(lambda row, rng: f"The replacement was charged to card {card(rng)}."),
}
AUDITED: dict[str, tuple[Finding, str, dict[str, Any]]] = {
    **{f"sensitive_{kind}": (leak, "sensitive_data", {}) for kind, leak in LEAKS.items()},
    "word_list": (
        append(lambda row, rng: "Honestly, only an Idiot would lose the receipt."),
        "word_list",
        {"audits": {"words": ["idiot", "competitor corp"]}},
    ),
    "language": (in_spanish, "language", {}),
    "truncated": (truncate, "truncated", {}),
    "empty": (empty, "empty", {}),
}
CODES = {
    "sensitive_data": "CONTENT_SENSITIVE_DATA",
    "word_list": "CONTENT_WORD_LIST",
    "language": "CONTENT_LANGUAGE",
    "truncated": "CONTENT_TRUNCATED",
    "empty": "CONTENT_EMPTY",
}


@pytest.mark.parametrize("name", sorted(AUDITED))
def test_rare_finding_the_aa_never_has_fails(tmp_path: Path, name: str) -> None:
    """0.5 % of 1,000 candidate outputs with a finding, none between the baselines: FAIL with the audit's code."""
    finding, audit, config = AUDITED[name]
    result = compare(tmp_path, finding, candidate=5, **config)
    st = stat(result, audit)
    assert result.verdict == "FAIL", result.reasons
    assert (st.candidate_findings, st.noise_findings, st.status) == (5, 0, "fail")
    assert st.p_value == pytest.approx(0.031, abs=0.001)
    why = reason(result, CODES[audit])
    assert why is not None and why.severity == "fail" and why.fields == ["$.reply"]
    assert "5 of 1000 candidate outputs" in why.message and "0 of 1000 between the baselines" in why.message
    assert st.examples and st.examples[0].field == "$.reply" and st.examples[0].finding


@pytest.mark.parametrize("name", sorted(AUDITED))
def test_finding_as_often_in_the_aa_passes(tmp_path: Path, name: str) -> None:
    """The same finding in 0.5 % of A' and of B: the baseline does it as often; PASS, counted as within noise."""
    finding, audit, config = AUDITED[name]
    result = compare(tmp_path, finding, candidate=5, aa=5, **config)
    st = stat(result, audit)
    assert result.verdict == "PASS", result.reasons
    assert (st.candidate_findings, st.noise_findings, st.status) == (5, 5, "within_noise")
    assert reason(result, "CONTENT_WITHIN_NOISE") is not None


def test_two_findings_are_not_significant(tmp_path: Path) -> None:
    """Two leaks in 1,000 against none: p = 0.25, not enough to fail on (reported as info)."""
    result = compare(tmp_path, LEAKS["email"], candidate=2)
    assert result.verdict == "PASS"
    assert stat(result, "sensitive_data").candidate_findings == 2


@pytest.mark.parametrize(
    "sentence",
    [
        lambda row, rng: f"We will call you back at {row['customer']['phone']}.",
        lambda row, rng: f"We will call you back at {row['customer']['phone'].replace(' ', '')}.",  # other format
        lambda row, rng: f"A copy went to {row['customer']['email'].upper()}.",
    ],
    ids=["own-phone", "own-phone-other-format", "own-email"],
)
def test_baselines_own_values_repeated_are_no_finding(
    tmp_path: Path, sentence: Callable[[Row, random.Random], str]
) -> None:
    """The customer's own phone number or e-mail address (in the baseline's output for that input) is no leak
    (the added sentence may still count as a change of the text: only the audits are asserted)."""
    result = compare(tmp_path, append(sentence), candidate=20)
    assert stat(result, "sensitive_data") is None
    assert not [r for r in result.reasons if r.code.startswith("CONTENT_")]


def test_word_list_is_empty_by_default(tmp_path: Path) -> None:
    finding, _, _ = AUDITED["word_list"]
    result = compare(tmp_path, finding, candidate=5)
    assert result.verdict == "PASS" and stat(result, "word_list") is None


def test_word_in_the_baselines_text_too_is_no_finding(tmp_path: Path) -> None:
    """A listed word that the baseline's text for the same input has too is not new."""
    result = compare(tmp_path, append(lambda row, rng: "Thanks."), candidate=5, audits={"words": ["refund"]})
    assert result.verdict == "PASS" and stat(result, "word_list") is None


def test_without_baseline_2_a_new_finding_fails_by_the_exact_rule(tmp_path: Path) -> None:
    """No A/A to measure: a finding new against the baseline's output for the same input counts (exact_max_rate)."""
    result = compare(tmp_path, LEAKS["phone"], candidate=1, with_aa=False)
    assert result.verdict == "FAIL"
    st = stat(result, "sensitive_data")
    assert (st.candidate_findings, st.noise_findings, st.status) == (1, None, "fail")
    assert "no baseline-2" in reason(result, "CONTENT_SENSITIVE_DATA").message
    own = compare(tmp_path, append(lambda row, rng: f"Call {row['customer']['phone']}."), candidate=5, with_aa=False)
    assert stat(own, "sensitive_data") is None


@pytest.mark.parametrize(
    "audits",
    [
        {"enabled": False},
        {"sensitive_data": False},
        {"ignore": ["$.reply"]},
        {"fields": [{"path": "$.reply", "sensitive_data": False}]},
    ],
    ids=["off", "audit-off", "field-ignored", "field-override"],
)
def test_audits_can_be_turned_off(tmp_path: Path, audits: dict[str, Any]) -> None:
    result = compare(tmp_path, LEAKS["email"], candidate=10, audits=audits)
    assert result.verdict == "PASS" and stat(result, "sensitive_data") is None


def test_a_field_rule_audits_a_short_string(tmp_path: Path) -> None:
    """A short single-token field is no text (not audited) unless an audit rule names it."""

    def cc(row: Row, rng: random.Random) -> None:
        row["cc"] = email(rng)

    assert stat(compare(tmp_path, cc, candidate=5), "sensitive_data", "$.cc") is None
    result = compare(tmp_path, cc, candidate=5, audits={"fields": [{"path": "$.cc"}]})
    assert stat(result, "sensitive_data", "$.cc").candidate_findings == 5


def test_spilled_comparison_counts_as_in_memory(tmp_path: Path) -> None:
    """Partitioned on disk (and merged from two processes), the audits count and show what one walk would."""
    memory = compare(tmp_path, LEAKS["card"], candidate=7, aa=1)
    spilled = compare(tmp_path, LEAKS["card"], candidate=7, aa=1, spill_above_mb=0, spill_workers=2)
    assert spilled.content_audits == memory.content_audits
    assert stat(spilled, "sensitive_data").candidate_findings == 7


def test_sensitive_values_are_masked_in_every_report(tmp_path: Path) -> None:
    """The leaked value is highlighted, masked, in the reason, summary.json's audits, the HTML section and JUnit."""
    rng = random.Random(1)
    leaked = [email(rng) for _ in range(5)]
    values = iter(leaked)
    result = compare(tmp_path, append(lambda row, r: f"We have also copied {next(values)} on this reply."), candidate=5)
    st = stat(result, "sensitive_data")
    ex = st.examples[0]
    assert re.fullmatch(r"[a-z]\*\*\*@m\*\*\*\.com", ex.finding), ex.finding
    assert "We have also copied " in ex.before and ex.after.startswith(" on this reply")
    audits_json = json.dumps([s.model_dump() for s in result.content_audits])
    junit = render_junit(result)
    html = render_html(result)
    section = html[html.index('id="content-audits"') :]
    reasons = " ".join(r.message for r in result.reasons)
    for text in (audits_json, junit, section, reasons):
        assert not any(value in text for value in leaked)
    assert f"<mark>{ex.finding}</mark>" in section

    assert "CONTENT_SENSITIVE_DATA" in junit and ex.finding in junit


def test_masks() -> None:
    assert mask(Hit("email", 0, 0, ""), "lena.novak42@mail.example.com") == "l***@m***.com"
    assert mask(Hit("phone", 0, 0, "", keep_head=2), "+49 30 123 4567") == "+49 ** *** **67"
    assert mask(Hit("iban", 0, 0, "", keep_head=2), "DE89 3704 0044 0532 0130 00") == "DE** **** **** **** **30 00"
    assert mask(Hit("card", 0, 0, ""), "4111 1111 1111 1234") == "**** **** **** 1234"


def test_language_and_endings() -> None:
    assert language_of("Order A-1 reached Anna broken, so we approved a refund for the customer.", 40) == "en"
    assert language_of("Anna indica que el pedido llegó dañado; el reembolso ha sido aprobado.", 40) == "es"
    assert language_of("Refund approved.", 40) is None  # too short to tell
    assert all(ends_properly(t) for t in ("Done.", "Really?", "(see above)", "Merci « oui »", "Thanks ✅", "ok 👍🏽"))
    assert not any(ends_properly(t) for t in ("the refund of", "as follows:", "", "   "))


def test_a_flagged_value_is_masked_in_the_field_examples_too(tmp_path: Path) -> None:
    """The field examples show the differing outputs whole, side by side, and the text-meaning rule quotes the
    words that changed: a value the audits flagged is masked there as well, in summary.json, HTML and JUnit."""
    rng = random.Random(3)
    leaked = [card(rng) for _ in range(5)]
    a = [output(i) for i in range(1000)]
    b = [output(i) for i in range(1000)]
    for i, value in zip(range(0, 500, 100), leaked, strict=True):
        b[i]["reply"] += f" The replacement was charged to card {value}."
    fa, fb = write_jsonl(tmp_path / "a.jsonl", a), write_jsonl(tmp_path / "b.jsonl", b)
    result = compare_runs(fa, fb, write_jsonl(tmp_path / "a2.jsonl", a), key="$.id")
    shown_paths = {v.path for e in result.examples for v in e.values}
    assert result.verdict == "FAIL" and "$.reply" in shown_paths, result.examples
    shown = (result.model_dump_json(), render_html(result), render_junit(result))
    assert not [value for value in leaked if any(value in text for text in shown)]
    assert "**** **** **** " + leaked[0][-4:] in shown[0]  # masked, its last four digits kept


def test_the_groups_of_a_flagged_number_that_a_rule_quotes_are_masked(tmp_path: Path) -> None:
    """The text-meaning rule quotes the numbers that changed, one group of an IBAN at a time ('2193', '1289'):
    the groups the masked IBAN hides are masked wherever they are quoted."""
    rng = random.Random(3)
    leaked = [iban(rng) for _ in range(5)]
    a = [output(i) for i in range(1000)]
    b = [output(i) for i in range(1000)]
    for i, value in zip(range(0, 500, 100), leaked, strict=True):
        b[i]["reply"] += f" The refund goes to IBAN {value}."
    fa, fb = write_jsonl(tmp_path / "a.jsonl", a), write_jsonl(tmp_path / "b.jsonl", b)
    result = compare_runs(fa, fb, write_jsonl(tmp_path / "a2.jsonl", a), key="$.id")
    assert reason(result, "CONTENT_SENSITIVE_DATA") is not None and result.meaning, result.reasons
    shown = result.model_dump_json() + render_html(result) + render_junit(result)
    hidden = {group for value in leaked for group in value.split()[1:-1]}  # all but the country+check and the tail
    assert not [group for group in hidden if group in shown]
