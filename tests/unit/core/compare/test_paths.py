"""JSONPath helpers of the comparison (``core/compare/paths.py``): the correlation-key getter, the flattening of an
output into leaf paths (ignored paths, lists, maps keyed by ids, booleans), JSON types as part of the value, and
the way back from leaf paths to an object for the report."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_flink_replay.core.compare.paths import (
    MISSING,
    Flattener,
    Group,
    child_path,
    compile_key,
    differing_paths,
    json_type,
    key_text,
    same_flat,
    same_json,
    same_types,
    unflatten,
)
from airflow_flink_replay.exceptions import NestingError, PathError


# --------------------------------------------------------------------------------------------- the key
def test_a_simple_key_finds_its_value_or_missing() -> None:
    get = compile_key("$.id")
    assert get({"id": "r-1"}) == "r-1" and get({"id": None}) is None  # null is a value, not a missing key
    assert get({}) is MISSING and get(["id"]) is MISSING and get("id") is MISSING


def test_a_nested_key_walks_objects_and_lists_and_stops_at_the_first_gap() -> None:
    get = compile_key("$.order.lines[1].sku")
    assert get({"order": {"lines": [{"sku": "A"}, {"sku": "B"}]}}) == "B"
    for obj in ({"order": {"lines": [{"sku": "A"}]}}, {"order": {"lines": {"1": {"sku": "B"}}}}, {"order": []}, {}):
        assert get(obj) is MISSING, obj
    assert compile_key("$['order id']")({"order id": 7}) == 7
    assert compile_key("$[0]")([{"id": 1}]) == {"id": 1}


def test_a_key_with_a_wildcard_or_filter_returns_every_match_or_the_only_one() -> None:
    get = compile_key("$.items[*].sku")
    assert get({"items": [{"sku": "A"}, {"sku": "B"}]}) == ["A", "B"]
    assert get({"items": [{"sku": "A"}]}) == "A"
    assert get({"items": []}) is MISSING
    assert compile_key("$.items[?(@.qty > 1)].sku")({"items": [{"sku": "A", "qty": 1}, {"sku": "B", "qty": 3}]}) == "B"


def test_a_key_that_is_not_a_jsonpath_names_the_key_and_the_fix() -> None:
    with pytest.raises(PathError) as err:
        compile_key("id")
    assert str(err.value) == "key 'id' is not a JSONPath: it must start with '$' (e.g. '$.id')"
    with pytest.raises(PathError, match=r"key '\$\.items\[\?\(' is not valid JSONPath: "):
        compile_key("$.items[?(")


@pytest.mark.parametrize(
    "name",
    [
        "id",
        "priorité",
        "order id",
        "1st",
        "it's",
        'say "hi"',
        "a.b",
        "a]b",
        "",
        "été",  # a name starting with a letter of another script (was refused: 'Unexpected character')
        "日本",
        "back\\slash",  # the report escapes the backslash (was looked up with two: MISSING on every output)
    ],
)
def test_a_key_written_as_the_report_writes_the_path_finds_the_value(name: str) -> None:
    """The report shows field paths in the canonical form (``child_path``); a user takes the key from there."""
    assert compile_key(child_path("$", name))({name: "k-1"}) == "k-1"


@pytest.mark.parametrize(
    ("value", "text"),
    [("r-1", "r-1"), ("", ""), (42, "42"), (1.5, "1.5"), (True, "true"), (None, "null"), ([1, "a"], '[1,"a"]')],
)
def test_key_text_keeps_strings_and_writes_anything_else_as_compact_json(value: Any, text: str) -> None:
    assert key_text(value) == text


def test_key_text_of_an_object_does_not_depend_on_the_order_of_its_names() -> None:
    assert key_text({"b": 1, "a": [2]}) == key_text({"a": [2], "b": 1}) == '{"a":[2],"b":1}'


def test_missing_is_falsy_and_says_what_it_is() -> None:
    assert not MISSING and repr(MISSING) == "<missing>" and MISSING is not None


# ------------------------------------------------------------------------------------------ flattening
def test_objects_flatten_to_leaf_paths_in_the_canonical_form() -> None:
    flat = Flattener([]).flatten({"id": "r-1", "meta": {"model": "m", "x y": {"z": None}}, "empty": {}, "n": 0})
    assert flat == {"$.id": "r-1", "$.meta.model": "m", "$.meta['x y'].z": None, "$.empty": {}, "$.n": 0}


def test_lists_of_scalars_are_leaves_and_lists_of_objects_are_expanded_by_index() -> None:
    flat = Flattener([]).flatten({"tags": ["b", "a"], "items": [{"sku": "A"}, {"sku": "B"}], "none": [], "m": [[1]]})
    assert flat == {"$.tags": ["b", "a"], "$.items[0].sku": "A", "$.items[1].sku": "B", "$.none": [], "$.m[0]": [1]}


def test_list_mode_and_per_path_rules_decide_how_a_list_is_flattened() -> None:
    obj = {"tags": ["a", "b"], "items": [{"sku": "A"}]}
    assert Flattener([], list_mode="index").flatten(obj) == {"$.tags[0]": "a", "$.tags[1]": "b", "$.items[0].sku": "A"}
    assert Flattener([], list_mode="set").flatten(obj) == obj_paths(obj)
    by_rule = Flattener([], set_paths=["$.items"], index_paths=["$.tags"]).flatten(obj)
    assert by_rule == {"$.tags[0]": "a", "$.tags[1]": "b", "$.items": [{"sku": "A"}]}


def obj_paths(obj: dict[str, Any]) -> dict[str, Any]:
    return {child_path("$", k): v for k, v in obj.items()}


def test_ignored_paths_are_left_out_with_everything_below_and_each_hit_is_noted() -> None:
    flattener = Flattener(["$.trace", "$.items[*].note", "$.never"])
    flat = flattener.flatten({"id": 1, "trace": {"id": "t", "span": 2}, "items": [{"sku": "A", "note": "n"}]})
    assert flat == {"$.id": 1, "$.items[0].sku": "A"}
    assert flattener.ignore_hits == {0, 1}  # '$.never' matched nothing: a rule to warn about


def test_the_paths_that_may_hide_a_boolean_are_noted() -> None:
    """``true == 1`` in Python: only where a boolean was seen can two ``==`` outputs differ in JSON type."""
    flattener = Flattener([])
    flattener.flatten({"ok": False, "n": 2, "flags": [True, "x"], "ids": [3, 4], "items": [{"done": True}]})
    assert flattener.bool_paths == {"$.ok", "$.flags", "$.items[0].done"}
    kept_whole = Flattener([], set_paths=["$.rows"])
    kept_whole.flatten({"rows": [{"a": 1}]})
    assert kept_whole.bool_paths == {"$.rows"}  # a list kept whole may hold one anywhere inside


def test_an_output_nested_too_deep_names_the_path_where_flattening_stopped() -> None:
    with pytest.raises(NestingError) as err:
        Flattener([], max_depth=3).flatten({"a": {"b": {"c": {"d": 1}}}})
    assert str(err.value) == "$.a.b.c"
    Flattener([], max_depth=3).flatten({"a": {"b": {"c": 1}}})  # one level less: fine
    with pytest.raises(NestingError) as long:
        Flattener([], max_depth=2).flatten({"a" * 200: {"b": {"c": 1}}})
    assert len(str(long.value)) == 121 and str(long.value).endswith("…")


def test_nesting_in_lists_counts_too() -> None:
    with pytest.raises(NestingError, match=r"^\$\.a\[0\]\[0\]$"):
        Flattener([], max_depth=3).flatten({"a": [[[{"x": 1}]]]})


def outputs_with_a_map(n: int) -> list[dict[str, Any]]:
    """Each output decides two SKUs of its own: ``by_sku`` is keyed by ids."""
    return [
        {"id": f"r-{i}", f"sparse_{i}": 1, "by_sku": {f"SKU{i * 2 + j:03d}": {"ok": bool(j), "n": j} for j in range(2)}}
        for i in range(n)
    ]


def test_an_object_keyed_by_ids_collapses_to_one_family_of_paths() -> None:
    flattener = Flattener([], map_min_keys=16)
    for out in outputs_with_a_map(40):
        flattener.flatten(out)
    changed = flattener.collapse_maps()
    assert changed["$.by_sku.SKU000"] == "$.by_sku.*" and changed["$.by_sku.SKU079.ok"] == "$.by_sku.*.ok"
    assert set(changed.values()) == {"$.by_sku.*", "$.by_sku.*.ok", "$.by_sku.*.n"}
    assert len(changed) == 40 * 2 * 3  # every SKU object and its two fields
    assert flattener.typed_paths(changed) == frozenset({"$.by_sku.*.ok"})
    # the output itself is a record: its sparse top-level fields stay fields


def test_a_stage_output_flattens_below_its_stage_root_without_its_replay_block() -> None:
    flattener = Flattener([])
    obj = {"id": "r-1", "score": 0.5, "meta": {"x": [1]}, "_replay": {"stage": "analysis"}}
    assert flattener.flatten(obj, "analysis:$") == {
        "analysis:$.id": "r-1",
        "analysis:$.score": 0.5,
        "analysis:$.meta.x": [1],
    }
    assert flattener.flatten(obj) == {"$.id": "r-1", "$.score": 0.5, "$.meta.x": [1], "$._replay.stage": "analysis"}
    assert unflatten(flattener.flatten(obj, "analysis:$")) == {k: v for k, v in obj.items() if k != "_replay"}


def test_ignore_rules_apply_to_the_stage_they_name() -> None:
    flattener = Flattener(["$.score", "analysis:$.meta", "*:$.id"])
    obj = {"id": "r-1", "score": 0.5, "meta": {"x": 1}}
    assert flattener.flatten(obj) == {"$.id": "r-1", "$.meta.x": 1}
    assert flattener.flatten(obj, "analysis:$") == {"analysis:$.score": 0.5}
    assert flattener.flatten(obj, "triage:$") == {"triage:$.score": 0.5, "triage:$.meta.x": 1}
    assert flattener.ignore_hits == {0, 1, 2}


def test_maps_are_found_per_stage_and_a_stage_root_is_never_one() -> None:
    flattener = Flattener([], map_min_keys=16)
    for out in outputs_with_a_map(40):
        flattener.flatten(out, "analysis:$")
        flattener.flatten({"id": out["id"], "label": "ok"})
    changed = flattener.collapse_maps()
    assert set(changed.values()) == {"analysis:$.by_sku.*", "analysis:$.by_sku.*.ok", "analysis:$.by_sku.*.n"}
    assert changed["analysis:$.by_sku.SKU000"] == "analysis:$.by_sku.*"
    assert flattener.typed_paths(changed) == frozenset({"analysis:$.by_sku.*.ok"})
    named = Flattener([], map_paths=["analysis:$.by_sku"])
    for out in outputs_with_a_map(2):
        named.flatten(out)  # the last stage's by_sku is not named
        named.flatten(out, "analysis:$")
    assert set(named.collapse_maps().values()) == {
        "analysis:$.by_sku.*",
        "analysis:$.by_sku.*.ok",
        "analysis:$.by_sku.*.n",
    }


def test_too_few_names_or_detection_off_is_no_map_unless_named() -> None:
    for min_keys, n in ((16, 7), (0, 40)):  # 14 distinct names < 16; detection off
        flattener = Flattener([], map_min_keys=min_keys)
        for out in outputs_with_a_map(n):
            flattener.flatten(out)
        assert flattener.collapse_maps() == {}, (min_keys, n)
    named = Flattener([], map_paths=["$.by_sku"])
    for out in outputs_with_a_map(2):
        named.flatten(out)
    assert set(named.collapse_maps().values()) == {"$.by_sku.*", "$.by_sku.*.ok", "$.by_sku.*.n"}


def test_an_object_with_the_same_names_in_every_output_is_a_record_not_a_map() -> None:
    flattener = Flattener([], map_min_keys=16)
    for i in range(40):
        flattener.flatten({"scores": {f"s{j}": i for j in range(20)}})  # 20 names, every output holds all
    assert flattener.collapse_maps() == {}


def test_a_map_inside_a_map_is_judged_over_all_its_occurrences() -> None:
    flattener = Flattener([], map_min_keys=16)
    for i in range(40):
        flattener.flatten({"by_user": {f"u{i}": {"by_sku": {f"S{i * 2 + j}": j for j in range(2)}}}})
    assert set(flattener.collapse_maps().values()) == {"$.by_user.*", "$.by_user.*.by_sku", "$.by_user.*.by_sku.*"}


def test_flatteners_that_saw_parts_of_the_outputs_merge_into_one_that_saw_them_all() -> None:
    outputs = outputs_with_a_map(40)
    whole = Flattener(["$.never", "$.id"], map_min_keys=16)
    first, second = Flattener(["$.never", "$.id"], map_min_keys=16), Flattener(["$.never", "$.id"], map_min_keys=16)
    for i, out in enumerate(outputs):
        whole.flatten(out)
        (first if i < 6 else second).flatten(out)
    assert first.collapse_maps() == {}  # 12 SKU names alone are too few to call it a map
    first.merge(second)
    assert first.collapse_maps() == whole.collapse_maps() != {}
    assert first.bool_paths == whole.bool_paths and first.ignore_hits == whole.ignore_hits == {1}


# -------------------------------------------------------------------------------------- JSON types
@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (True, "boolean"),
        (0, "number"),
        (1.5, "number"),
        ("", "string"),
        (None, "null"),
        ({}, "object"),
        (Group(), "object"),
        ([], "array"),
        (MISSING, None),
    ],
)
def test_json_type_of_each_value(value: Any, kind: str | None) -> None:
    assert json_type(value) == kind


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (1, 1.0, True),
        (True, 1, False),
        (0, False, False),
        ([1, 2], [1.0, 2], True),
        ([True], [1], False),
        ({"a": False}, {"a": 0}, False),
        ({"a": [{"b": 1}]}, {"a": [{"b": True}]}, False),
        ({"a": [{"b": 1}]}, {"a": [{"b": 1.0}]}, True),
        (Group({"$.x.k": True}), Group({"$.x.k": 1}), False),
        ("1", 1, False),
        (None, None, True),
    ],
)
def test_same_json_is_equality_with_the_json_types_all_the_way_down(a: Any, b: Any, same: bool) -> None:
    assert same_json(a, b) is same
    if a == b:
        assert same_types(a, b) is same


def test_same_flat_looks_at_every_path_of_two_equal_outputs() -> None:
    a = {"$.n": 1, "$.tags": [True, "x"], "$.m": Group({"$.m.k": 0})}
    assert same_flat(a, dict(a))
    assert not same_flat(a, {**a, "$.n": True})
    assert not same_flat(a, {**a, "$.tags": [1, "x"]})
    assert not same_flat(a, {**a, "$.m": Group({"$.m.k": False})})
    assert same_flat({"$.n": 1}, {"$.n": 1.0})


def test_differing_paths_include_one_sided_paths_and_type_changes_sorted() -> None:
    a = {"$.id": "r-1", "$.ok": True, "$.n": 1, "$.gone": "x"}
    b = {"$.id": "r-1", "$.ok": 1, "$.n": 1.0, "$.new": None}
    assert differing_paths(a, b) == ["$.gone", "$.new", "$.ok"]
    assert differing_paths(a, a) == []


# ---------------------------------------------------------------------------------------- back again
def test_unflatten_is_the_inverse_of_flatten_for_the_report() -> None:
    obj = {
        "id": "r-1",
        "meta": {"x y": {"it's": None}, "e": {}},
        "items": [{"sku": "A"}, {"sku": "B", "n": 2}],
        "tags": ["a"],
    }
    assert unflatten(Flattener([]).flatten(obj)) == obj


def test_unflatten_expands_the_members_of_a_collapsed_map() -> None:
    flat = {"$.id": 1, "$.by_sku.*": Group({"$.by_sku.S1": True, "$.by_sku.S2": False})}
    assert unflatten(flat) == {"id": 1, "by_sku": {"S1": True, "S2": False}}


@settings(max_examples=150, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=4),
        lambda inner: (
            st.lists(st.dictionaries(st.text(max_size=4), inner, min_size=1, max_size=3), min_size=1, max_size=3)
            | st.dictionaries(st.text(max_size=4), inner, min_size=1, max_size=3)
        ),
        max_leaves=12,
    ).filter(lambda v: isinstance(v, dict))
)
def test_any_object_flattens_and_comes_back(obj: dict[str, Any]) -> None:
    assert unflatten(Flattener([], list_mode="index").flatten(obj)) == obj
