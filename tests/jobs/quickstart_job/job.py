"""Job definitions of the Flink Agents quickstart's review analysis agent: production and a candidate.

``production`` is the quickstart's ``workflow_single_agent_example`` as a job definition: the
``ReviewAnalysisAgent`` over ``ProductReview`` records (JSON lines, keyed by product id), its chat model
connection ``"ollama_server"`` registered on the environment, as the quickstart does. Here that connection is
a deterministic stand-in (``stand_in.py``): Ollama is not reachable on these machines; on yours, register
the quickstart's own ``ollama_server_descriptor`` instead.

``candidate`` is the same agent with a prompt that asks for a 1-10 score instead of 1-5.
"""

from __future__ import annotations

import dataclasses

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.decorators import prompt
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.resource import ResourceType
from flink_agents.examples.quickstart.agents.custom_types_and_resources import (
    ProductReview,
    review_analysis_prompt,
    review_analysis_system_prompt_str,
)
from flink_agents.examples.quickstart.agents.review_analysis_agent import ReviewAnalysisAgent

from airflow_flink_replay.flink.agent_job import AgentJob, EnvResource

from .stand_in import stand_in_descriptor


def product_id(review: ProductReview) -> str:
    """The agent's key: the reviewed product (as the quickstart keys its stream)."""
    return review.id


production = AgentJob(
    agent=ReviewAnalysisAgent,
    key_selector=product_id,
    deserializer=ProductReview.model_validate_json,
    env_resources=[EnvResource("ollama_server", ResourceType.CHAT_MODEL_CONNECTION, stand_in_descriptor())],
)

#: The quickstart's prompt, asking for a satisfaction score from 1 to 10.
RESCALED_PROMPT = Prompt.from_messages(
    messages=[
        ChatMessage(role=MessageRole.SYSTEM, content=review_analysis_system_prompt_str.replace("(1-5)", "(1-10)")),
        *review_analysis_prompt.template[1:],  # the user message with the review, unchanged
    ],
)


class RescaledReviewAnalysisAgent(ReviewAnalysisAgent):
    """The quickstart agent with :data:`RESCALED_PROMPT`.

    Flink Agents builds an agent's plan from its class's own ``__dict__``: what a subclass inherits is not
    seen. So the subclass declares its new prompt and re-declares every other action and resource it keeps.
    """

    @prompt
    @staticmethod
    def review_analysis_prompt() -> Prompt:
        """The 1-10 prompt, under the name the chat model setup refers to."""
        return RESCALED_PROMPT

    notify_shipping_manager = ReviewAnalysisAgent.__dict__["notify_shipping_manager"]
    review_analysis_model = ReviewAnalysisAgent.__dict__["review_analysis_model"]
    process_input = ReviewAnalysisAgent.__dict__["process_input"]
    process_chat_response = ReviewAnalysisAgent.__dict__["process_chat_response"]


candidate = dataclasses.replace(production, agent=RescaledReviewAnalysisAgent)
