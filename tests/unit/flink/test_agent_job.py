"""AgentJob, the job definition: its parts, the older factory form adapted to it (and refused with the field
and the fix when it cannot be called that way), loading ``"module:attr"`` references.

Runs without Flink Agents (the Airflow venv): an "agent" here is any non-callable object, and an "Agent
class" a class whose bases include one named ``Agent`` — what :mod:`airflow_flink_replay.flink.agent_job`
falls back to when Flink Agents is not installed. Building real plans is covered on the Flink side
(``tests/integration/test_flink_side_contract.py``).
"""

from __future__ import annotations

import importlib
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.flink.agent_build import load_job_definition
from airflow_flink_replay.flink.agent_job import (
    AgentJob,
    FieldKey,
    MemoryBinding,
    check_factory,
    json_object,
    load_agent_job,
    to_json_object,
    utf8_text,
)
from airflow_flink_replay.flink.capture import key_bytes


class Agent:
    """Stands for flink_agents' Agent base class (not installed here)."""


class ReviewAnalysisAgent(Agent):
    """A plain agent class, as the Flink Agents quickstart has."""


class Review:
    def __init__(self, id: int) -> None:
        self.id = id


def test_field_key_keeps_the_key_typed() -> None:
    assert FieldKey("id")({"id": 7}) == 7 and isinstance(FieldKey("id")({"id": 7}), int)
    assert FieldKey("id")(Review(8)) == 8, "an attribute of a typed input (a pydantic model)"
    assert FieldKey("id", as_text=True)({"id": 7}) == "7"
    assert key_bytes(7) == b"7" and key_bytes("c-1") == b"c-1" and key_bytes(b"\x00k") == b"\x00k"
    assert key_bytes(("a", 1)) == b'["a", 1]'


def test_default_serializers() -> None:
    raw = b'{ "b": 1,  "a": "\xc3\xa9" }'
    assert json_object(raw) == {"b": 1, "a": "é"}
    assert utf8_text(raw) == raw.decode("utf-8"), "the text as received, not re-encoded"
    assert to_json_object({"x": 1}) == {"x": 1}
    assert to_json_object('{"x": 1}') == {"x": 1}, "an agent emitting JSON text"
    assert to_json_object(3) == {"output": 3} and to_json_object("plain") == {"output": "plain"}


def test_a_definition_refuses_what_flink_could_not_run() -> None:
    with pytest.raises(ValueError, match="key_selector must be a callable"):
        AgentJob(agent=object(), key_selector="id")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="key_type 'text' must be None"):
        AgentJob(agent=object(), key_selector=FieldKey("id"), key_type="text")
    with pytest.raises(ValueError, match="bad_records"):
        AgentJob(agent=object(), key_selector=FieldKey("id"), bad_records="skip")  # type: ignore[arg-type]
    agent = Review(3)  # stands for an agent instance (not callable)
    built = AgentJob(agent=agent, key_selector=FieldKey("id")).build_agent()
    assert type(built) is Review and built.id == 3 and built is not agent, "a copy: building a plan changes it"
    made: list[object] = []
    job = AgentJob(agent=lambda: made.append(object()) or made[-1], key_selector=FieldKey("id"))
    assert job.build_agent() is made[0] and job.build_agent() is made[1], "a factory gives a fresh agent per build"


def test_the_factory_form_is_adapted() -> None:
    calls: list[dict[str, Any]] = []

    def build_agent(mem0_config: dict[str, Any] | None = None, **options: Any) -> object:
        calls.append({"mem0_config": mem0_config, **options})
        return object()

    job = AgentJob.from_factory(build_agent, key_field="customer", mem0_config={"m": 1}, agent_options={"o": 2})
    job.build_agent()
    assert calls == [{"mem0_config": {"m": 1}, "o": 2}]
    raw = b'{"customer": 12, "id": "r1"}'
    assert job.deserializer(raw) == raw.decode(), "the factory form's agent gets the JSON text as received"
    assert job.key_selector(job.deserializer(raw)) == "12" and job.key_type == "string"


def test_an_agent_class_as_factory_is_refused_naming_the_field_and_the_fix() -> None:
    with pytest.raises(ValueError) as err:
        AgentJob.from_factory(ReviewAnalysisAgent, key_field="id", ref="quick:ReviewAnalysisAgent")
    text = str(err.value)
    assert "agent_factory 'quick:ReviewAnalysisAgent'" in text and "Agent class ReviewAnalysisAgent" in text
    assert "mem0_config" in text and "AgentJob(agent=ReviewAnalysisAgent" in text and "production.agent_job" in text

    def no_options() -> object:
        return object()

    with pytest.raises(ValueError, match=r"--agent-factory 'm:f' .*takes no mem0_config argument.*Fix"):
        check_factory(no_options, ref="m:f", field_name="--agent-factory")


@pytest.fixture
def package(tmp_path: Path) -> Iterator[str]:
    """A fresh package with a job definition (relative import of its agent); sys.path/modules restored."""
    name = f"afr_test_job_{uuid.uuid4().hex[:8]}"
    pkg = tmp_path / "src" / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "agent.py").write_text("PROMPT = 'v1'\n\nclass MyAgent:\n    prompt = PROMPT\n")
    (pkg / "job.py").write_text(
        "from airflow_flink_replay.flink.agent_job import AgentJob, FieldKey\n"
        "from .agent import MyAgent\n\n"
        "job = AgentJob(agent=MyAgent(), key_selector=FieldKey('id'))\n\n"
        "def make_job():\n    return job\n\n"
        "def build_agent(mem0_config=None):\n    return MyAgent()\n\n"
        "not_a_job = 3\n\n"
        "def needs(x):\n    return x\n"
    )
    path, modules = list(sys.path), set(sys.modules)
    sys.path.insert(0, str(tmp_path / "src"))
    importlib.invalidate_caches()
    yield name
    sys.path[:] = path
    for mod in set(sys.modules) - modules:
        del sys.modules[mod]
    importlib.invalidate_caches()


def test_load_agent_job_resolves_and_explains(package: str) -> None:
    assert isinstance(load_agent_job(f"{package}.job:job"), AgentJob)
    assert load_agent_job(f"{package}.job:make_job") is load_agent_job(f"{package}.job:job")
    with pytest.raises(ValueError, match="must look like"):
        load_agent_job(f"{package}.job")
    with pytest.raises(ValueError, match="has no attribute 'missing'"):
        load_agent_job(f"{package}.job:missing")
    with pytest.raises(ValueError, match=r"is a int, not an AgentJob.*Fix: define"):
        load_agent_job(f"{package}.job:not_a_job")
    with pytest.raises(ValueError, match="cannot be called without arguments"):
        load_agent_job(f"{package}.job:needs")


def test_an_isolated_definition_runs_its_own_copy(package: str, tmp_path: Path) -> None:
    built = load_job_definition(f"{package}.job:job", isolate=True, build_root=tmp_path / "builds")
    assert built.module.startswith("afr_build_") and built.module.endswith(".job")
    agent = built.job.build_agent()
    assert type(agent).__module__ == built.module.replace(".job", ".agent"), "the agent comes from the copy too"
    assert load_job_definition(f"{package}.job:job", isolate=False).module == f"{package}.job"


def test_memory_binding_defaults() -> None:
    binding = MemoryBinding(resource_name="review_memory", clazz="pkg.memory.ReviewMemory")
    assert binding.resource_type == "vector_store" and dict(binding.arguments) == {}
