"""The agent check's judgement: what refuses a replay, the decision each resource gets, the report's text,
and the carrier the facts travel in (through an operator name of a Flink plan)."""

from __future__ import annotations

import html

import pytest

from airflow_flink_replay.core.agent_check import (
    ActionFact,
    AgentIdentity,
    CheckFacts,
    DefinitionFacts,
    InputTrial,
    PythonFailure,
    ResourceFact,
    SampleFacts,
    SampleRun,
    StageFact,
    changed_resources,
    decode_facts,
    encode_facts,
    judge,
    python_error_fix,
)
from airflow_flink_replay.core.policy import ReplayPolicy

ACTIONS = [
    ActionFact(name="process_input", listens=["flink_agents.api.events.event.InputEvent"]),
    ActionFact(name="process_response", listens=["flink_agents.api.events.chat_event.ChatResponseEvent"]),
]
RESOURCES = [
    ResourceFact(name="review_model", type="chat_model", mediated=True, fingerprint="a1"),
    ResourceFact(name="ollama_server", type="chat_model_connection", level="env", fingerprint="b2"),
    ResourceFact(name="notify_support", type="tool", mediated=True, fingerprint="c3"),
    ResourceFact(name="review_memory", type="vector_store", level="memory", mediated=True, fingerprint="d4"),
]
INVISIBLE = ["ReviewAgent.process_input (action)", "ReviewAgent.notify_support (tool)"]


def _definition(role: str = "production", **kw: object) -> DefinitionFacts:
    base: dict[str, object] = {"role": role, "ref": f"pkg.{role}:job", "stage": "done", "agent_class": "pkg.Agent",
                               "actions": ACTIONS, "resources": RESOURCES}  # fmt: skip
    base.update(kw)
    return DefinitionFacts.model_validate(base)


def _facts(*definitions: DefinitionFacts, sample: SampleFacts | None = None) -> CheckFacts:
    return CheckFacts(definitions=list(definitions), sample=sample, flink_agents="0.2.0", python="3.11.7")


def test_a_healthy_pair_passes_and_lists_actions_resources_and_the_policy_decision_of_each() -> None:
    policy = ReplayPolicy(by_name={"notify_support": "block"})
    trial = InputTrial(records=3, input_type="pkg.Review", key="1", key_type="int")
    report = judge(
        _facts(
            _definition(input=trial), _definition("candidate", input=trial), sample=SampleFacts(topic="cap", records=3)
        ),
        policy,
        AgentIdentity(uid="afr-agent", max_parallelism=128),
    )
    assert not report.refused and report.problems == [] and report.warnings == []
    decisions = {(d.name, d.level): d.decision for d in report.decisions["candidate"]}
    assert decisions[("review_model", "agent")] == "allow"
    assert decisions[("notify_support", "agent")] == "block"  # by name beats the tool default (record)
    assert decisions[("review_memory", "memory")] == "read: allow, write: allow"  # its own fork
    assert decisions[("ollama_server", "env")].startswith("- used through a chat model setup")
    text = report.render()
    assert text.splitlines()[0] == "agent check (flink-agents 0.2.0, Python 3.11.7): OK"
    assert "actions: process_input (InputEvent), process_response (ChatResponseEvent)" in text
    assert "chat_model_connection  ollama_server   env     - used through a chat model setup" in text
    assert "tool                   notify_support  agent   block" in text
    assert "input: 3 captured record(s) -> pkg.Review, key 1 (int)" in text
    assert "agent operator identity: uid 'afr-agent', max parallelism 128" in text


def test_a_plain_subclass_is_refused_with_why_and_how_to_fix_it() -> None:
    subclass = _definition("candidate", agent_class="pkg.Mine", actions=[], resources=[], invisible=INVISIBLE)
    report = judge(_facts(_definition(), subclass), ReplayPolicy())
    assert report.refused and len(report.problems) == 1  # one message, not also "lost" for the same cause
    problem = report.problems[0]
    assert "candidate's agent pkg.Mine has an empty plan" in problem
    assert "ReviewAgent.process_input (action), ReviewAgent.notify_support (tool)" in problem
    assert "type(agent).__dict__" in problem and "class Mine(ExistingAgent): pass" in problem
    assert "Fix: declare the actions and resources on the agent class itself, or re-declare" in problem
    assert "declared on a base class, NOT in the plan: ReviewAgent.process_input (action)" in report.render()


def test_an_empty_plan_is_refused_for_production_too_and_builtin_actions_do_not_count() -> None:
    empty = _definition(actions=[], builtin_actions=["chat_model_action", "tool_call_action"])
    report = judge(_facts(empty), ReplayPolicy())
    assert report.refused and "production's agent pkg.Agent has an empty plan" in report.problems[0]
    assert "Its base class" not in report.problems[0]  # nothing inherited: no subclass story
    assert "actions: NONE" in report.render()


def test_a_candidate_that_lost_a_tool_or_an_action_is_refused_naming_them() -> None:
    candidate = _definition(
        "candidate", actions=ACTIONS[:1], resources=[r for r in RESOURCES if r.name != "notify_support"],
        invisible=["ReviewAgent.notify_support (tool)"],
    )  # fmt: skip
    report = judge(_facts(_definition(), candidate), ReplayPolicy())
    assert report.refused and len(report.problems) == 1
    problem = report.problems[0]
    assert (
        "lost what production's (pkg.production:job) has: actions process_response; resources tool 'notify_support'"
        in problem
    )
    assert "ReviewAgent.notify_support (tool), which flink-agents does not see" in problem
    assert "AgentJob(env_resources=...)" in problem


def test_a_candidate_with_more_than_production_is_fine() -> None:
    more = _definition("candidate", resources=[*RESOURCES, ResourceFact(name="extra", type="tool", mediated=True)])
    assert not judge(_facts(_definition(), more), ReplayPolicy()).refused


@pytest.mark.parametrize(
    ("stage", "form", "message", "fix"),
    [
        ("import", "job", "boom at import", "Fix: make pkg.candidate importable by the Flink cluster's Python"),
        ("build", "job", "REVIEW_THRESHOLD is not set", "Fix: fix the error above in the agent's construction"),
        ("build", "factory", "build_agent() got an unexpected keyword argument 'mem0_config'",
         "is used as an agent factory, which is called as factory(mem0_config=..., **agent_options)"),
    ],
)  # fmt: skip
def test_a_python_error_refuses_with_its_message_and_traceback_text(
    stage: str, form: str, message: str, fix: str
) -> None:
    tb = (
        'Traceback (most recent call last):\n  File "/srv/pkg/candidate.py", line 7, in <module>\n'
        f"    boom()\nRuntimeError: {message}"
    )
    err = PythonFailure(type="TypeError" if form == "factory" else "RuntimeError", message=message, traceback=tb)
    failed = _definition("candidate", stage=stage, form=form, error=err, actions=[], resources=[])
    report = judge(_facts(_definition(), failed), ReplayPolicy())
    assert report.refused and len(report.problems) == 1
    problem = report.problems[0]
    assert message in problem.splitlines()[0] and 'File "/srv/pkg/candidate.py", line 7' in problem
    assert fix in problem
    assert f"failed at {stage}: {err.headline()}" in report.render()


def test_a_deserializer_that_cannot_read_a_captured_record_is_refused_naming_the_record() -> None:
    tb = '  File "/srv/pkg/job.py", line 12, in review_of\nValidationError: 1 error'
    err = PythonFailure(type="ValidationError", message="1 validation error for ProductReview", traceback=tb)
    bad = _definition("candidate", input=InputTrial(records=0, error=err, failed_record="capture/0@41"))
    report = judge(_facts(_definition(), bad, sample=SampleFacts(topic="capture", records=3)), ReplayPolicy())
    assert report.refused
    assert (
        "candidate's deserializer or key selector cannot produce the agent's input from capture/0@41"
        in report.problems[0]
    )
    assert 'File "/srv/pkg/job.py", line 12' in report.problems[0]
    assert "input: failed on capture/0@41: ValidationError" in report.render()


GATEWAY_ERROR = (
    "It's launching the PythonGatewayServer during Python UDF execution which is unexpected. It usually happens "
    "when the job codes are in the top level of the Python script file"
)


def test_code_flink_s_python_worker_cannot_import_is_refused_with_the_gateway_fix() -> None:
    tb = ('Traceback (most recent call last):\n  File "/srv/pkg/job.py", line 18, in <module>\n'
          f"    from flink_agents.api.core_options import AgentExecutionOptions\nException: {GATEWAY_ERROR}")
    err = PythonFailure(type="Exception", message=GATEWAY_ERROR, traceback=tb)
    failed = _definition("production", stage="worker", error=err, actions=[], resources=[])
    report = judge(_facts(failed), ReplayPolicy())
    assert report.refused and len(report.problems) == 1
    problem = report.problems[0]
    assert problem.startswith("production job definition pkg.production:job cannot be imported the way Flink's "
                              "Python worker imports it")
    assert 'File "/srv/pkg/job.py", line 18, in <module>' in problem
    assert "Fix: a module Flink's Python worker imports starts PyFlink's Java gateway" in problem
    assert 'AgentJob(config={"num-async-threads": 2})' in problem
    assert "failed at worker: Exception: It's launching" in report.render()
    other = PythonFailure(type="RuntimeError", message="no settings file", traceback="RuntimeError: no settings file")
    report = judge(_facts(_definition(stage="worker", error=other, actions=[], resources=[])), ReplayPolicy())
    assert "Fix: make the modules in the traceback importable in a Python without a Java gateway" in report.problems[0]


UUID_ERROR = ("2 validation errors for ToolResponseEvent\nresponses.call_0.[key]\n  Input should be a valid UUID, "
              "invalid character: expected an optional prefix of `urn:uuid:`")


def test_a_sample_run_flink_agents_refused_is_a_problem_other_failures_are_warnings() -> None:
    tb = ('Traceback (most recent call last):\n  File "/venv/flink_agents/plan/actions/tool_call_action.py", line 55, '
          f"in process_tool_request\n    ToolResponseEvent(\nValidationError: {UUID_ERROR}")
    calls = ["chat_model review_model.chat: allow (ok)", "tool notify_support.call: record (recorded)"]
    rejected = SampleRun(record="capture/0@41", calls=calls, substituted=True, rejected_by_flink_agents=True,
                         error=PythonFailure(type="ValidationError", message=UUID_ERROR, traceback=tb))
    report = judge(_facts(_definition(), _definition("candidate", sample=rejected)), ReplayPolicy())
    assert report.refused and len(report.problems) == 1
    problem = report.problems[0]
    assert problem.startswith("candidate's sample run on a captured record (capture/0@41) failed: Flink Agents "
                              "refused an event built from what the agent's resources returned: ValidationError: 2 "
                              "validation errors for ToolResponseEvent")
    assert "tool_call_action.py\", line 55" in problem
    assert "Fix: Flink Agents keys tool calls by UUID (ToolRequestEvent, ToolResponseEvent)" in problem
    assert ("sample run on capture/0@41: FAILED: ValidationError: 2 validation errors for ToolResponseEvent; calls: "
            "chat_model review_model.chat: allow (ok), tool notify_support.call: record (recorded)") in report.render()

    raised = SampleRun(record="capture/0@41", substituted=True,
                       error=PythonFailure(type="JSONDecodeError", message="Expecting value", traceback=""))
    ran = SampleRun(record="capture/0@41", outputs=1, calls=calls[:1])
    report = judge(_facts(_definition(sample=ran), _definition("candidate", sample=raised)), ReplayPolicy())
    assert not report.refused
    assert report.warnings == [
        "candidate's sample run on capture/0@41 raised JSONDecodeError: Expecting value after a call the sample "
        "recorded or blocked instead of making it (its stand-in may be what the agent could not use): the replays "
        "may fail the same way. The traceback is in the check's facts (run record)"
    ]
    text = report.render()
    assert "  sample run on capture/0@41: 1 output(s); calls: chat_model review_model.chat: allow (ok)" in text
    skipped = SampleRun(record="c/0@1", skipped="the agent uses review_memory (vector store or long-term memory)")
    timed_out = SampleRun(record="c/0@1", timed_out=True)
    report = judge(_facts(_definition(sample=skipped), _definition("candidate", sample=timed_out)), ReplayPolicy())
    assert not report.refused and report.warnings == [
        "candidate's sample run did not finish in time (a slow chat model?): it was not judged"]
    assert "  sample run: skipped (the agent uses review_memory (vector store or long-term memory))" in report.render()


def test_known_python_errors_have_their_fix() -> None:
    assert python_error_fix(f"Exception: {GATEWAY_ERROR}") is not None
    assert "UUID" in (python_error_fix(UUID_ERROR) or "")
    assert python_error_fix("KeyError: 'customer'") is None


def test_a_candidate_keyed_differently_from_production_is_refused() -> None:
    production = _definition(
        key_serializer="long", input=InputTrial(records=2, input_type="d", key="1", key_type="int")
    )
    retyped = _definition("candidate", key_serializer="string",
                          input=InputTrial(records=2, input_type="d", key="'1'", key_type="str"))  # fmt: skip
    report = judge(_facts(production, retyped), ReplayPolicy())
    assert len(report.problems) == 2
    assert "the candidate's key is serialised as string, production's as long" in report.problems[0]
    assert "the candidate's key selector gives str keys, production's int keys" in report.problems[1]
    assert "Fix: give the candidate's AgentJob production's key_selector" in report.problems[1]
    assert "input: 2 captured record(s) -> d, key 1 (int, serialised long)" in report.render()


def test_warnings_do_not_refuse() -> None:
    java_tool = ResourceFact(name="java_tool", type="tool", mediated=False)
    trial = InputTrial(records=1, input_type="dict", key="'a'", key_type="str")
    unmediated = _definition("candidate", resources=[*RESOURCES, java_tool], input=trial)
    production = _definition(input=InputTrial(records=1, input_type="pkg.Review", key="'a'", key_type="str"))
    report = judge(_facts(production, unmediated, sample=SampleFacts(topic="capture", records=0)), ReplayPolicy())
    assert not report.refused
    assert any("tool 'java_tool' (agent-level) cannot be mediated" in w for w in report.warnings)
    assert any("production's deserializer makes pkg.Review, the candidate's dict" in w for w in report.warnings)
    assert any("'capture' holds no record yet" in w for w in report.warnings)
    assert "UNMEDIATED" in report.render()


def test_identity_says_how_the_replays_pin_the_agent() -> None:
    assert AgentIdentity(uid="u").describe() == "uid 'u'"
    vid = "a" * 32
    assert AgentIdentity(uid_hash=vid, max_parallelism=64, production_vertex=vid).describe() == (
        f"uid hash {vid} (production's agent vertex; it has no uid), max parallelism 64"
    )
    assert AgentIdentity().describe().startswith("no pin known")


def test_a_uid_that_is_not_production_s_running_agent_vertex_is_a_warning() -> None:
    matching = AgentIdentity(uid="afr-agent", production_vertex="382ed45d504034b09088257b90c60d72")
    assert matching.uid_matches_production() is True and "(the uid's id)" in matching.describe()
    assert judge(_facts(_definition()), ReplayPolicy(), matching).warnings == []
    other = AgentIdentity(uid="afr-agent", production_vertex="f" * 32)
    report = judge(_facts(_definition()), ReplayPolicy(), other)
    assert not report.refused and "(NOT the uid's id)" in report.render()
    assert "is not the id of the spec's agent_uid 'afr-agent' (382ed45d504034b09088257b90c60d72)" in report.warnings[0]


def test_facts_survive_the_plan_s_html_escaping_and_surrounding_text() -> None:
    facts = _facts(_definition(), _definition("candidate", agent_class="pkg.<Agent> & 'co'"))
    carried = encode_facts(facts)
    assert set(carried.split(":", 1)[1]) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=")
    description = html.escape(f"Source: Collection Source<br/>+- Sink: {carried}<br/>")
    assert decode_facts(description) == facts
    assert decode_facts("no report here") is None


PROMPT = ResourceFact(name="review_prompt", type="prompt", fingerprint="e5")


def _changed_candidate() -> DefinitionFacts:
    """The candidate: another tool body, another prompt text, a new tool; the chat model as production's."""
    return _definition("candidate", resources=[
        ResourceFact(name="review_model", type="chat_model", mediated=True, fingerprint="a1"),
        ResourceFact(name="ollama_server", type="chat_model_connection", level="env", fingerprint="b2"),
        ResourceFact(name="notify_support", type="tool", mediated=True, fingerprint="c3-other-body"),
        ResourceFact(name="review_memory", type="vector_store", level="memory", mediated=True, fingerprint="d4"),
        ResourceFact(name="review_prompt", type="prompt", fingerprint="e5-other-text"),
        ResourceFact(name="currency_rate", type="tool", mediated=True, fingerprint="f6"),
    ])  # fmt: skip


def test_the_candidate_s_changed_and_added_resources_are_found_by_fingerprint() -> None:
    production = _definition(resources=[*RESOURCES, PROMPT])
    facts = _facts(production, _changed_candidate())
    assert changed_resources(facts) == {"currency_rate": "added", "notify_support": "changed",
                                        "review_prompt": "changed"}  # fmt: skip
    assert changed_resources(_facts(production, _definition("candidate", resources=production.resources))) == {}
    failed = _definition("candidate", stage="plan", error=PythonFailure(type="E", message="m"))
    assert changed_resources(_facts(production, failed)) == {}
    assert changed_resources(_facts(production)) == {}  # no candidate


def test_the_candidate_s_table_shows_what_it_changed_and_that_it_is_not_replayed() -> None:
    production = _definition(resources=[*RESOURCES, PROMPT])
    policy = ReplayPolicy(by_name={"notify_support": "replay"}, pure_tools=["currency_rate"])
    report = judge(_facts(production, _changed_candidate()), policy)
    assert report.changed == {"currency_rate": "added", "notify_support": "changed", "review_prompt": "changed"}
    candidate = {d.name: (d.decision, d.change) for d in report.decisions["candidate"]}
    assert candidate["notify_support"] == ("record", "changed")  # a replay rule never applies: its fallback
    assert candidate["currency_rate"] == ("allow", "added")  # a pure tool runs
    assert candidate["review_model"] == ("allow", None)
    assert {d.change for d in report.decisions["production"]} == {None}
    text = report.render()
    assert "tool                   notify_support  agent   record (changed: not replayed)" in text
    assert "tool                   currency_rate   agent   allow (added: not replayed)" in text
    assert "prompt                 review_prompt   agent   - text, no call (changed)" in text
    assert ("candidate changed: tool currency_rate (added), tool notify_support (changed), prompt review_prompt "
            "(changed); the replays never serve them production's recorded results") in text
    assert not report.refused and report.warnings == []


def test_a_resource_that_could_not_be_fingerprinted_is_a_warning() -> None:
    unknown = [r.model_copy(update={"fingerprint": None, "fingerprint_error": "ValueError: no module"})
               if r.name == "notify_support" else r for r in RESOURCES]  # fmt: skip
    report = judge(_facts(_definition(), _definition("candidate", resources=unknown)), ReplayPolicy())
    assert report.changed == {} and not report.refused
    assert report.warnings == [
        "tool 'notify_support' could not be fingerprinted (ValueError: no module): whether the candidate changed it "
        "is unknown, and a cassette would serve its calls production's recorded results"
    ]
    old_job_side = [r.model_copy(update={"fingerprint": None}) for r in RESOURCES]
    report = judge(_facts(_definition(resources=old_job_side), _definition("candidate", resources=old_job_side)),
                   ReplayPolicy())  # fmt: skip
    assert len(report.warnings) == 1 and report.warnings[0].startswith("the job side sent no resource fingerprints")


def test_the_decisions_shown_are_the_ones_the_replays_apply_with_and_without_a_cassette() -> None:
    """Production records a cassette: its tools are replayed (a call it holds no result for: recorded), a pure
    tool runs; the candidate's changed tool is never replayed. Without a cassette, tools are recorded."""
    policy = ReplayPolicy(pure_tools=["lookup"])
    tools = [*RESOURCES, ResourceFact(name="lookup", type="tool", mediated=True, fingerprint="aa")]
    changed_tools = [r.model_copy(update={"fingerprint": "zz"}) if r.name == "notify_support" else r for r in tools]
    facts = _facts(_definition(resources=tools), _definition("candidate", resources=changed_tools))
    with_cassette = judge(facts, policy, cassette=True)
    shown = {role: {d.name: d.decision for d in ds if d.type == "tool"} for role, ds in with_cassette.decisions.items()}
    assert shown["production"] == {"notify_support": "replay (else record)", "lookup": "allow"}
    assert shown["candidate"] == {"notify_support": "record", "lookup": "allow"}
    without = judge(facts, policy)
    assert {d.name: d.decision for d in without.decisions["production"] if d.type == "tool"} == {
        "notify_support": "record", "lookup": "allow"}


STAGES = [
    StageFact(name="analysis", kind="agent", uid="afr-agent", stateful=True, key="k1", key_type="pickled"),
    StageFact(name="per-product", kind="window", uid="afr-window-per-product", stateful=True, key="k2",
              key_type="pickled", event_time=True),
    StageFact(name="suggestion", kind="agent", uid="afr-agent-suggestion", stateful=True, key="k3",
              key_type="pickled"),
]


def _with_stage(name: str, **changes: object) -> list[StageFact]:
    return [s.model_copy(update=changes) if s.name == name else s for s in STAGES]


def test_a_pipeline_candidate_keeping_every_stateful_stage_passes_and_its_stages_are_shown() -> None:
    report = judge(_facts(_definition(stages=STAGES), _definition("candidate", stages=STAGES)), ReplayPolicy())
    assert report.problems == [] and report.warnings == [], report.render()
    assert ("stages: analysis (agent, uid afr-agent) -> per-product (window, uid afr-window-per-product) -> "
            "suggestion (agent, uid afr-agent-suggestion)") in report.render()


def test_a_pipeline_candidate_that_drops_or_rekeys_a_stateful_stage_is_refused_naming_it() -> None:
    dropped = judge(_facts(_definition(stages=STAGES),
                           _definition("candidate", stages=_with_stage("per-product", uid="afr-window-v2"))),
                    ReplayPolicy())  # fmt: skip
    assert len(dropped.problems) == 1, dropped.problems
    assert "drops production's stateful stage 'per-product' (window, uid afr-window-per-product)" in dropped.problems[0]
    assert "Fix: keep the stage with its uid" in dropped.problems[0]
    for change in ({"key": "other"}, {"key_type": "string"}):
        rekeyed = judge(_facts(_definition(stages=STAGES), _definition("candidate", stages=_with_stage(
            "suggestion", **change))), ReplayPolicy())  # fmt: skip
        assert [p[:70] for p in rekeyed.problems] == [
            "the candidate re-keys production's stateful stage 'suggestion' (uid af"
        ], rekeyed.problems
    # a stateless step may go
    with_step = [StageFact(name="clean", kind="map", uid="afr-step-clean"), *STAGES]
    assert judge(_facts(_definition(stages=with_step), _definition("candidate", stages=STAGES)),
                 ReplayPolicy()).problems == []  # fmt: skip


def test_a_processing_time_window_is_a_warning_for_each_definition_that_has_one() -> None:
    processing = _with_stage("per-product", event_time=False)
    report = judge(_facts(_definition(stages=STAGES), _definition("candidate", stages=processing)), ReplayPolicy())
    assert not report.refused
    [warning] = report.warnings
    assert warning.startswith("candidate: window stage 'per-product' assigns windows by processing time")
    assert "Fix: an event-time window" in warning
    assert "per-product (window, uid afr-window-per-product, processing time)" in report.render()
