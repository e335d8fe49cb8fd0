"""The pure preflight rules: replay names never equal production's, production checks name each problem and
its fix, the error lists every problem."""

from __future__ import annotations

import pytest

from airflow_flink_replay.core.preflight import PreflightError, check_names, check_production
from airflow_flink_replay.core.replay_spec import ReplaySpec
from tests.unit.core.test_replay_spec import _spec


def test_replay_names_never_equal_production_names() -> None:
    spec = ReplaySpec.model_validate(_spec())
    assert not check_names(spec, "abc123").problems
    names = {spec.fork_namespace("abc123", v) for v in spec.variants()}
    topics = {spec.action_state_topic("abc123", v) for v in spec.variants()}
    assert len(names) == 3 and len(topics) == 3
    assert spec.production.job_identifier not in names and spec.production.action_state_topic not in topics

    clash = ReplaySpec.model_validate(_spec(production={**_spec()["production"], "capture_topic": "reviews"}))
    assert any("capture_topic equals input_topic" in p for p in check_names(clash, "t").problems)


def test_a_result_topic_named_like_a_production_topic_is_refused() -> None:
    """Production's output topic happens to be what the naming rule gives the baseline's outputs topic."""
    spec = ReplaySpec.model_validate(_spec())
    taken = spec.result_topics("t", "baseline").outputs
    clash = ReplaySpec.model_validate(_spec(production={**_spec()["production"], "output_topic": taken}))
    problems = check_names(clash, "t").problems
    assert any(f"the baseline outputs topic {taken!r} (its replay results) is one of production's" in p
               for p in problems), problems


def test_production_checks_name_each_problem_and_its_fix() -> None:
    spec = ReplaySpec.model_validate(_spec())
    ok_vertices = ["Source: source -> normalise", "action-execute-operator -> Map"]
    topics = {"reviews", "reviews-capture", "reviews-action-state"}
    running = [("j1", "review-triage-production"), ("j2", "other")]
    assert not check_production(spec, running, ok_vertices, topics).problems

    none = check_production(spec, [("j2", "other")], None, topics).problems
    assert any("no RUNNING Flink job named 'review-triage-production'" in p and "other" in p for p in none)
    dup = check_production(
        spec, [("a", "review-triage-production"), ("b", "review-triage-production")], ok_vertices, topics
    ).problems
    assert any("cancel the duplicates" in p for p in dup)
    no_agent = check_production(spec, running, ["Source: source -> Map"], topics).problems
    assert any("Flink Agents job" in p for p in no_agent)
    windows = check_production(spec, running, [*ok_vertices, "Window(TumblingEventTimeWindows(60000))"], topics)
    assert any("use quiesce_mode=stop" in p for p in windows.problems)
    stop = spec.with_run_overrides({"quiesce_mode": "stop"})
    assert not check_production(stop, running, [*ok_vertices, "Window(TumblingEventTimeWindows)"], topics).problems
    savepoint = spec.with_run_overrides({"quiesce_mode": "savepoint"})
    findings = check_production(savepoint, running, ok_vertices, topics)
    assert not findings.problems and any("race the savepoint" in w for w in findings.warnings)
    reuse = spec.with_run_overrides({"quiesce_mode": "existing", "existing_manifest": "file:///r/m.json"})
    assert not check_production(reuse, [], None, topics).problems  # replaying an old savepoint needs no production
    missing = check_production(spec, running, ok_vertices, {"reviews"}).problems
    assert sum("does not exist on the broker" in p for p in missing) == 2


def test_preflight_error_lists_every_problem() -> None:
    from airflow_flink_replay.core.preflight import PreflightFindings

    found = PreflightFindings(problems=["first: fix a", "second: fix b"])
    with pytest.raises(PreflightError) as err:
        found.raise_if_any()
    assert "first: fix a" in str(err.value) and "second: fix b" in str(err.value)


def test_the_cassette_topic_is_checked_like_productions_other_topics() -> None:
    prod = _spec()["production"]
    spec = ReplaySpec.model_validate(_spec(production={**prod, "cassette_topic": "reviews-cassette"}))
    assert not check_names(spec, "t").problems
    running = [("j1", "review-triage-production")]
    vertices = ["Source: source -> normalise", "action-execute-operator -> Map"]
    topics = {"reviews", "reviews-capture", "reviews-action-state"}
    missing = check_production(spec, running, vertices, topics).problems
    assert missing == ["production.cassette_topic 'reviews-cassette' does not exist on the broker"]
    assert not check_production(spec, running, vertices, topics | {"reviews-cassette"}).problems
    shared = ReplaySpec.model_validate(_spec(production={**prod, "cassette_topic": "reviews-capture"}))
    assert any("cassette_topic 'reviews-capture' is another of production's topics" in p
               for p in check_names(shared, "t").problems)


def test_a_cassette_production_does_not_record_to_is_a_warning() -> None:
    prod = _spec()["production"]
    program = {"module": "airflow_flink_replay.flink.production_job", "program_args": ["--bootstrap", "k:9092"]}
    running = [("j1", "review-triage-production")]
    vertices = ["Source: source -> normalise", "action-execute-operator -> Map"]
    topics = {"reviews", "reviews-capture", "reviews-action-state", "tape"}

    def warnings(**production: object) -> list[str]:
        spec = ReplaySpec.model_validate(_spec(production={**prod, **production}))
        return check_production(spec, running, vertices, topics).warnings

    assert any("production's program records to no cassette topic" in w
               for w in warnings(cassette_topic="tape", program=program))
    recording = {**program, "program_args": [*program["program_args"], "--cassette-topic", "tape"]}
    assert warnings(cassette_topic="tape", program=recording) == []
    assert any("production.cassette_topic is not set" in w for w in warnings(program=recording))
    own = {"entry_point": "/opt/jobs/main.py", "program_args": []}
    assert warnings(cassette_topic="tape", program=own) == []  # an own program: its arguments are not ours to read


def test_a_memory_journal_production_does_not_write_is_refused() -> None:
    """The cut trusts the journal to name every memory production wrote: a spec naming a journal production's own
    program does not write would fork the wrong memory, so the run stops before anything is stopped."""
    prod = _spec()["production"]
    program = {"module": "airflow_flink_replay.flink.production_job", "program_args": ["--bootstrap", "k:9092"]}
    running = [("j1", "review-triage-production")]
    vertices = ["Source: source -> normalise", "action-execute-operator -> Map"]
    topics = {"reviews", "reviews-capture", "reviews-action-state", "journal"}

    def problems(**production: object) -> list[str]:
        spec = ReplaySpec.model_validate(_spec(production={**prod, **production}))
        return check_production(spec, running, vertices, topics).problems + check_names(spec, "t").problems

    assert any("journals its memory writes to no topic (--memory-journal-topic)" in p
               for p in problems(memory_journal_topic="journal", program=program))
    journaling = {**program, "program_args": [*program["program_args"], "--memory-journal-topic", "journal"]}
    assert problems(memory_journal_topic="journal", program=journaling) == []
    assert problems(program=journaling) == []  # journaled but not read: the cut reads everything, still exact
    assert any("memory_journal_topic 'journal-2' does not exist" in p
               for p in problems(memory_journal_topic="journal-2",
                                 program={**program, "program_args": ["--memory-journal-topic", "journal-2"]}))
    assert any("memory_journal_topic 'reviews' is another of production's topics" in p
               for p in problems(memory_journal_topic="reviews", program=program))


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("capture_topic", "action_state_topic"),
        ("output_topic", "input_topic"),
        ("input_topic", "action_state_topic"),
        ("capture_topic", "output_topic"),
        ("output_topic", "action_state_topic"),
    ],
)
def test_two_of_productions_topics_that_are_one_topic_are_refused(first: str, second: str) -> None:
    """Production's input, capture, output and action-state topics are four topics: one shared by two of them
    would mix the capture with the agent's state, or feed the outputs back as input."""
    production = {**_spec()["production"], "output_topic": "reviews-out"}
    production[first] = production[second]
    spec = ReplaySpec.model_validate(_spec(production=production))
    problems = check_names(spec, "t").problems
    assert any(first in p and second in p and "Fix:" in p for p in problems), problems
