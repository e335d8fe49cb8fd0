"""ReplaySpec's job definitions: ``production.agent_job`` / ``candidate_agent_job`` (``"module:attr"`` of an
AgentJob), the older factory fields beside them, and which agent each variant runs."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from airflow_flink_replay.core.replay_job_spec import ReplayJobSpec
from airflow_flink_replay.core.replay_spec import ReplaySpec, SpecError
from tests.unit.core.test_replay_spec import _spec

V1_JOB = "examples.review_agent.v1.job:job"
V2_JOB = "examples.review_agent.v2.job:job"
V1_FACTORY = "examples.review_agent.v1.agent:build_agent"


def _job_spec(**overrides: Any) -> dict[str, Any]:
    spec = _spec(candidate_agent_factory=None, candidate_agent_job=V2_JOB)
    prod = {k: v for k, v in spec["production"].items() if k != "agent_factory"}
    spec["production"] = {**prod, "agent_job": V1_JOB}
    spec.update(overrides)
    return spec


def test_each_variant_runs_a_job_definition() -> None:
    spec = ReplaySpec.model_validate(_job_spec())
    assert spec.variants() == ["baseline", "baseline_2", "candidate"]
    assert [spec.agent_job_for(v) for v in spec.variants()] == [V1_JOB, V1_JOB, V2_JOB]
    assert [spec.agent_factory_for(v) for v in spec.variants()] == [None, None, None]
    assert spec.production.agent_ref == V1_JOB and spec.candidate_ref() == V2_JOB


def test_production_names_exactly_one_agent() -> None:
    both = _job_spec()
    both["production"]["agent_factory"] = V1_FACTORY
    with pytest.raises(ValidationError, match="exactly one of agent_job"):
        ReplaySpec.model_validate(both)
    neither = _job_spec()
    del neither["production"]["agent_job"]
    with pytest.raises(ValidationError, match="exactly one of agent_job"):
        ReplaySpec.model_validate(neither)
    with pytest.raises(ValidationError, match="agent_job 'no colon' must look like"):
        ReplaySpec.model_validate(_job_spec(production={**_job_spec()["production"], "agent_job": "no colon"}))
    with pytest.raises(ValidationError, match="not both"):
        ReplaySpec.model_validate(_job_spec(candidate_agent_factory=V1_FACTORY))


def test_the_forms_mix_per_variant() -> None:
    spec = ReplaySpec.model_validate(_spec(candidate_agent_factory=None, candidate_agent_job=V2_JOB))
    assert (spec.agent_factory_for("baseline"), spec.agent_job_for("baseline")) == (V1_FACTORY, None)
    assert (spec.agent_factory_for("candidate"), spec.agent_job_for("candidate")) == (None, V2_JOB)
    none = ReplaySpec.model_validate(_job_spec(candidate_agent_job=None))
    assert none.variants() == ["baseline", "baseline_2"]
    with pytest.raises(SpecError, match="needs candidate_agent_job"):
        none.agent_job_for("candidate")


def test_the_run_candidate_takes_the_specs_form() -> None:
    jobs = ReplaySpec.model_validate(_job_spec(candidate_agent_job=None))
    assert jobs.with_run_overrides({"candidate": "pkg.jobs:cand"}).candidate_agent_job == "pkg.jobs:cand"
    assert jobs.with_candidate(None).candidate_agent_job == V1_JOB  # A/A: production's own definition
    factories = ReplaySpec.model_validate(_spec())
    run = factories.with_run_overrides({"candidate": "pkg.cand:build"})
    assert (run.candidate_agent_factory, run.candidate_agent_job) == ("pkg.cand:build", None)
    explicit = factories.with_run_overrides({"candidate_agent_job": "pkg.jobs:cand"})
    assert (explicit.candidate_agent_job, explicit.candidate_agent_factory) == ("pkg.jobs:cand", None)
    assert factories.with_candidate(None).candidate_agent_factory == V1_FACTORY


def test_the_replay_job_spec_carries_the_job_reference() -> None:
    base = {
        "variant": "candidate",
        "job_identifier": "replay-1",
        "action_state_topic": "as-replay-1",
        "output_dir": "/tmp/o",
        "audit_dir": "/tmp/a",
        "kafka_bootstrap": "127.0.0.1:9092",
        "capture_topic": "cap",
        "start_offsets": {0: 0},
        "end_offsets": {0: 1},
    }
    spec = ReplayJobSpec.model_validate({**base, "agent_job": V2_JOB})
    assert ReplayJobSpec.from_argv(spec.to_argv()).agent_job == V2_JOB and spec.agent_ref == V2_JOB
    with pytest.raises(ValidationError, match="exactly one of agent_job"):
        ReplayJobSpec.model_validate(base)
    with pytest.raises(ValidationError, match="exactly one of agent_job"):
        ReplayJobSpec.model_validate({**base, "agent_job": V2_JOB, "agent_factory": V1_FACTORY})
    with pytest.raises(ValidationError, match="agent_job 'x' must look like"):
        ReplayJobSpec.model_validate({**base, "agent_job": "x"})
