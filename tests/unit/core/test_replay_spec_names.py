"""Names and topics of a ReplaySpec, and loading a spec file safely.

A name regex ending in ``$`` accepts a trailing newline (``"review\\n"`` became the fork namespace
``replay-review\\n-...``); a job name with control, format or line-separator characters, or 10,000 of them, ends up
in Flink, logs and the terminal; an empty or Kafka-illegal topic would only fail deep in a run. A spec file that is
not a small UTF-8 YAML mapping (a device, a folder, a YAML alias bomb, nesting thousands deep) is refused before
validation, at once, naming the file and the fix.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from airflow_flink_replay.core.replay_spec import MAX_SPEC_BYTES, ReplaySpec, SpecError, is_legal_topic_name
from tests.unit.core.test_replay_spec import _spec

TOPIC_FIELDS = (
    "input_topic",
    "capture_topic",
    "output_topic",
    "cassette_topic",
    "memory_journal_topic",
    "action_state_topic",
)


def alias_bomb(key: str, levels: int = 10) -> str:
    """YAML of ``key``: a mapping of ``levels`` lists, each nine aliases of the one before (9**levels leaves)."""
    lines = [f"{key}:", '  a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def _with_production(**changes: Any) -> dict[str, Any]:
    spec = _spec()
    spec["production"] = {**spec["production"], **changes}
    return spec


def _refused(data: dict[str, Any], *words: str) -> str:
    with pytest.raises(ValidationError) as err:
        ReplaySpec.model_validate(data)
    text = str(err.value)
    assert all(w in text for w in words), text
    return text


@pytest.mark.parametrize("name", ["review\n", "review\r\n", "\nreview"])
def test_a_name_with_a_newline_is_refused(name: str) -> None:
    _refused(_spec(name=name), "name")


@pytest.mark.parametrize("field", ["agent_factory", "candidate_agent_factory"])
def test_a_reference_with_a_trailing_newline_is_refused(field: str) -> None:
    ref = "examples.review_agent.v1.agent:build_agent\n"
    data = _with_production(agent_factory=ref) if field == "agent_factory" else _spec(**{field: ref})
    _refused(data, field, "module:attribute")


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "prod\x1b[31m gate PASSED",  # a terminal escape
        "prod\nINFO gate PASSED",  # a forged log line
        "prod\u200bname",  # zero-width space (Cf)
        "prod\u202ename",  # right-to-left override (Cf)
        "prod\u2028name",  # line separator (Zl)
        "prod\u2029name",  # paragraph separator (Zp)
        "x" * 10_000,
    ],
)
@pytest.mark.parametrize("field", ["job_name", "job_identifier"])
def test_job_names_with_invisible_characters_or_too_long_are_refused(field: str, value: str) -> None:
    text = _refused(_with_production(**{field: value}), f"production.{field}", "Fix:")
    assert "\x1b" not in text and "\u202e" not in text  # the error does not print the raw value either


def test_a_job_name_with_spaces_and_unicode_letters_is_fine() -> None:
    spec = ReplaySpec.model_validate(_with_production(job_name="Review triage (production) — café"))
    assert spec.production.job_name == "Review triage (production) — café"


@pytest.mark.parametrize("value", ["", ".", "..", "has space", "t\n", "caf\u00e9", "x" * 250, "a/b"])
@pytest.mark.parametrize("field", TOPIC_FIELDS)
def test_empty_or_kafka_illegal_topics_are_refused(field: str, value: str) -> None:
    _refused(_with_production(**{field: value}), f"production.{field}", "Fix:")


def test_kafka_legal_topics_pass() -> None:
    assert is_legal_topic_name("a" * 249) and is_legal_topic_name("a.b_c-D9") and is_legal_topic_name("...")
    assert not is_legal_topic_name(".") and not is_legal_topic_name("..") and not is_legal_topic_name("")
    spec = ReplaySpec.model_validate(_with_production(input_topic="x" * 249, output_topic="reviews.out_1"))
    assert spec.production.output_topic == "reviews.out_1"


def test_every_variant_of_the_most_a_a_replays_gets_names_of_its_own_legal_everywhere() -> None:
    """``aa_replays`` at its most (4): six variants, each with its own fork namespace (a Mem0 user_id: ``-`` for
    ``_``), action-state and result topics (Kafka-legal), Flink job name and task ids, none shared."""
    from airflow_flink_replay import ids
    from airflow_flink_replay.core.replay_job_spec import replay_job_name

    spec = ReplaySpec.model_validate(_spec(aa_replays=4))
    variants = spec.variant_names()
    assert variants == ["baseline", "baseline_2", "baseline_3", "baseline_4", "baseline_5", "candidate"]
    namespaces = {spec.fork_namespace("t1", v) for v in variants}
    assert "replay-review-triage-t1-baseline-5" in namespaces and not any("_" in n for n in namespaces)
    topics = [t for v in variants for t in (spec.action_state_topic("t1", v), *spec.result_topics("t1", v).names())]
    assert all(is_legal_topic_name(t) for t in topics) and len(set(topics)) == 3 * len(variants)
    assert len({replay_job_name("gate", "manual__2026-12-01T00:00:00+00:00", v) for v in variants}) == len(variants)
    task_ids = [f(v) for f in (ids.fork_task, ids.replay_task) for v in variants]
    assert len(set(task_ids)) == 12 and all(re.fullmatch(r"[a-z0-9_]+", t) for t in task_ids)


# -------------------------------------------------------------------------------------------- loading
def _load_refused(path: Path, *words: str, within: float = 5.0) -> str:
    started = time.monotonic()
    with pytest.raises(SpecError) as err:
        ReplaySpec.from_yaml(path)
    assert time.monotonic() - started < within
    text = str(err.value)
    assert all(w in text for w in words), text
    assert "Fix:" in text
    return text


def test_a_spec_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_bytes(yaml.safe_dump(_spec()).encode() + b"extra: caf\xe9\n")
    _load_refused(path, str(path), "not UTF-8", "line")


@pytest.mark.parametrize("where", ["folder", "missing", "/dev/zero", "/dev/null"])
def test_a_spec_that_is_not_a_regular_file_is_refused_without_reading_it(tmp_path: Path, where: str) -> None:
    path = {"folder": tmp_path, "missing": tmp_path / "nope.yaml"}.get(where, Path(where))
    _load_refused(path, str(path))


def test_a_huge_spec_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(_spec()) + "# " + "x" * MAX_SPEC_BYTES + "\n")
    _load_refused(path, str(path), "larger than")


def test_a_yaml_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(yaml.safe_dump(_spec()) + alias_bomb("mem0_config"))
    _load_refused(path, str(path), "alias")


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text(yaml.safe_dump(_spec()) + "mem0_config: &loop {inner: *loop}\n")
    _load_refused(path, str(path))


def test_anchors_and_merge_keys_of_a_normal_spec_still_load(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    text = yaml.safe_dump(_spec()).replace("production:\n", "production: &prod\n")
    path.write_text(text + "compare: {fields: [{<<: &rule {comparator: set}, path: $.a}, {<<: *rule, path: $.b}]}\n")
    assert ReplaySpec.from_yaml(path).production.input_topic == "reviews"


@pytest.mark.parametrize("depth", [200, 100_000])
def test_deep_nesting_is_refused(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(yaml.safe_dump(_spec()) + "mem0_config: " + "[" * depth + "]" * depth + "\n")
    _load_refused(path, str(path), "nested")


@pytest.mark.parametrize(
    ("text", "what"), [("", "empty"), ("- a\n- b\n", "list"), ("just text\n", "str"), ("a: [1\n", "YAML")]
)
def test_a_spec_that_is_not_a_mapping_is_refused(tmp_path: Path, text: str, what: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    _load_refused(path, str(path), what)
