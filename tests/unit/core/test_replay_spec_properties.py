"""Property-based: whatever YAML-able tree a spec file holds, loading it ends in a spec or in the documented
:class:`SpecError` (``model_validate``: pydantic's ``ValidationError``) — never another exception, never a hang.

Random trees, and a valid spec with one of its values (at any depth) replaced by a random tree, so the field
validators (names, topics, references, secrets) see odd values of every type.
"""

from __future__ import annotations

import contextlib
import copy
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from airflow_flink_replay.core.replay_spec import ReplaySpec, SpecError

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SPEC: dict[str, Any] = {
    "name": "review-triage",
    "production": {
        "job_name": "review-triage-production",
        "program": {"entry_point": "/opt/jobs/production_job.py", "program_args": ["--x", "1"]},
        "agent_factory": "examples.review_agent.v1.agent:build_agent",
        "input_topic": "reviews",
        "capture_topic": "reviews-capture",
        "action_state_topic": "reviews-action-state",
        "job_identifier": "review-triage-prod",
    },
    "candidate_agent_factory": "examples.review_agent.v2.agent:build_agent",
    "mem0_config": {"llm": {"provider": "openai", "config": {"api_key": "${env:OPENAI_API_KEY}"}}},
    "kafka_bootstrap": "127.0.0.1:9092",
    "runs_uri": "file:///tmp/replay-runs",
    "aa_replays": 2,
}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=30),
    st.sampled_from(
        [
            "",
            ".",
            "..",
            "x\n",
            "\x1b[31m",
            "a\u200bb",
            "${env:X}",
            "${file:/etc/passwd}",
            "$.id",
            "password",
            "Bearer abc.def",
            "postgresql://u:p@db/x",
            "m:a",
            "x" * 300,
        ]
    ),
)
trees = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(max_size=12)
            | st.sampled_from(["name", "api_key", "password", "token", "records", "fields", "path"]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=25,
)


def _paths(tree: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += _paths(v, (*prefix, i))
    return out


PATHS = [p for p in _paths(SPEC) if p]


def _replaced(path: tuple, value: Any) -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    node = spec
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return spec


def _validates_or_refuses(data: Any) -> None:
    with contextlib.suppress(ValidationError):
        ReplaySpec.model_validate(data)
    handle = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False, encoding="utf-8")  # noqa: SIM115
    with handle:
        yaml.safe_dump(data, handle, allow_unicode=True)
    try:
        ReplaySpec.from_yaml(handle.name)
    except SpecError as err:
        assert handle.name in str(err)
    finally:
        Path(handle.name).unlink()


@SETTINGS
@given(trees)
def test_a_random_tree_is_a_spec_or_the_documented_error(tree: Any) -> None:
    _validates_or_refuses(tree)


@SETTINGS
@given(st.sampled_from(PATHS), trees)
def test_a_valid_spec_with_one_value_replaced_is_a_spec_or_the_documented_error(path: tuple, value: Any) -> None:
    _validates_or_refuses(_replaced(path, value))


@SETTINGS
@given(st.sampled_from(PATHS), st.dictionaries(st.text(max_size=10), trees, max_size=6))
def test_unknown_and_extra_fields_are_refused_with_the_documented_error(path: tuple, extra: dict) -> None:
    _validates_or_refuses({**_replaced(path, extra), **extra})
