"""The quickstart's multi-agent workflow as pipeline definitions (``tests/jobs/pipeline_job``): what each definition
declares, and what its two agents answer in Flink Agents' local runner with the deterministic stand-in.

Everything runs in the Flink-side Python (the definitions import PyFlink and Flink Agents), in one script: the
definitions are imported and read; the wheel's first reviews go through both analysis agents in the local runner
(no Flink environment: no JVM job, no cluster); production's results are grouped into the 4-hour event-time windows
by hand and aggregated with the definition's ``ScoreHistogram`` (checked against the wheel's own
``AggregateScoreDistributionAndDislikeReasons``, which the definition cannot import: see its docstring); the
summaries go through both suggestion agents. (The pipeline running in Flink: tests/integration.)
"""

from __future__ import annotations

import textwrap
from collections import Counter
from typing import Any

import pytest

from tests.flink_python import flink_side_facts

REVIEWS = 24
#: what the stand-in pads its suggestions with (tests/jobs/pipeline_job/stand_in.py: GENERIC)
GENERIC = (
    "Survey recent buyers for further feedback",
    "Highlight the most praised features in the product description",
    "Monitor new reviews for emerging issues",
)

SCRIPT = textwrap.dedent(
    """
    import collections, json, sys
    import flink_agents.examples.quickstart as quickstart
    from flink_agents.api.execution_environment import AgentsExecutionEnvironment
    from flink_agents.examples.quickstart.workflow_multiple_agent_example import (
        AggregateScoreDistributionAndDislikeReasons,
    )
    from tests.jobs.pipeline_job import job as definitions
    from tests.jobs.pipeline_job import stand_in

    NAMES = ("production", "candidate_suggestion", "candidate_analysis", "processing_time", "dropped_window")
    out = {"definitions": {}}
    for name in NAMES:
        pipeline = getattr(definitions, name)
        out["definitions"][name] = {
            "stages": [[s.name, s.kind, s.uid, s.operator_uid()] for s in pipeline.stages],
            "compare": list(pipeline.compare_stages),
            "event_time": [s.is_event_time() for s in pipeline.stages if s.kind == "window"],
            "agents": [s.job.agent.__qualname__ for s in pipeline.agent_stages()],
            "selectors": [f"{s.key_selector.__module__}:{s.key_selector.__qualname__}" if s.kind == "window"
                          else f"{s.job.key_selector.__module__}:{s.job.key_selector.__qualname__}"
                          for s in pipeline.stages],
            "resources": [[r.name, f"{r.descriptor.clazz.__module__}.{r.descriptor.clazz.__qualname__}"]
                          for r in pipeline.shared_resources()],
            "event_time_spec": pipeline.event_time.model_dump(), "watermark": pipeline.watermark,
        }

    seen = []  # what the connection's chat() receives for the suggestion prompt
    answer = stand_in.SuggestingStandInChatModelConnection.chat
    def recording_chat(self, messages, tools=None, **kwargs):
        reply = answer(self, messages, tools, **kwargs)
        if "suggestion_list" in reply.content:
            seen.append({"messages": [[m.role.value, m.content] for m in messages], "reply": reply.content})
        return reply
    stand_in.SuggestingStandInChatModelConnection.chat = recording_chat

    def run(pipeline, stage_name, values):
        [stage] = [s for s in pipeline.agent_stages() if s.name == stage_name]
        job = pipeline.stage_job(stage)
        env = AgentsExecutionEnvironment.get_execution_environment()
        pipeline.register_env_resources(env)
        records = [{"key": job.key_selector(v), "value": v} for v in values]
        results = env.from_list(records).apply(job.build_agent()).to_list()
        env.execute()
        return [next(iter(r.values())) for r in results]

    path = f"{quickstart.__path__[0]}/resources/product_review.txt"
    lines = open(path, encoding="utf-8").read().splitlines()[:int(sys.argv[1])]
    production = definitions.production
    reviews = [production.deserializer(line.encode()) for line in lines]
    out["input_keys"] = [production.input_key_selector(r) for r in reviews]
    analysis = {name: run(getattr(definitions, name), "analysis", reviews)
                for name in ("production", "candidate_analysis")}
    out["analysis"] = {name: [o.model_dump() for o in results] for name, results in analysis.items()}

    def summaries(results):  # the 4-hour tumbling event-time windows (aligned to the epoch), by hand
        windows = collections.defaultdict(list)
        for line, result in zip(lines, results, strict=True):
            windows[(result.id, json.loads(line)["ts"] // (4 * 3600))].append(result)
        out, wheel = [], []
        for (key, window), elements in windows.items():
            out += definitions.ScoreHistogram().process(key, None, elements)
            try:
                wheel += AggregateScoreDistributionAndDislikeReasons().process(key, None, elements)
            except ZeroDivisionError:  # the wheel's divides by the count of scores 1-5
                wheel.append(None)
        return out, wheel

    summary_list, wheel = summaries(analysis["production"])
    out["summaries"] = [s.model_dump() for s in summary_list]
    out["wheel_summaries"] = [s and s.model_dump() for s in wheel]
    cand_list, cand_wheel = summaries(analysis["candidate_analysis"])
    out["candidate_summaries"] = [s.model_dump() for s in cand_list]
    out["candidate_wheel_summaries"] = [s and s.model_dump() for s in cand_wheel]
    out["suggestions"] = {name: [o.model_dump() for o in run(getattr(definitions, name), "suggestion", summary_list)]
                          for name in ("production", "candidate_suggestion")}
    out["seen"] = seen

    from flink_agents.examples.quickstart.agents.custom_types_and_resources import product_suggestion_prompt
    def direct(prompt, reasons):  # the stand-in's answer to the prompt as the chat model setup formats it
        summary = f'\\n"id": P1,\\n"score_histogram": [],\\n"unsatisfied_reasons": {reasons!r}\\n'
        [message] = prompt.format_messages(input=summary)
        return stand_in.suggest(message.content)
    reasons = ["wet", "late", "damaged", "damaged", "cheap", "late", "damaged"]
    out["direct"] = {"three": direct(product_suggestion_prompt, reasons),
                     "two": direct(definitions.TWO_SUGGESTIONS_PROMPT, reasons),
                     "none": direct(product_suggestion_prompt, [])}
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def facts() -> dict[str, Any]:
    return flink_side_facts(SCRIPT, str(REVIEWS))


def test_every_definition_is_the_quickstart_s_three_stages_pinned(facts: dict[str, Any]) -> None:
    defs = facts["definitions"]
    assert set(defs) == {"production", "candidate_suggestion", "candidate_analysis", "processing_time",
                         "dropped_window"}  # fmt: skip
    prod = defs["production"]
    assert prod["stages"] == [
        ["analysis", "agent", None, "afr-agent-analysis"],  # the first agent takes the agent pin
        ["per-product", "window", "afr-window-per-product", "afr-window-per-product"],
        ["suggestion", "agent", "afr-agent-suggestion", "afr-agent-suggestion"],
    ]
    assert prod["agents"] == ["ReviewAnalysisAgent", "ProductSuggestionAgent"]
    module = "tests.jobs.pipeline_job.job"
    assert prod["selectors"] == [f"{module}:review_product_id", f"{module}:analysis_product_id",
                                 f"{module}:summary_product_id"]  # fmt: skip
    assert prod["resources"] == [
        ["ollama_server", "tests.jobs.pipeline_job.stand_in.SuggestingStandInChatModelConnection"]
    ]
    assert prod["event_time_spec"] == {"source": "field", "field": "$.ts", "unit": "s"}
    assert prod["watermark"] == "monotonous"
    assert all(d["compare"] == ["analysis"] for d in defs.values())


def test_each_variant_changes_one_thing_of_production(facts: dict[str, Any]) -> None:
    defs = facts["definitions"]
    prod = defs["production"]
    assert defs["candidate_suggestion"]["agents"] == ["ReviewAnalysisAgent", "TwoSuggestionsAgent"]
    assert defs["candidate_analysis"]["agents"] == ["RescaledReviewAnalysisAgent", "ProductSuggestionAgent"]
    assert prod["event_time"] == [True] and defs["processing_time"]["event_time"] == [False]
    assert defs["dropped_window"]["stages"][1] == ["per-product", "window", "afr-window-per-product-v2",
                                                   "afr-window-per-product-v2"]  # fmt: skip
    for name, changed in (("candidate_suggestion", "agents"), ("candidate_analysis", "agents"),
                          ("processing_time", "event_time"), ("dropped_window", "stages")):  # fmt: skip
        same = {k: v for k, v in defs[name].items() if k != changed}
        assert same == {k: v for k, v in prod.items() if k != changed}, name


def test_the_analysis_agents_score_the_wheel_s_reviews_on_their_prompt_s_scale(facts: dict[str, Any]) -> None:
    prod, cand = facts["analysis"]["production"], facts["analysis"]["candidate_analysis"]
    assert [o["id"] for o in prod] == [o["id"] for o in cand] == facts["input_keys"]
    assert len(prod) == REVIEWS
    assert [o["reasons"] for o in prod] == [o["reasons"] for o in cand]
    assert all(1 <= o["score"] <= 5 for o in prod) and all(1 <= o["score"] <= 10 for o in cand)
    assert all(a["score"] != b["score"] for a, b in zip(prod, cand, strict=True)), (prod, cand)


def test_the_wheel_s_window_function_summarises_each_product_window(facts: dict[str, Any]) -> None:
    summaries, prod = facts["summaries"], facts["analysis"]["production"]
    assert summaries == facts["wheel_summaries"], "the definition's window function is the quickstart's"
    assert {s["id"] for s in summaries} == {o["id"] for o in prod}
    assert len(summaries) > len({s["id"] for s in summaries})  # some products span two windows
    assert sorted(r for s in summaries for r in s["unsatisfied_reasons"]) == sorted(
        r for o in prod for r in o["reasons"]
    )
    assert any(len(s["unsatisfied_reasons"]) >= 2 for s in summaries), summaries


def test_the_suggestion_agent_gets_the_prompt_as_one_system_message_with_the_summary(facts: dict[str, Any]) -> None:
    """The chat model setup formats the ``Prompt.from_text`` template with the agent's ``input`` into a system
    message; the agent's own user message (empty content, the summary in ``extra_args``) is not sent."""
    seen = facts["seen"]
    assert len(seen) == 2 * len(facts["summaries"])
    for call, summary in zip(seen, facts["summaries"] * 2, strict=True):
        [[role, text]] = call["messages"]
        assert role == "system"
        assert f'"id": {summary["id"]},' in text
        assert f'"unsatisfied_reasons": {summary["unsatisfied_reasons"]!r}' in text
    assert all("generate three actionable" in c["messages"][0][1] for c in seen[: len(seen) // 2])
    assert all("generate two actionable" in c["messages"][0][1] for c in seen[len(seen) // 2 :])


def test_the_suggestions_follow_the_summary_and_the_number_the_prompt_asks_for(facts: dict[str, Any]) -> None:
    prod, cand = facts["suggestions"]["production"], facts["suggestions"]["candidate_suggestion"]
    summaries = facts["summaries"]
    assert [(o["id"], o["score_hist"]) for o in prod] == [(s["id"], s["score_hist"]) for s in summaries]
    assert [(o["id"], o["score_hist"]) for o in cand] == [(s["id"], s["score_hist"]) for s in summaries]
    assert all(len(o["suggestions"]) == 3 for o in prod) and all(len(o["suggestions"]) == 2 for o in cand)
    assert all(a["suggestions"] != b["suggestions"] for a, b in zip(prod, cand, strict=True))
    for summary, out in zip(summaries, prod, strict=True):
        addressed = [f"Address '{r}' complaints" for r, _ in Counter(summary["unsatisfied_reasons"]).most_common(3)]
        assert out["suggestions"][: len(addressed)] == addressed, (summary, out)
        assert out["suggestions"][len(addressed) :] == list(GENERIC[: 3 - len(addressed)]), (summary, out)


def test_the_stand_in_addresses_the_most_frequent_reasons_first(facts: dict[str, Any]) -> None:
    """A summary with more reasons than suggestions asked for: the most frequent, ties in order of first mention."""
    direct = facts["direct"]
    assert direct["three"] == {"suggestion_list": ["Address 'damaged' complaints", "Address 'late' complaints",
                                                   "Address 'wet' complaints"]}  # fmt: skip
    assert direct["two"] == {"suggestion_list": ["Address 'damaged' complaints", "Address 'late' complaints"]}
    assert direct["none"] == {"suggestion_list": list(GENERIC[:3])}


def test_the_window_function_takes_a_window_without_a_1_to_5_score(facts: dict[str, Any]) -> None:
    """The wheel's aggregate divides by the count of scores 1-5: a window of the 1-10 candidate whose scores are
    all above 5 fails there; the definition's gives 0.0% everywhere, and the wheel's summary elsewhere."""
    ours, wheel = facts["candidate_summaries"], facts["candidate_wheel_summaries"]
    empty = [o for o, w in zip(ours, wheel, strict=True) if w is None]
    assert empty and all(o["score_hist"] == ["0.0%"] * 5 for o in empty), empty
    assert [o for o, w in zip(ours, wheel, strict=True) if w is not None] == [w for w in wheel if w is not None]
