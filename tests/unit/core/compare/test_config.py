"""Comparison settings (``core/compare/config.py``): paths and rules read in any quoting and kept in one canonical
form, rule patterns matched against flattened paths (and everything below them), the first matching rule, and
settings refused with the field named."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from airflow_flink_replay.core.compare.config import (
    AuditRule,
    CompareConfig,
    FieldRule,
    canonical_path,
    is_under,
    parse_path,
    path_pattern,
    segment,
    split_stage,
    stage_root,
)
from airflow_flink_replay.exceptions import PathError


# ---------------------------------------------------------------------------------------- one path form
@pytest.mark.parametrize(
    ("name", "written"),
    [
        ("label", ".label"),
        ("_id2", "._id2"),
        ("priorité", ".priorité"),  # an identifier in any script
        ("a b", "['a b']"),
        ("a-b", "['a-b']"),
        ("1st", "['1st']"),
        ("", "['']"),
        ("it's", "['it\\'s']"),
        ("back\\slash", "['back\\\\slash']"),
    ],
)
def test_segment_writes_identifiers_with_a_dot_and_quotes_the_rest(name: str, written: str) -> None:
    assert segment(name) == written


@pytest.mark.parametrize(
    ("path", "canonical"),
    [
        ("$.label", "$.label"),
        ("$['label']", "$.label"),
        ('$["label"]', "$.label"),
        ("$['priorité']", "$.priorité"),
        ('$["caf\\u00e9"]', "$.café"),  # a JSON escape in double quotes
        ('$["a\'b"]', "$['a\\'b']"),
        ("$['it\\'s']", "$['it\\'s']"),
        ("$.a-b", "$['a-b']"),
        ("$.items[*].sku", "$.items[*].sku"),
        ("$.items[2]['unit price']", "$.items[2]['unit price']"),
        ("$.meta.*", "$.meta.*"),
        ("$.*x", "$['*x']"),  # '*' followed by more is a name, not a wildcard
        ("$..['sku']", "$..sku"),
        ("$..['a b']", "$..['a b']"),
        ("$", "$"),
    ],
)
def test_any_quoting_reads_as_the_same_canonical_path(path: str, canonical: str) -> None:
    assert canonical_path(path) == canonical
    assert canonical_path(canonical) == canonical


def test_parse_path_names_each_kind_of_step() -> None:
    assert parse_path("$..items[*].by_sku.*[0]") == [
        ("descend", None),
        ("name", "items"),
        ("any_index", None),
        ("name", "by_sku"),
        ("any_name", None),
        ("index", 0),
    ]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("label", "key 'label' is not a JSONPath: it must start with '$' (e.g. '$.label')"),
        ("$.", "key '$.': a name is missing after '.' at position 1"),
        ("$[x]", "key '$[x]': cannot read '[x]' at position 1"),
        ("$.a[", "key '$.a[': cannot read '[' at position 3"),
        ("$[-1]", "key '$[-1]': cannot read '[-1]' at position 1"),
        ("$['open", 'key "$[\'open": cannot read "[\'open" at position 1'),
    ],
)
def test_a_path_that_cannot_be_read_names_the_path_and_the_position(path: str, message: str) -> None:
    with pytest.raises(PathError) as err:
        canonical_path(path, "key")
    assert str(err.value) == message
    assert isinstance(err.value, ValueError)  # pydantic turns it into a validation error of the field


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=12))
def test_every_name_survives_being_written_and_read_again(name: str) -> None:
    path = "$" + segment(name)
    assert parse_path(path) == [("name", name)]
    assert canonical_path(path) == path


# -------------------------------------------------------------------------------------------- matching
@pytest.mark.parametrize(
    ("rule", "covered", "not_covered"),
    [
        ("$.a", ["$.a", "$.a.b", "$.a[0]", "$.a['x y']"], ["$.ab", "$.b.a", "$"]),
        ("$.items[*].sku", ["$.items[0].sku", "$.items[12].sku.code"], ["$.items.sku", "$.items[0].skus"]),
        ("$.meta.*", ["$.meta.x", "$.meta['a b']", "$.meta.x.y"], ["$.meta", "$.metadata.x"]),
        ("$..sku", ["$.sku", "$.a.b.sku", "$.a[3].sku", "$.a['x y'].sku"], ["$.skus", "$.a.sku_id"]),
        ("$['unit price']", ["$['unit price']", "$['unit price'].eur"], ["$.unit", "$['unit prices']"]),
        ("$.a[1]", ["$.a[1]", "$.a[1].b"], ["$.a[10]", "$.a[0]"]),
    ],
)
def test_a_rule_covers_its_path_and_everything_below_it(rule: str, covered: list[str], not_covered: list[str]) -> None:
    pattern = path_pattern(rule)
    assert [p for p in covered if not is_under(pattern, p)] == []
    assert [p for p in not_covered if is_under(pattern, p)] == []


@pytest.mark.parametrize(
    ("rule", "covered", "not_covered"),
    [
        ("$.score", ["$.score", "$.score.x"], ["analysis:$.score", "*:$.score"]),
        ("$..score", ["$.a.score"], ["analysis:$.score", "analysis:$.a.score"]),
        (
            "analysis:$.score",
            ["analysis:$.score", "analysis:$.score[0]"],
            ["$.score", "other:$.score", "nalysis:$.score"],
        ),
        ("analysis:$", ["analysis:$.score", "analysis:$.a.b"], ["$.score", "analysis-2:$.score"]),
        ("*:$.score", ["analysis:$.score", "other_2-x:$.score"], ["$.score", "analysis:$.scores"]),
    ],
)
def test_a_rule_without_a_stage_covers_the_last_stage_and_a_stage_prefix_that_stage(
    rule: str, covered: list[str], not_covered: list[str]
) -> None:
    pattern = path_pattern(rule)
    assert [p for p in covered if not is_under(pattern, p)] == []
    assert [p for p in not_covered if is_under(pattern, p)] == []


def test_a_stage_prefix_is_kept_in_the_canonical_form_and_split_off() -> None:
    assert canonical_path("analysis:$['score']") == "analysis:$.score"
    assert canonical_path("*:$['a b']") == "*:$['a b']"
    assert FieldRule(path="analysis:$['score']").path == "analysis:$.score"
    assert split_stage("analysis:$.score") == ("analysis:", "$.score")
    assert split_stage("$.score") == ("", "$.score")
    assert split_stage("$['a:$']") == ("", "$['a:$']")
    assert parse_path("analysis:$.a[0]") == [("name", "a"), ("index", 0)]
    assert stage_root("analysis") == "analysis:$"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("Analysis:$.x", "rule 'Analysis:$.x' is not a JSONPath: it must start with '$' (e.g. '$.label')"),
        ("analysis:x", "rule 'analysis:x' is not a JSONPath: it must start with '$' (e.g. '$.label')"),
        ("analysis:$.", "rule 'analysis:$.': a name is missing after '.' at position 10"),
    ],
)
def test_a_stage_rule_that_cannot_be_read_names_the_whole_rule(path: str, message: str) -> None:
    with pytest.raises(PathError) as err:
        canonical_path(path, "rule")
    assert str(err.value) == message


def test_a_rule_written_in_another_quoting_matches_the_same_fields() -> None:
    assert FieldRule(path="$['priorité']").path == "$.priorité"
    assert is_under(FieldRule(path='$["priorit\\u00e9"]').regex, "$.priorité")


def test_the_first_matching_rule_wins_and_no_rule_is_none() -> None:
    config = CompareConfig(
        fields=[
            FieldRule(path="$.items[*].price", comparator="numeric", rel_tol=0.01),
            FieldRule(path="$.items", comparator="set"),
            FieldRule(path="$.items[*].price", comparator="exact"),
        ]
    )
    rule = config.rule_for("$.items[3].price")
    assert rule is config.fields[0]
    assert config.rule_for("$.items[3].sku") is config.fields[1]  # the object's rule covers its fields
    assert config.rule_for("$.items") is config.fields[1]
    assert config.rule_for("$.summary") is None


# -------------------------------------------------------------------------------------------- settings
def test_paths_of_the_settings_are_kept_in_the_canonical_form() -> None:
    config = CompareConfig(ignore=["$['trace id']", "$['ts']"], map_paths=['$["by_sku"]'])
    assert (config.ignore, config.map_paths) == (["$['trace id']", "$.ts"], ["$.by_sku"])


def _refused(model: type, **values: object) -> str:
    with pytest.raises(ValidationError) as err:
        model(**values)
    return str(err.value)


def test_a_rule_path_that_is_not_a_jsonpath_is_refused_naming_the_field() -> None:
    message = _refused(FieldRule, path="label")
    assert "path" in message and "field rule path 'label' is not a JSONPath: it must start with '$'" in message
    assert "path 'x' is not a JSONPath" in _refused(CompareConfig, ignore=["x"])
    assert "cannot read" in _refused(CompareConfig, map_paths=["$[x]"])


@pytest.mark.parametrize(
    ("model", "values", "field"),
    [
        (FieldRule, {"path": "$.a", "rel_tol": -0.1}, "rel_tol"),
        (FieldRule, {"path": "$.a", "text_threshold": 1.5}, "text_threshold"),
        (FieldRule, {"path": "$.a", "comparator": "fuzzy"}, "comparator"),
        (FieldRule, {"path": "$.a", "treshold": 0.5}, "treshold"),  # a typo is not ignored
        (AuditRule, {"resource_name": "*", "max_new_keys": -1}, "max_new_keys"),
        (CompareConfig, {"alpha": 0.5}, "alpha"),
        (CompareConfig, {"alpha": 0}, "alpha"),
        (CompareConfig, {"abs_threshold": 1.2}, "abs_threshold"),
        (CompareConfig, {"list_mode": "sorted"}, "list_mode"),
        (CompareConfig, {"min_aligned": 0}, "min_aligned"),
        (CompareConfig, {"volatile_noise_rate": 0}, "volatile_noise_rate"),
        (CompareConfig, {"compare_arguments_of": ["printer"]}, "compare_arguments_of"),
        (CompareConfig, {"max_noise": 0.3}, "max_noise"),
    ],
)
def test_a_setting_out_of_range_or_unknown_is_refused_naming_it(model: type, values: dict, field: str) -> None:
    assert field in _refused(model, **values)


def test_the_defaults_documented_for_the_noise_rule() -> None:
    config = CompareConfig()
    assert (config.abs_threshold, config.rel_threshold, config.alpha, config.max_noise_rate) == (0.02, 0.25, 0.05, 0.5)
    assert (config.min_aligned, config.text_threshold, config.list_mode) == (20, 0.85, "auto")
    assert config.compare_arguments_of == ["tool", "vector_store", "unmediated"]
    assert config.compare_arguments_of is not CompareConfig().compare_arguments_of  # not shared between configs
