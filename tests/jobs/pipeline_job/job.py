"""Job definitions of the Flink Agents quickstart's multi-agent workflow: production and its variants.

``production`` is the quickstart's ``workflow_multiple_agent_example`` as a pipeline definition: the
``ReviewAnalysisAgent`` over ``ProductReview`` records (JSON lines ``{"id", "review", "ts"}``, ``ts`` in seconds;
keyed by product id), a keyed 4-hour event-time window aggregating its results per product, and the
``ProductSuggestionAgent`` on each aggregate. The window function is the quickstart's aggregate (a score
histogram and every unsatisfied reason) written here as :class:`ScoreHistogram`: the quickstart's module imports
Flink Agents' config options at its top, which starts PyFlink's Java gateway where Flink's Python worker imports
it (the agent check refuses that). Both agents talk to the chat model connection ``"ollama_server"``, registered
once on the environment as the quickstart does; here it is a deterministic stand-in (``stand_in.py``) answering
both prompts: Ollama is not reachable on these machines; on yours, register the quickstart's own
``ollama_server_descriptor`` instead. Event time is the record's ``ts`` field (the quickstart's table reads it
the same way), so the windows replay; the quickstart itself windows by processing time. The analysis stage's
outputs are compared too (``compare_stages``): the window hides a changed score that moves no histogram bucket.

The variants, each production with one change:

- ``candidate_suggestion``: the suggestion prompt asks for two suggestions instead of three;
- ``candidate_analysis``: the analysis prompt asks for a 1-10 score instead of 1-5 (the single-agent
  quickstart's candidate agent, :class:`tests.jobs.quickstart_job.job.RescaledReviewAnalysisAgent`);
- ``processing_time``: the window groups by processing time (not replayable: the agent check warns);
- ``dropped_window``: the window has another uid, so production's window state (its open windows) has no
  operator to restore into (the agent check refuses it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flink_agents.api.decorators import prompt
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.resource import ResourceType
from flink_agents.examples.quickstart.agents.custom_types_and_resources import (
    ProductReview,
    ProductReviewAnalysisRes,
    ProductReviewSummary,
    product_suggestion_prompt_str,
)
from flink_agents.examples.quickstart.agents.product_suggestion_agent import ProductSuggestionAgent
from flink_agents.examples.quickstart.agents.review_analysis_agent import ReviewAnalysisAgent
from pyflink.common import Time
from pyflink.datastream import ProcessWindowFunction
from pyflink.datastream.window import TumblingEventTimeWindows, TumblingProcessingTimeWindows

from airflow_flink_replay.core.manifest import EventTime
from airflow_flink_replay.flink.agent_job import AgentJob, EnvResource
from airflow_flink_replay.flink.agent_pipeline import AgentPipeline, AgentStage, WindowStage
from tests.jobs.quickstart_job.job import RescaledReviewAnalysisAgent

from .stand_in import stand_in_descriptor


def review_product_id(review: ProductReview) -> str:
    """The analysis agent's key (and the input's): the reviewed product, as the quickstart keys its stream."""
    return review.id


def analysis_product_id(result: ProductReviewAnalysisRes) -> str:
    """The window's key: the product an analysis result is about."""
    return result.id


class ScoreHistogram(ProcessWindowFunction):
    """The quickstart's window aggregate: the share of each score 1-5 among a product's analysed reviews in the
    window, as ``"<percent>%"`` texts, and every unsatisfied reason in the order the reviews came. Scores outside
    1-5 are not counted (a window without one gives 0.0% everywhere)."""

    def process(self, key: str, context: Any, elements: Any) -> list[ProductReviewSummary]:
        """One summary for the product ``key``'s window."""
        counts, reasons = [0] * 5, []
        for result in elements:
            if 1 <= result.score <= 5:
                counts[result.score - 1] += 1
            reasons += result.reasons
        total = sum(counts) or 1
        hist = [f"{round(c / total * 100, 1)}%" for c in counts]
        return [ProductReviewSummary(id=key, score_hist=hist, unsatisfied_reasons=reasons)]


def summary_product_id(summary: ProductReviewSummary) -> str:
    """The suggestion agent's key: the product a window's summary is about."""
    return summary.id


production = AgentPipeline(
    stages=[
        AgentStage("analysis", AgentJob(agent=ReviewAnalysisAgent, key_selector=review_product_id)),
        WindowStage(
            "per-product",
            key_selector=analysis_product_id,
            assigner=TumblingEventTimeWindows.of(Time.hours(4)),
            function=ScoreHistogram,
            uid="afr-window-per-product",
        ),
        AgentStage(
            "suggestion",
            AgentJob(agent=ProductSuggestionAgent, key_selector=summary_product_id),
            uid="afr-agent-suggestion",
        ),
    ],
    deserializer=ProductReview.model_validate_json,
    env_resources=[EnvResource("ollama_server", ResourceType.CHAT_MODEL_CONNECTION, stand_in_descriptor())],
    event_time=EventTime(source="field", field="$.ts", unit="s"),
    watermark="monotonous",
    compare_stages=["analysis"],
)


def stage_named(pipeline: AgentPipeline, name: str) -> Any:
    """The stage of ``pipeline`` called ``name``."""
    found = [s for s in pipeline.stages if s.name == name]
    if not found:
        raise ValueError(f"no stage {name!r} in the pipeline")
    return found[0]


def with_stage(pipeline: AgentPipeline, name: str, **changes: Any) -> AgentPipeline:
    """``pipeline`` with its stage ``name`` changed (``dataclasses.replace``), every other stage as it is."""
    stage_named(pipeline, name)
    stages = [dataclasses.replace(s, **changes) if s.name == name else s for s in pipeline.stages]
    return dataclasses.replace(pipeline, stages=stages)


def _two_suggestions(text: str) -> str:
    """The quickstart's suggestion prompt asking for two suggestions (its instruction and its example)."""
    third_example = ',\n                "suggestion3"'
    for old, new in (("generate three actionable", "generate two actionable"), (third_example, "")):
        if old not in text:
            raise RuntimeError(f"the quickstart's suggestion prompt no longer holds {old!r} (flink-agents changed?)")
        text = text.replace(old, new)
    return text


#: The quickstart's suggestion prompt, asking for two suggestions instead of three.
TWO_SUGGESTIONS_PROMPT = Prompt.from_text(_two_suggestions(product_suggestion_prompt_str))


class TwoSuggestionsAgent(ProductSuggestionAgent):
    """The quickstart's suggestion agent with :data:`TWO_SUGGESTIONS_PROMPT`.

    Flink Agents builds an agent's plan from its class's own ``__dict__``: what a subclass inherits is not
    seen. So the subclass declares its new prompt and re-declares every other action and resource it keeps.
    """

    @prompt
    @staticmethod
    def generate_suggestion_prompt() -> Prompt:
        """The two-suggestion prompt, under the name the chat model setup refers to."""
        return TWO_SUGGESTIONS_PROMPT

    generate_suggestion_model = ProductSuggestionAgent.__dict__["generate_suggestion_model"]
    process_input = ProductSuggestionAgent.__dict__["process_input"]
    process_chat_response = ProductSuggestionAgent.__dict__["process_chat_response"]


candidate_suggestion = with_stage(
    production,
    "suggestion",
    job=dataclasses.replace(stage_named(production, "suggestion").job, agent=TwoSuggestionsAgent),
)

candidate_analysis = with_stage(
    production,
    "analysis",
    job=dataclasses.replace(stage_named(production, "analysis").job, agent=RescaledReviewAnalysisAgent),
)

processing_time = with_stage(production, "per-product", assigner=TumblingProcessingTimeWindows.of(Time.hours(4)))

dropped_window = with_stage(production, "per-product", uid="afr-window-per-product-v2")
