"""The order agent as production runs it (``"examples.order_agent.v1:job"``)."""

from __future__ import annotations

from airflow_flink_replay.flink.agent_job import AgentJob, FieldKey, json_object

from .agent import OrderAgent

job = AgentJob(agent=OrderAgent, key_selector=FieldKey("customer"), key_type="string", deserializer=json_object)
