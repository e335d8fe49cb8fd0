"""What the meaning rule and the text judge found (``core/compare/meaning_findings.py``): the models
``summary.json`` carries per text field and change. They must read back what they wrote and refuse a kind or
status they do not know."""

from __future__ import annotations

from typing import get_args

import pytest
from pydantic import ValidationError

from airflow_flink_replay.core.compare.meaning_findings import MeaningExample, MeaningKind, MeaningStat
from airflow_flink_replay.core.compare.result import FAIL_CODES


def _stat(**changes: object) -> MeaningStat:
    values: dict[str, object] = {
        "field": "$.summary",
        "kind": "decision",
        "change": "substitute 'approved' -> 'declined'",
        "signature": "decision approv -> declin",
        "candidate_outputs": 12,
        "candidate_n": 400,
    }
    return MeaningStat(**{**values, **changes})


def test_the_kinds_are_the_rules_four_and_the_judges_own() -> None:
    assert get_args(MeaningKind) == ("negation", "decision", "number", "entity", "judge")
    assert {"TEXT_MEANING", "TEXT_JUDGE"} <= set(FAIL_CODES)


def test_a_stat_without_a_second_baseline_decides_nothing_until_told() -> None:
    stat = _stat()
    assert (stat.noise_outputs, stat.noise_n, stat.p_value, stat.alpha, stat.asked, stat.noise_asked) == (
        None,
        None,
        None,
        None,
        None,
        None,
    )
    assert (stat.status, stat.words, stat.noise_words, stat.examples, stat.noise_examples) == ("ok", {}, {}, [], [])


def test_a_stat_reads_back_what_it_wrote_keeping_the_order_of_the_words() -> None:
    stat = _stat(
        noise_outputs=1,
        noise_n=400,
        words={"declined": 9, "rejected": 3},
        noise_words={"denied": 1},
        p_value=0.002,
        alpha=0.0125,
        status="fail",
        examples=[
            MeaningExample(
                key="r-3", baseline="refund approved", other="refund declined", change="'approved' -> 'declined'"
            )
        ],
        noise_examples=[MeaningExample(key="r-9", index=2, baseline="approved", other="denied")],
    )
    again = MeaningStat.model_validate_json(stat.model_dump_json())
    assert again == stat and list(again.words) == ["declined", "rejected"]
    assert again.noise_examples[0].change == "" and again.noise_examples[0].index == 2


def test_the_judges_stat_counts_the_pairs_it_asked_about() -> None:
    stat = _stat(kind="judge", change="different meaning (judge)", signature="judge", asked=200, noise_asked=200)
    assert (stat.kind, stat.asked, stat.noise_asked) == ("judge", 200, 200)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"kind": "sentiment"}, "kind"),
        ({"status": "regression"}, "status"),
        ({"candidate_outputs": None}, "candidate_outputs"),
        ({"examples": [{"key": "r-1", "baseline": "a"}]}, "examples.0.other"),
    ],
)
def test_a_value_the_model_does_not_know_is_refused_naming_the_field(changes: dict, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        _stat(**changes)
    assert field in str(err.value)
