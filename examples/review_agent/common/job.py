"""The review agent's job definition, shared by every version: how its input is read, keyed and stored.

Each version's ``job.py`` names its own agent class (``job = review_job(ReviewAgent)``); everything else —
the input (the review's JSON object as a dict), the key (the ``customer`` text, a Flink ``STRING`` key), the
output (the agent's dict as is) and the Mem0 memory resource ``review_memory`` built with the run's store
config — is the same, so a baseline and a candidate differ only in their agent.
"""

from __future__ import annotations

from typing import Any

from airflow_flink_replay.flink.agent_job import AgentJob, FieldKey, MemoryBinding, json_object, to_json_object

#: The memory resource every version's actions ask for (``ctx.get_resource("review_memory", VECTOR_STORE)``).
REVIEW_MEMORY = MemoryBinding(resource_name="review_memory", clazz="examples.review_agent.common.memory.ReviewMemory")


def review_job(agent: Any) -> AgentJob:
    """The job definition of one version's agent (an Agent class or instance)."""
    return AgentJob(
        agent=agent,
        key_selector=FieldKey("customer"),
        key_type="string",
        deserializer=json_object,
        output_serializer=to_json_object,
        memory=REVIEW_MEMORY,
    )
