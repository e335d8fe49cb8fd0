"""The agent pin: the vertex id Flink derives from a uid, the pin's own checks, and pinning the agent operator of a
real Flink Agents job graph (uid, uid hash, max parallelism) — built in the Flink-side Python, never submitted.

(Restoring production's savepoint through the pin: tests/integration/test_flink_side_uid_hash.py.)
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.flink.agent_pin import AgentPin, uid_to_vertex_id
from tests.flink_python import flink_side_facts

PLANS = Path(__file__).resolve().parents[2] / "fixtures" / "plans"


def test_a_uid_s_vertex_id_is_the_one_flink_gave_production_s_pinned_agent() -> None:
    """Recorded from the real cluster: production's agent, pinned with uid ``afr-agent``."""
    details = json.loads((PLANS / "agent_prod_job_details.json").read_text())
    [agent] = [v for v in details["vertices"] if v["name"].startswith("action-execute-operator")]
    assert uid_to_vertex_id("afr-agent") == agent["id"] == "382ed45d504034b09088257b90c60d72"
    assert uid_to_vertex_id("afr-agent-2") != agent["id"]


def test_a_pin_takes_a_uid_or_a_uid_hash_never_both() -> None:
    with pytest.raises(ValueError, match="AgentPin: give uid or uid_hash, not both"):
        AgentPin(uid="afr-agent", uid_hash="a" * 32)
    assert AgentPin(uid="", uid_hash="a" * 32).uid_hash == "a" * 32, "an empty uid is no uid"


@pytest.mark.parametrize("bad", ["a" * 31, "a" * 33, "g" * 32, "", "382ed45d-504034b09088257b90c60d7"])
def test_a_uid_hash_must_be_a_32_hex_vertex_id(bad: str) -> None:
    with pytest.raises(ValueError) as err:
        AgentPin(uid_hash=bad)
    assert str(err.value) == f"AgentPin.uid_hash {bad!r} must be a 32-hex JobVertexID"


def test_an_upper_case_vertex_id_is_accepted() -> None:
    assert AgentPin(uid_hash="382ED45D504034B09088257B90C60D72").uid_hash == "382ED45D504034B09088257B90C60D72"


def test_a_pin_is_empty_only_when_it_pins_nothing() -> None:
    assert AgentPin().is_empty and AgentPin(uid="").is_empty
    assert AgentPin(max_parallelism=0).is_empty, "0 is no max parallelism"
    assert not AgentPin(uid="afr-agent").is_empty
    assert not AgentPin(uid_hash="a" * 32).is_empty
    assert not AgentPin(max_parallelism=128).is_empty


#: Job graphs of a Flink Agents job (the counter agent) pinned each way, as PyFlink builds them locally.
SCRIPT = textwrap.dedent(
    """
    import json
    from pyflink.common import Types
    from flink_agents.api.execution_environment import AgentsExecutionEnvironment
    from airflow_flink_replay.flink.agent_pin import (
        AgentPin, find_agent_transformation, find_transformation, pin_agent_operator, uid_to_vertex_id)
    from airflow_flink_replay.flink.environment import job_environment
    from tests.jobs.counter_agent.job import CounterAgent, parse_review, review_id

    def agent_output(env):
        raw = env.from_collection(['{"id": "r1", "review": "fine", "review_score": 4}'], type_info=Types.STRING())
        keyed = raw.map(lambda s: parse_review(s.encode())).name("parse").key_by(review_id)
        agents_env = AgentsExecutionEnvironment.get_execution_environment(env)
        out = agents_env.from_datastream(input=keyed).apply(CounterAgent()).to_datastream()
        return out.map(str, output_type=Types.STRING()).name("after-agent")

    def agent_vertex(env):
        graph = env._generate_stream_graph(clear_transformations=True, job_name="pin").getJobGraph()
        [vertex] = [v for v in graph.getVerticesAsArray() if v.getName().startswith("action-execute-operator")]
        state_ids = [p.getUserDefinedOperatorID().orElse(None) for p in vertex.getOperatorIDs()]
        return {"id": vertex.getID().toString(), "max_parallelism": vertex.getMaxParallelism(),
                "state_ids": [None if i is None else i.toString() for i in state_ids]}

    out = {}
    for case, pin in (("uid", AgentPin(uid="reviews-agent-\u00fc", max_parallelism=48)),
                      ("uid_hash", AgentPin(uid_hash="ABCDEF0123456789ABCDEF0123456789")),
                      ("empty", AgentPin()), ("none", None)):
        env = job_environment()
        stream = agent_output(env)
        if pin is not None:
            pinned = pin_agent_operator(stream, pin)
            out[f"{case}_returned"] = pinned.getName()
        out[case] = agent_vertex(env)
    out["derived"] = uid_to_vertex_id("reviews-agent-\u00fc")

    env = job_environment()
    plain = env.from_collection([1, 2], type_info=Types.INT()).name("numbers")
    left, right = plain.map(lambda x: x + 1).name("left"), plain.map(lambda x: x * 2).name("right")
    joined = left.union(right).map(lambda x: x).name("joined")
    start = joined._j_data_stream.getTransformation()
    out["found"] = {name: (found.getName() if (found := find_transformation(start, name)) else None)
                    for name in ("joined", "left", "right", "numbers", "action-execute-operator")}
    try:
        find_agent_transformation(joined)
    except RuntimeError as exc:
        out["no_agent"] = str(exc)
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def graphs() -> dict[str, Any]:
    return flink_side_facts(SCRIPT)


def test_a_uid_gives_the_agent_s_vertex_the_id_flink_derives_from_it(graphs: dict[str, Any]) -> None:
    assert graphs["uid"]["id"] == graphs["derived"] == uid_to_vertex_id("reviews-agent-ü")
    assert graphs["uid_returned"] == "action-execute-operator", "the agent's own transformation, found upstream"


def test_a_uid_hash_is_the_agent_s_state_id_the_vertex_keeps_a_new_one(graphs: dict[str, Any]) -> None:
    vertex = graphs["uid_hash"]
    assert "abcdef0123456789abcdef0123456789" in vertex["state_ids"], "lower-cased, as Flink's ids are"
    assert vertex["id"] != "abcdef0123456789abcdef0123456789"


def test_max_parallelism_fixes_the_agent_s_key_groups(graphs: dict[str, Any]) -> None:
    assert graphs["uid"]["max_parallelism"] == 48
    assert graphs["none"]["max_parallelism"] == -1, "unpinned: Flink derives it"


def test_an_empty_pin_leaves_the_agent_as_flink_builds_it(graphs: dict[str, Any]) -> None:
    assert graphs["empty"] == graphs["none"]
    assert graphs["none"]["state_ids"] == [None] * len(graphs["none"]["state_ids"])
    assert "empty_returned" in graphs, "an empty pin still finds the agent"


def test_every_input_is_searched_and_a_missing_name_is_none(graphs: dict[str, Any]) -> None:
    assert graphs["found"] == {"joined": "joined", "left": "left", "right": "right", "numbers": "numbers",
                               "action-execute-operator": None}  # fmt: skip


def test_a_stream_without_the_agent_is_refused_naming_the_operator_and_the_fix(graphs: dict[str, Any]) -> None:
    assert graphs["no_agent"] == (
        "no transformation named 'action-execute-operator' upstream of the given stream; pass the stream "
        "returned by the agent builder's to_datastream()"
    )
