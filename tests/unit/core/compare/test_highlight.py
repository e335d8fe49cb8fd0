"""Word-level highlighting of two values in the report's side-by-side examples (``core/compare/highlight.py``):
removed words in ``<del>``, added words in ``<ins>``, everything HTML-escaped, and the texts themselves intact
once the marks are taken out."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from markupsafe import Markup, escape

from airflow_flink_replay.core.compare.highlight import highlight_pair


def unmarked(html: str, tag: str) -> str:
    return re.sub(rf"</?{tag}>", "", html)


def test_equal_values_are_escaped_and_unmarked() -> None:
    left, right = highlight_pair("<b>refund</b> & co", "<b>refund</b> & co")
    assert left == right == "&lt;b&gt;refund&lt;/b&gt; &amp; co"
    assert isinstance(left, Markup) and isinstance(right, Markup)  # the template does not escape them again


def test_a_substituted_word_is_deleted_on_the_left_and_inserted_on_the_right() -> None:
    left, right = highlight_pair("the refund is approved.", "the refund is declined.")
    assert left == "the refund is <del>approved</del>."
    assert right == "the refund is <ins>declined</ins>."


def test_an_inserted_word_marks_only_the_right_side() -> None:
    left, right = highlight_pair("refund approved", "refund not approved")
    assert left == "refund approved"
    assert right == "refund <ins>not </ins>approved"


def test_a_removed_word_marks_only_the_left_side() -> None:
    left, right = highlight_pair("refund not approved", "refund approved")
    assert left == "refund <del>not </del>approved"
    assert right == "refund approved"


def test_punctuation_is_a_token_of_its_own() -> None:
    left, right = highlight_pair("ok, done", "ok; done")
    assert (left, right) == ("ok<del>,</del> done", "ok<ins>;</ins> done")


def test_markup_in_a_changed_word_is_escaped_inside_the_mark() -> None:
    left, right = highlight_pair("say hi", "say <script>alert(1)</script>")
    assert "<script>" not in right and "&lt;script&gt;" in right
    assert left == "say <del>hi</del>" and right.startswith("say <ins>") and right.endswith("</ins>")


def test_very_long_values_are_marked_whole() -> None:
    old = " ".join(f"w{i}" for i in range(1500))  # 2999 tokens
    new = old + " extra words here"
    left, right = highlight_pair(old, new)
    assert left == f"<del>{old}</del>" and right == f"<ins>{new}</ins>"
    short_left, _ = highlight_pair("a b", "a c")
    assert short_left == "a <del>b</del>"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40))
def test_taking_the_marks_out_gives_back_both_escaped_texts(old: str, new: str) -> None:
    left, right = highlight_pair(old, new)
    assert "<ins>" not in left and "<del>" not in right
    assert unmarked(left, "del") == escape(old)
    assert unmarked(right, "ins") == escape(new)
