"""Diffing one aligned pair of flattened outputs (``core/compare/differ.py``): the numeric noise band learned from
the two baselines (a quantile of how far each number moves, over the whole field and per magnitude range), and
the per-pair differ that counts what moved beyond it, names changes of JSON type, and compares collapsed maps
member by member. The same through whole comparisons: test_magnitude_band.py and test_types.py."""

from __future__ import annotations

import math
from typing import Any

import pytest

from airflow_flink_replay.core.compare.comparators import ComparatorResolver
from airflow_flink_replay.core.compare.config import CompareConfig, FieldRule
from airflow_flink_replay.core.compare.differ import Differ, NumericBand, band_for, decade, range_label
from airflow_flink_replay.core.compare.paths import Group

Flat = dict[str, Any]


def learned(pairs: list[tuple[Flat, Flat]], quantile: float = 0.99, min_pairs: int = 100, **kw: Any) -> NumericBand:
    """A band learned from aligned baseline / baseline-2 pairs (one output per key), finished."""
    band = NumericBand(quantile, min_pairs=min_pairs, **kw)
    a = {f"k{i}": [(fa,)] for i, (fa, _) in enumerate(pairs)}
    a2 = {f"k{i}": [(fb,)] for i, (_, fb) in enumerate(pairs)}
    band.finish(band.learn_runs(a, a2))
    return band


# ---------------------------------------------------------------------------------------- magnitudes
@pytest.mark.parametrize(
    ("m", "d"), [(0.05, -2), (0.1, -1), (1.0, 0), (9.99, 0), (10.0, 1), (999.0, 2), (1e300, 300), (5e-324, -324)]
)
def test_decade_is_the_power_of_ten_below_the_value(m: float, d: int) -> None:
    assert decade(m) == d


@pytest.mark.parametrize("m", [0.0, -1.0, math.inf, math.nan])
def test_zero_and_values_that_are_not_finite_have_no_decade(m: float) -> None:
    assert decade(m) is None


def test_range_labels_name_the_magnitude_range() -> None:
    assert [range_label(d) for d in (-2, -1, 0, 3)] == [
        "values 0.01-0.1",
        "values 0.1-1",
        "values 1-10",
        "values 1000-10000",
    ]
    assert range_label(400) == "values 1e400-1e401" and range_label(-320) == "values 1e-320-1e-319"


# ----------------------------------------------------------------------------------------- the band
def test_the_band_is_the_quantile_of_the_moves_with_unmoved_outputs_counted_as_zero() -> None:
    """10 aligned pairs, 4 of which moved by 1, 2, 3 and 4: the 0.9 quantile of (0 x6, 1, 2, 3, 4) is 3; the
    median is 0, which is no band at all."""
    pairs = [({"$.x": 10.0}, {"$.x": 10.0 + d}) for d in (1, 2, 3, 4)] + [({"$.x": 10.0}, {"$.x": 10.0})] * 6
    band = learned(pairs, quantile=0.9)
    assert band.bands["$.x"] == (3.0, pytest.approx(3 / 13))
    assert learned(pairs, quantile=0.5).bands == {}


def test_a_difference_within_either_band_is_noise() -> None:
    pairs = [({"$.x": 100.0}, {"$.x": 100.0 + d}) for d in (1, 2, 3, 4, 5)]
    band = learned(pairs, quantile=1.0)
    assert band.bands["$.x"] == (5.0, pytest.approx(5 / 105))
    assert band.within("$.x", 100.0, 105.0)  # absolute band
    assert band.within("$.x", 1000.0, 1040.0)  # 40 is beyond 5, but 3.8% is within the relative band
    assert not band.within("$.x", 100.0, 106.0)
    assert not band.within("$.y", 1.0, 1.0000001)  # a field that never moved has no band


def test_only_numbers_are_learned_not_booleans_strings_nan_or_huge_integers() -> None:
    pairs = [
        (
            {"$.ok": True, "$.s": "1", "$.nan": math.nan, "$.big": 10**400},
            {"$.ok": False, "$.s": "2", "$.nan": 1.0, "$.big": 10**400 + 10**399},
        )
    ]
    assert learned(pairs, quantile=1.0).bands == {}


def test_numbers_inside_a_collapsed_map_are_learned_member_by_member() -> None:
    fa = {"$.price.*": Group({"$.price.A": 10.0, "$.price.B": 20.0})}
    fb = {"$.price.*": Group({"$.price.A": 10.5, "$.price.B": 20.0})}
    assert learned([(fa, fb)], quantile=1.0).bands["$.price.*"][0] == 0.5


def skewed_field() -> list[tuple[Flat, Flat]]:
    """100 small values (5) moving by 0.1 and 100 large ones (5,000) moving by 100: 2 % each."""
    return [({"$.x": 5.0}, {"$.x": 5.1})] * 100 + [({"$.x": 5000.0}, {"$.x": 5100.0})] * 100


def test_each_magnitude_range_gets_bands_of_its_own_when_it_has_enough_pairs() -> None:
    band = learned(skewed_field(), quantile=0.99)
    assert band.bands["$.x"][0] == 100.0  # the field's absolute band comes from the large values
    assert band.ranges["$.x"] == {
        0: (pytest.approx(0.1), pytest.approx(0.1 / 5.1)),
        3: (100.0, pytest.approx(100 / 5100)),
    }
    # 5 -> 6 is inside the field's absolute band (1 <= 100) but far beyond its range's
    assert not band.within("$.x", 5.0, 6.0)
    assert band.range_kind("$.x", 5.0, 6.0) == "values 1-10"
    assert band.band_of_kind("$.x", "values 1-10") == band.ranges["$.x"][0]
    assert band.band_of_kind("$.x", "values 10-100") == band.bands["$.x"]  # no range of its own: the field's
    assert band.within("$.x", 5000.0, 5090.0)


def test_a_range_with_too_few_pairs_or_ranges_off_falls_back_to_the_field_band() -> None:
    few = learned(skewed_field(), quantile=0.99, min_pairs=101)
    assert few.ranges == {} and few.within("$.x", 5.0, 6.0) and few.range_kind("$.x", 5.0, 6.0) is None
    off = learned(skewed_field(), quantile=0.99, by_magnitude=False)
    assert off.ranges == {} and off.within("$.x", 5.0, 6.0)


def test_unmoved_pairs_count_in_their_range() -> None:
    """100 pairs of values near 5 of which 2 moved by 0.1: only with the 98 unmoved ones counted does the range
    reach ``min_pairs`` (100); its 0.99 quantile is then the 99th of (0 x98, 0.1, 0.1), its 0.98 quantile 0."""
    pairs = [({"$.x": 5.0}, {"$.x": 5.1})] * 2 + [({"$.x": 5.0 + i / 1000}, {"$.x": 5.0 + i / 1000}) for i in range(98)]
    band = learned(pairs, quantile=0.99)
    assert band.ranges["$.x"][0][0] == pytest.approx(0.1)
    assert learned(pairs, quantile=0.98).ranges["$.x"] == {0: (0.0, 0.0)}
    assert learned(pairs[:99], quantile=0.99).ranges == {}  # 99 pairs: too few for a range of its own


def test_bands_learned_on_parts_merge_into_the_bands_learned_on_all() -> None:
    pairs = skewed_field() + [({"$.y": float(i)}, {"$.y": i + (i % 7) / 10}) for i in range(1, 300)]
    whole = learned(pairs)
    first, second = NumericBand(0.99), NumericBand(0.99)
    n = first.learn_runs(
        {f"k{i}": [(fa,)] for i, (fa, _) in enumerate(pairs[:150])},
        {f"k{i}": [(fb,)] for i, (_, fb) in enumerate(pairs[:150])},
    )
    n += second.learn_runs(
        {f"k{i}": [(fa,)] for i, (fa, _) in enumerate(pairs[150:])},
        {f"k{i}": [(fb,)] for i, (_, fb) in enumerate(pairs[150:])},
    )
    first.merge(second)
    first.finish(n)
    assert (first.bands, first.ranges) == (whole.bands, whole.ranges)


def test_band_for_takes_the_settings_of_the_config() -> None:
    band = band_for(
        CompareConfig(numeric_noise_quantile=0.9, numeric_band_by_magnitude=False, numeric_band_min_pairs=7)
    )
    assert (band.quantile, band.by_magnitude, band.min_pairs) == (0.9, False, 7)


# ---------------------------------------------------------------------------------------- the differ
def differ(band: NumericBand | None = None, typed: frozenset[str] | None = None, **cfg: Any) -> Differ:
    return Differ(ComparatorResolver(CompareConfig(**cfg)), band, typed)


def test_equal_outputs_do_not_differ() -> None:
    d = differ()
    assert d({"$.id": "r-1", "$.n": 1}, {"$.id": "r-1", "$.n": 1.0}) == {}
    assert d.kinds == {} and d.texts == []


def test_each_differing_field_is_reported_with_its_similarity() -> None:
    d = differ()
    out = d({"$.label": "ok", "$.n": 10, "$.gone": "x"}, {"$.label": "bad", "$.n": 8, "$.new": True})
    assert set(out) == {"$.label", "$.n", "$.gone", "$.new"}
    assert out["$.label"] == 0.0 and out["$.n"] == pytest.approx(0.8)
    assert d.comparator_of == {"$.label": "exact", "$.n": "numeric", "$.gone": "exact", "$.new": "exact"}


def test_a_change_of_json_type_differs_and_is_named() -> None:
    d = differ()
    assert d({"$.ok": True, "$.s": "1"}, {"$.ok": 1, "$.s": 1}) == {"$.ok": 0.0, "$.s": 0.0}
    assert d.kinds == {"$.ok": "type boolean -> number", "$.s": "type string -> number"}
    assert d({"$.ok": True}, {"$.ok": True}) == {} and d.kinds == {}  # kinds are the last pair's


def test_the_differ_looks_for_type_changes_only_where_the_flattener_saw_booleans() -> None:
    assert differ(typed=frozenset({"$.ok"}))({"$.ok": True}, {"$.ok": 1}) == {"$.ok": 0.0}
    assert differ(typed=frozenset({"$.ok"}))({"$.ok": [True]}, {"$.ok": [1]}) == {"$.ok": 0.0}
    assert differ(typed=frozenset())({"$.ok": True}, {"$.ok": 1}) == {}  # the flattener saw no boolean there


def test_ignore_rules_out_even_a_change_of_type() -> None:
    d = differ(fields=[FieldRule(path="$.debug", comparator="ignore")])
    assert d({"$.debug": True, "$.x": 1}, {"$.debug": 1, "$.x": 1}) == {}


def test_a_number_within_the_learned_band_is_not_counted_and_beyond_it_names_its_range() -> None:
    band = learned(skewed_field())
    d = differ(band=band)
    assert d({"$.x": 5000.0}, {"$.x": 5080.0}) == {}
    out = d({"$.x": 5.0}, {"$.x": 6.0})
    assert set(out) == {"$.x"} and d.kinds == {"$.x": "values 1-10"}
    assert differ()({"$.x": 5000.0}, {"$.x": 5080.0}) != {}  # without the band the same move counts


def test_an_exact_rule_is_not_softened_by_the_band() -> None:
    band = learned(skewed_field())
    d = differ(band=band, fields=[FieldRule(path="$.x", comparator="exact")])
    assert d({"$.x": 5000.0}, {"$.x": 5080.0}) == {"$.x": 0.0}


def test_texts_lists_the_paths_where_the_second_output_holds_another_string() -> None:
    d = differ()
    long_a = "The customer asks for a refund of the last order."
    long_b = "The customer asks for a refund of the last order!"
    assert d({"$.summary": long_a, "$.n": 1}, {"$.summary": long_b, "$.n": 2, "$.new": "x"}) == {
        "$.n": 0.5,
        "$.new": 0.0,
    }
    assert sorted(d.texts) == ["$.new", "$.summary"]  # the paraphrase within the threshold is listed too


def test_a_collapsed_map_differs_when_any_member_does_with_the_worst_members_similarity() -> None:
    d = differ()
    a = {"$.by_sku.*": Group({"$.by_sku.A": 10, "$.by_sku.B": "ok"})}
    b = {"$.by_sku.*": Group({"$.by_sku.A": 9, "$.by_sku.B": "ok", "$.by_sku.C": 1})}
    assert d(a, b) == {"$.by_sku.*": 0.0}  # C is new: the worst member
    b2 = {"$.by_sku.*": Group({"$.by_sku.A": 9, "$.by_sku.B": "ok"})}
    assert d(a, b2) == {"$.by_sku.*": pytest.approx(0.9)}
    assert d(a, {"$.by_sku.*": Group(a["$.by_sku.*"])}) == {}
    assert d(a, {}) == {"$.by_sku.*": 0.0}  # the whole map gone


def test_merge_takes_the_comparators_another_differ_chose() -> None:
    """A comparator chosen from a difference in the first output wins; one seen only as a second output's new
    path fills a gap."""
    mine, theirs = differ(), differ()
    mine({"$.a": "x"}, {"$.a": "y"})
    theirs({"$.a": 1.0, "$.b": 1}, {"$.a": 2.0, "$.c": "new"})
    mine.merge(theirs.comparator_of, theirs.assigned)
    assert mine.comparator_of == {"$.a": "numeric", "$.b": "exact", "$.c": "exact"}
    assert mine.assigned == {"$.a", "$.b"}
