"""What the content audits found (``core/compare/content_findings.py``): the models ``summary.json`` carries per
audit and field. They must read back what they wrote, refuse an audit or status they do not know (a
``summary.json`` from another version says so instead of showing a wrong table), and name every audit the
audits module runs, with its FAIL code."""

from __future__ import annotations

from typing import get_args

import pytest
from pydantic import ValidationError

from airflow_flink_replay.core.compare.content_audits import AUDITS, REASON_CODES
from airflow_flink_replay.core.compare.content_findings import AuditName, ContentAuditStat, ContentExample
from airflow_flink_replay.core.compare.result import FAIL_CODES


def _stat(**changes: object) -> ContentAuditStat:
    values: dict[str, object] = {
        "audit": "sensitive_data",
        "field": "$.reply",
        "candidate_findings": 3,
        "candidate_n": 1000,
    }
    return ContentAuditStat(**{**values, **changes})


def test_every_audit_the_audits_run_is_named_here_in_report_order_with_a_fail_code() -> None:
    assert get_args(AuditName) == AUDITS
    assert set(REASON_CODES) == set(AUDITS)
    assert all(REASON_CODES[a] in FAIL_CODES for a in AUDITS)


def test_a_stat_without_a_second_baseline_has_no_noise_and_is_ok() -> None:
    stat = _stat()
    assert (stat.noise_findings, stat.noise_n, stat.p_value, stat.alpha) == (None, None, None, None)
    assert (stat.kinds, stat.noise_kinds, stat.status, stat.examples) == ({}, {}, "ok", [])


def test_an_example_holds_only_what_it_is_given_masked_by_the_audit() -> None:
    example = ContentExample(key="r-1", field="$.reply", what="phone number +49 ** *** **67 not in the baseline's")
    assert (example.index, example.before, example.finding, example.after, example.baseline) == (0, "", "", "", "")


def test_a_stat_reads_back_what_it_wrote() -> None:
    stat = _stat(
        noise_findings=0,
        noise_n=1000,
        kinds={"phone": 2, "email": 1},
        noise_kinds={},
        p_value=0.125,
        alpha=0.01,
        status="within_noise",
        examples=[
            ContentExample(
                key="r-7",
                index=1,
                field="$.reply",
                what="e-mail j***@m***.com",
                before="write to ",
                finding="j***@m***.com",
                after=" now",
                baseline="write to us",
            )
        ],
    )
    again = ContentAuditStat.model_validate_json(stat.model_dump_json())
    assert again == stat and list(again.kinds) == ["phone", "email"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"audit": "profanity"}, "audit"),
        ({"status": "regression"}, "status"),
        ({"candidate_findings": "some"}, "candidate_findings"),
        ({"kinds": {"phone": "two"}}, "kinds.phone"),
    ],
)
def test_a_value_the_model_does_not_know_is_refused_naming_the_field(changes: dict, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        _stat(**changes)
    assert field in str(err.value)


def test_the_counts_are_required() -> None:
    with pytest.raises(ValidationError) as err:
        ContentAuditStat(audit="empty", field="$.reply")  # type: ignore[call-arg]
    assert {e["loc"][0] for e in err.value.errors()} == {"candidate_findings", "candidate_n"}
