"""Settings of the content audits (``core/compare/content_rules.py``): paths in the comparison's canonical form,
a phone region that must be a two-letter ISO code, blank words dropped, unknown settings refused. What the
audits find with these settings: tests/unit/core/compare/test_content_audits.py."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from airflow_flink_replay.core.compare.config import CompareConfig, is_under
from airflow_flink_replay.core.compare.content_rules import SENSITIVE_KINDS, ContentAuditRule, ContentAudits


def _refused(model: type, **values: object) -> str:
    with pytest.raises(ValidationError) as err:
        model(**values)
    return str(err.value)


def test_the_defaults_run_every_audit_on_every_kind_of_sensitive_data() -> None:
    audits = ContentAudits()
    assert audits.enabled and audits.sensitive_data and audits.word_list and audits.language
    assert audits.truncated and audits.empty
    assert audits.sensitive_kinds == list(SENSITIVE_KINDS) == ["email", "phone", "iban", "card"]
    assert (audits.phone_region, audits.words, audits.ignore, audits.fields) == (None, [], [], [])
    assert audits.language_min_letters == 40
    audits.sensitive_kinds.append("email")
    assert ContentAudits().sensitive_kinds == ["email", "phone", "iban", "card"]  # a list of its own per model


def test_a_rule_path_is_canonical_and_covers_the_fields_below_it() -> None:
    rule = ContentAuditRule(path="$['messages'][*]['text']")
    assert rule.path == "$.messages[*].text"
    assert is_under(rule.regex, "$.messages[4].text") and not is_under(rule.regex, "$.messages[4].title")
    broad = ContentAuditRule(path="$.reply")
    assert is_under(broad.regex, "$.reply") and is_under(broad.regex, "$.reply.body")
    assert not is_under(broad.regex, "$.reply_to")


def test_a_rule_leaves_the_global_switches_alone_unless_it_sets_them() -> None:
    rule = ContentAuditRule(path="$.to", sensitive_data=True)
    assert rule.sensitive_data is True
    assert (rule.word_list, rule.language, rule.truncated, rule.empty, rule.words) == (None, None, None, None, [])


def test_a_path_that_is_not_a_jsonpath_is_refused_naming_the_setting() -> None:
    assert "audits field path 'reply' is not a JSONPath" in _refused(ContentAuditRule, path="reply")
    assert "audits ignore path '$[x]': cannot read" in _refused(ContentAudits, ignore=["$[x]"])


def test_ignored_paths_are_canonical_and_compiled_once() -> None:
    audits = ContentAudits(ignore=["$['signature']", "$.meta.*"])
    assert audits.ignore == ["$.signature", "$.meta.*"]
    patterns = audits.ignore_patterns
    assert patterns is audits.ignore_patterns
    assert [is_under(p, "$.meta.trace") for p in patterns] == [False, True]
    assert [is_under(p, "$.signature") for p in patterns] == [True, False]


@pytest.mark.parametrize(("given", "kept"), [("de", "DE"), ("US", "US"), ("gB", "GB"), (None, None)])
def test_the_phone_region_is_an_upper_case_iso_code(given: str | None, kept: str | None) -> None:
    assert ContentAudits(phone_region=given).phone_region == kept


@pytest.mark.parametrize("region", ["DEU", "D", "", "4 9", "+49", "Deutschland"])
def test_a_phone_region_that_is_not_two_letters_is_refused_with_an_example(region: str) -> None:
    message = _refused(ContentAudits, phone_region=region)
    assert f"phone_region {region!r}: give a two-letter ISO 3166 region such as 'DE' or 'US'" in message


def test_words_are_stripped_and_blank_ones_dropped() -> None:
    audits = ContentAudits(words=["  damn ", "", "   ", "Project Falcon"])
    assert audits.words == ["damn", "Project Falcon"]


@pytest.mark.parametrize(
    ("model", "values", "field"),
    [
        (ContentAudits, {"sensitive_kinds": ["ssn"]}, "sensitive_kinds"),
        (ContentAudits, {"language_min_letters": 0}, "language_min_letters"),
        (ContentAudits, {"sensitve_data": False}, "sensitve_data"),  # a typo is refused, not ignored
        (ContentAuditRule, {"path": "$.a", "emtpy": True}, "emtpy"),
        (ContentAuditRule, {"path": "$.a", "words": "refund"}, "words"),
    ],
)
def test_a_bad_setting_is_refused_naming_it(model: type, values: dict, field: str) -> None:
    assert field in _refused(model, **values)


def test_the_audits_are_read_from_a_comparison_config() -> None:
    config = CompareConfig.model_validate(
        {"audits": {"phone_region": "fr", "words": ["merde "], "fields": [{"path": "$['to']", "empty": False}]}}
    )
    assert config.audits.phone_region == "FR" and config.audits.words == ["merde"]
    assert config.audits.fields == [ContentAuditRule(path="$.to", empty=False)]
    with pytest.raises(ValidationError, match=r"audits\.fields\.0\.path"):
        CompareConfig.model_validate({"audits": {"fields": [{"path": "to"}]}})
