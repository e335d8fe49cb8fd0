"""The task ids and XCom keys (``ids.py``): one name each, legal where Airflow puts it, and the per-variant names
of every variant a spec can have distinct from each other and from the fixed ones. Where the DAG uses them:
tests/unit/replay_dag/test_stages.py; that ids.py is a leaf: tests/unit/test_layering.py."""

from __future__ import annotations

import re

from airflow_flink_replay import ids
from airflow_flink_replay.core.replay_spec import MAX_AA_REPLAYS, variant_names

_TASK_ID = re.compile(r"[A-Za-z0-9_.-]{1,250}")  # Airflow's KEY_REGEX for task ids


def _constants(prefix: str) -> dict[str, str]:
    return {name: value for name, value in vars(ids).items() if name.startswith(prefix) and isinstance(value, str)}


def test_every_task_id_and_xcom_key_is_one_name_of_its_own() -> None:
    tasks, keys = _constants("TASK_"), _constants("XCOM_")
    assert len(tasks) > 20 and len(keys) > 10
    assert len(set(tasks.values())) == len(tasks), "two constants name one task"
    assert len(set(keys.values())) == len(keys), "two constants name one XCom key"
    assert all(_TASK_ID.fullmatch(t) for t in tasks.values())
    assert "return_value" not in keys.values(), "a key of its own beside the task's return value"


def test_the_per_variant_names_of_every_variant_are_distinct_and_legal() -> None:
    variants = variant_names(MAX_AA_REPLAYS)
    fixed = set(_constants("TASK_").values())
    for name_of in (ids.fork_task, ids.replay_task):
        names = [name_of(v) for v in variants]
        assert len(set(names)) == len(names) and not set(names) & fixed
        assert all(_TASK_ID.fullmatch(n) for n in names)
    resolved = [key(v) for key in (ids.fork_key, ids.output_key, ids.audit_key, ids.job_spec_key) for v in variants]
    assert len(set(resolved)) == len(resolved), "two variants, or two kinds of value, share a resolve key"
