"""Job definitions of the Flink Agents built-in ``ReActAgent``, as the wheel's ``react_agent_example`` builds it:
production and a candidate.

Labelled before it was first run: an agent shaped unlike the others this project tests.

- The agent is an *instance* of the framework's class, configured by arguments: a chat model setup descriptor
  naming the connection ``"ollama_server"`` and the tool ``notify_shipping_manager``, a prompt and an output
  schema. Its first action is added to the instance (``add_action``), not declared on a class; its prompts are
  resources the framework names (``_default_user_prompt``, ``_default_schema_prompt``).
- Its output is a pydantic model (``ProductReviewAnalysisRes``), parsed from the model's JSON answer.
- The connection and the tool are registered on the environment, as the example does.

``candidate`` is the same agent with a system prompt that asks for a 1-10 score instead of 1-5: only the prompt
resource changes. The chat model and the key selector are the quickstart's (``tests/jobs/quickstart_job``): the
deterministic stand-in reads the scale from every system message (``ReActAgent`` puts its schema instruction
before the prompt's own), and products key the stream.
"""

from __future__ import annotations

import dataclasses

from flink_agents.api.agents.react_agent import ReActAgent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.api.tools.tool import Tool
from flink_agents.examples.quickstart.agents.custom_types_and_resources import (
    ProductReview,
    ProductReviewAnalysisRes,
    notify_shipping_manager,
    review_analysis_react_prompt,
    review_analysis_system_prompt_str,
)

from airflow_flink_replay.flink.agent_job import AgentJob, EnvResource
from tests.jobs.quickstart_job.job import product_id
from tests.jobs.quickstart_job.stand_in import stand_in_descriptor

#: The example's prompt with the 1-10 scale.
RESCALED_PROMPT = Prompt.from_messages(
    messages=[
        ChatMessage(role=MessageRole.SYSTEM, content=review_analysis_system_prompt_str.replace("(1-5)", "(1-10)")),
        *review_analysis_react_prompt.template[1:],  # the user message with the review, unchanged
    ],
)


def _react_agent(prompt: Prompt) -> ReActAgent:
    return ReActAgent(
        chat_model=ResourceDescriptor(clazz=ResourceName.ChatModel.OLLAMA_SETUP, connection="ollama_server",
                                      model="qwen3:8b", tools=["notify_shipping_manager"]),
        prompt=prompt,
        output_schema=ProductReviewAnalysisRes,
    )


def production_agent() -> ReActAgent:
    """The example's agent."""
    return _react_agent(review_analysis_react_prompt)


def rescaled_agent() -> ReActAgent:
    """The example's agent asking for a 1-10 score."""
    return _react_agent(RESCALED_PROMPT)


production = AgentJob(
    agent=production_agent,
    key_selector=product_id,
    deserializer=ProductReview.model_validate_json,
    env_resources=[
        EnvResource("ollama_server", ResourceType.CHAT_MODEL_CONNECTION, stand_in_descriptor()),
        EnvResource("notify_shipping_manager", ResourceType.TOOL, Tool.from_callable(notify_shipping_manager)),
    ],
)
candidate = dataclasses.replace(production, agent=rescaled_agent)
