"""One naming rule for the replay's action-state topics (``replay_topic_name``): Kafka-legal, distinct per
variant, the same for the DAG's resolved names and ``IsolateActionStateOperator``'s defaults.

Also: loading a spec from YAML, run overrides, the A/A replays (``aa_replays``) and the variants they give.
``_spec()`` is a valid spec document other tests start from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from airflow_flink_replay.core.replay_spec import (
    MAX_TOPIC_NAME,
    ReplaySpec,
    SpecError,
    is_legal_topic_name,
    replay_topic_name,
    variant_names,
)
from airflow_flink_replay.operators.action_state import IsolateActionStateOperator


def _spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "review-triage",
        "production": {
            "job_name": "review-triage-production",
            "program": {"entry_point": "/opt/jobs/production_job.py", "program_args": ["--x", "1"]},
            "agent_factory": "examples.review_agent.v1.agent:build_agent",
            "input_topic": "reviews",
            "capture_topic": "reviews-capture",
            "action_state_topic": "reviews-action-state",
            "job_identifier": "review-triage-prod",
            "agent_uid": "afr-agent",
        },
        "candidate_agent_factory": "examples.review_agent.v2.agent:build_agent",
        "kafka_bootstrap": "127.0.0.1:9092",
        "runs_uri": "file:///tmp/replay-runs",
    }
    spec.update(overrides)
    return spec


def test_yaml_round_trip_and_errors_name_the_field(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(_spec()))
    spec = ReplaySpec.from_yaml(path)
    assert spec.quiesce_mode == "drain" and spec.window.records == 40
    assert spec.variants() == ["baseline", "baseline_2", "candidate"]

    bad = _spec(candidate_agent_factory="not a factory", name="Bad Name")
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(SpecError) as err:
        ReplaySpec.from_yaml(path)
    assert "candidate_agent_factory" in str(err.value) and "module:attribute" in str(err.value)
    assert "name" in str(err.value) and str(path) in str(err.value)

    path.write_text(yaml.safe_dump(_spec(quiesce_mode="existing")))
    with pytest.raises(SpecError, match="quiesce_mode=existing needs existing_manifest"):
        ReplaySpec.from_yaml(path)
    path.write_text(yaml.safe_dump(_spec(quiesce_mode="existing", existing_manifest="file:///runs/m.json")))
    reuse = ReplaySpec.from_yaml(path)
    assert reuse.memory_source() == reuse.production.job_identifier  # default: production's memory, now
    assert reuse.with_run_overrides({"existing_memory": "snap-1"}).memory_source() == "snap-1"


def test_run_overrides_apply_and_are_validated() -> None:
    spec = ReplaySpec.model_validate(_spec())
    run = spec.with_run_overrides(
        {
            "candidate": "pkg.cand:build",
            "quiesce_mode": "stop",
            "window_records": 12,
            "abs_threshold": 0.1,
            "keep_fork": True,
            "unknown": "ignored",
            "min_aligned": "",
        }
    )
    assert run.candidate_agent_factory == "pkg.cand:build" and run.quiesce_mode == "stop"
    assert run.window.records == 12 and run.compare.abs_threshold == 0.1 and run.keep_fork
    assert run.compare.min_aligned == spec.compare.min_aligned  # empty values keep the spec's
    with pytest.raises(SpecError, match="quiesce_mode"):
        spec.with_run_overrides({"quiesce_mode": "yolo"})


def test_the_spec_names_topics_by_the_one_rule() -> None:
    spec = ReplaySpec.model_validate(_spec())
    topics = {v: spec.action_state_topic("abc123", v) for v in spec.variants()}
    assert topics == {
        "baseline": "reviews-action-state-replay-review-triage-abc123-baseline",
        "baseline_2": "reviews-action-state-replay-review-triage-abc123-baseline_2",
        "candidate": "reviews-action-state-replay-review-triage-abc123-candidate",
    }
    op = IsolateActionStateOperator(
        task_id="isolate", production_topic=spec.production.action_state_topic, variants=spec.variants()
    )
    assert op.plan_topics("review-triage-abc123") == topics  # the operator's defaults are the same names


def test_replay_topic_names_are_always_kafka_legal_and_distinct() -> None:
    assert replay_topic_name("prod.as", "manual__2026-01-01T00:00:00+00:00", "candidate") == (
        "prod.as-replay-manual__2026-01-01T00-00-00-00-00-candidate"
    )
    long = ["x" * 240 + "-action-state", "manual__" + "r" * 250]
    names = {replay_topic_name(long[0], long[1], v) for v in ("baseline", "baseline_2", "candidate")}
    assert len(names) == 3 and all(is_legal_topic_name(n) and len(n) == MAX_TOPIC_NAME for n in names)
    assert not is_legal_topic_name("") and not is_legal_topic_name("a b") and not is_legal_topic_name("a" * 250)
    assert is_legal_topic_name("a" * 249)


def test_aa_replays_adds_baselines_between_baseline_2_and_the_candidate() -> None:
    spec = ReplaySpec.model_validate(_spec())
    assert spec.aa_replays == 1 and spec.extra_baselines() == []
    assert spec.variant_names() == variant_names() == ["baseline", "baseline_2", "candidate"]
    three = ReplaySpec.model_validate(_spec(aa_replays=3))
    assert three.variant_names() == ["baseline", "baseline_2", "baseline_3", "baseline_4", "candidate"]
    assert three.baselines() == ["baseline", "baseline_2", "baseline_3", "baseline_4"]
    assert three.extra_baselines() == ["baseline_3", "baseline_4"]
    # every baseline replays production's agent; without a candidate the spec replays the baselines only
    assert {three.agent_factory_for(v) for v in three.baselines()} == {three.production.agent_factory}
    assert three.model_copy(update={"candidate_agent_factory": None}).variants() == three.baselines()
    # it shapes the DAG: a run's params or conf never change it
    assert three.with_run_overrides({"aa_replays": 1, "keep_fork": True}).aa_replays == 3


@pytest.mark.parametrize("count", [0, 5, -1])
def test_aa_replays_out_of_range_is_refused_naming_the_field_and_the_fix(tmp_path: Path, count: int) -> None:
    with pytest.raises(ValidationError) as err:
        ReplaySpec.model_validate(_spec(aa_replays=count))
    assert f"aa_replays {count} is out of range" in str(err.value) and "Fix: 1 (one A/A pair, the default) to 4" in (
        str(err.value)
    )
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(_spec(aa_replays=count)))
    with pytest.raises(SpecError) as loaded:
        ReplaySpec.from_yaml(path)
    assert "aa_replays:" in str(loaded.value) and "Fix:" in str(loaded.value) and str(path) in str(loaded.value)
