"""The review agent's job definition, shared by every version: how its input is read, keyed and stored.

Each version's ``job.py`` names its own agent class (``job = review_job(ReviewAgent)``); everything else —
the input (the review's JSON object as a dict), the key (the ``customer`` text, a Flink ``STRING`` key), the
output (the agent's dict as is) and the Mem0 memory resource ``review_memory`` built with the run's store
config — is the same, so a baseline and a candidate differ only in their agent.

``noisy_job`` in each version's ``job.py`` is the same job with the stand-in chat model sampling like an LLM
(:data:`NOISY_MODEL`): borderline labels flip now and then, scores jitter, summaries are paraphrased, so two
runs of one agent differ and the comparison's noise floor (baseline vs baseline-2) is exercised.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_flink_replay.flink.agent_job import AgentJob, FieldKey, MemoryBinding, json_object, to_json_object

#: The memory resource every version's actions ask for (``ctx.get_resource("review_memory", VECTOR_STORE)``).
REVIEW_MEMORY = MemoryBinding(resource_name="review_memory", clazz="examples.review_agent.common.memory.ReviewMemory")


#: Agent config that makes the stand-in chat model sample like an LLM at temperature 0.7 (seed 7); Flink Agents
#: hands config keys prefixed with a resource's class name to that resource.
NOISY_MODEL: dict[str, Any] = {"StandInReviewModel.temperature": 0.7, "StandInReviewModel.seed": 7}


def review_job(agent: Any, config: Mapping[str, Any] | None = None) -> AgentJob:
    """The job definition of one version's agent (an Agent class or instance), with agent ``config``."""
    return AgentJob(
        agent=agent,
        key_selector=FieldKey("customer"),
        key_type="string",
        deserializer=json_object,
        output_serializer=to_json_object,
        memory=REVIEW_MEMORY,
        config=dict(config or {}),
    )
