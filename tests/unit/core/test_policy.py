"""ReplayPolicy: defaults, precedence, stand-ins, validation errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from airflow_flink_replay.core.policy import Decision, ReplayPolicy


def test_defaults_allow_models_and_reads_record_tools_and_writes() -> None:
    p = ReplayPolicy()
    assert p.decide("chat_model", "review_model", "chat") is Decision.ALLOW
    assert p.decide("embedding_model", "emb", "embed") is Decision.ALLOW
    assert p.decide("tool", "notify_support", "call") is Decision.RECORD
    assert p.decide("vector_store", "memory", "search") is Decision.ALLOW
    assert p.decide("vector_store", "memory", "recall") is Decision.ALLOW
    assert p.decide("vector_store", "memory", "add") is Decision.RECORD
    assert p.decide("vector_store", "memory", "remember") is Decision.RECORD


def test_most_specific_rule_wins() -> None:
    p = ReplayPolicy(
        by_type={"tool": "block", "vector_store.write": "allow", "vector_store": "block"},
        by_name={"notify_support": "allow", "memory.delete": "block"},
    )
    assert p.decide("tool", "notify_support", "call") is Decision.ALLOW  # name beats type
    assert p.decide("tool", "refund", "call") is Decision.BLOCK  # type
    assert p.decide("vector_store", "memory", "add") is Decision.ALLOW  # vector_store.write beats vector_store
    assert p.decide("vector_store", "memory", "delete") is Decision.BLOCK  # name.method beats everything
    assert p.decide("vector_store", "memory", "search") is Decision.BLOCK  # vector_store (no .read rule)


def test_stand_ins_by_method_then_name_then_placeholder() -> None:
    p = ReplayPolicy(stand_ins={"notify_support": "T-0", "memory.add": "m-1"})
    assert p.stand_in("tool", "notify_support", "call") == "T-0"
    assert p.stand_in("vector_store", "memory", "add") == "m-1"
    assert p.stand_in("vector_store", "memory", "update") is None
    assert "refund" in p.stand_in("tool", "refund", "call")


def test_read_methods_are_configurable() -> None:
    p = ReplayPolicy(read_methods=["lookup"])
    assert p.decide("vector_store", "kb", "lookup") is Decision.ALLOW
    assert p.decide("vector_store", "kb", "search") is Decision.RECORD


def test_bad_input_names_the_field() -> None:
    with pytest.raises(ValidationError, match="by_type has unknown resource type"):
        ReplayPolicy(by_type={"tools": "record"})
    with pytest.raises(ValidationError, match="by_name"):
        ReplayPolicy(by_name={"x": "maybe"})
    with pytest.raises(ValidationError, match=r"stand_ins\['x'\] must be JSON-serialisable"):
        ReplayPolicy(stand_ins={"x": object()})
    with pytest.raises(ValidationError, match="extra"):
        ReplayPolicy(by_tpye={})


def test_json_round_trip() -> None:
    p = ReplayPolicy(by_name={"notify_support": "block"}, stand_ins={"review_model": {"label": "neutral"}})
    assert ReplayPolicy.model_validate_json(p.to_json()) == p


def test_the_memory_binding_is_allowed_unless_the_policy_names_it() -> None:
    from airflow_flink_replay.core.policy import Decision, ReplayPolicy

    assert ReplayPolicy().decide("vector_store", "review_memory", "remember") == Decision.RECORD
    memory = ReplayPolicy().with_memory("review_memory")
    assert memory.decide("vector_store", "review_memory", "remember") == Decision.ALLOW
    assert memory.decide("vector_store", "catalogue", "remember") == Decision.RECORD  # other stores keep the default
    named = ReplayPolicy(by_name={"review_memory.remember": "block"})
    assert named.with_memory("review_memory") == named


def test_unmediated_default_depends_on_the_cluster() -> None:
    from airflow_flink_replay.core.policy import Decision, ReplayPolicy

    assert ReplayPolicy().resolved(own_cluster=True).unmediated == Decision.BLOCK
    assert ReplayPolicy().resolved(own_cluster=False).unmediated == Decision.RECORD
    assert ReplayPolicy(unmediated="allow").resolved(own_cluster=True).unmediated == Decision.ALLOW


def test_with_a_cassette_tools_replay_and_pure_tools_are_called() -> None:
    policy = ReplayPolicy(pure_tools=["currency_rate"])
    assert policy.decide("tool", "lookup_order", "call", cassette=True) == Decision.REPLAY
    assert policy.decide("tool", "currency_rate", "call", cassette=True) == Decision.ALLOW
    assert policy.decide("tool", "currency_rate", "call") == Decision.ALLOW
    assert policy.decide("tool", "lookup_order", "call") == Decision.RECORD  # no cassette: as before
    assert policy.decide("chat_model", "llm", "chat", cassette=True) == Decision.ALLOW  # opt-in only
    assert policy.decide("vector_store", "kb", "add", cassette=True) == Decision.RECORD


def test_replay_rules_fall_back_to_the_rules_without_them() -> None:
    policy = ReplayPolicy(by_name={"llm": "replay", "notify": "block"}, by_type={"tool": "replay"},
                          stand_ins={"lookup": "n/a"})
    assert policy.decide("chat_model", "llm", "chat", cassette=True) == Decision.REPLAY
    assert policy.decide("chat_model", "llm", "chat") == Decision.ALLOW  # no cassette: the built-in default
    assert policy.fallback("chat_model", "llm", "chat") == Decision.ALLOW
    assert policy.decide("tool", "notify", "call", cassette=True) == Decision.BLOCK  # the most specific rule
    assert policy.fallback("tool", "lookup", "call") == Decision.RECORD
    assert ReplayPolicy(by_name={"lookup": "replay"}, by_type={"tool": "block"}).fallback(
        "tool", "lookup", "call") == Decision.BLOCK


def test_an_explicit_rule_beats_the_cassette_default() -> None:
    assert ReplayPolicy(by_type={"tool": "record"}).decide("tool", "t", "call", cassette=True) == Decision.RECORD
    assert ReplayPolicy(by_name={"t": "allow"}).decide("tool", "t", "call", cassette=True) == Decision.ALLOW


def test_unmediated_calls_cannot_be_replayed() -> None:
    with pytest.raises(ValidationError, match="unmediated cannot be 'replay'"):
        ReplayPolicy(unmediated="replay")


def test_a_resource_the_candidate_changed_is_never_replayed() -> None:
    """The agent check's fingerprints differ: production's recording is of other code. A pure tool runs, another
    tool takes its non-replay decision (a block rule still blocks), an explicit replay rule falls back too."""
    policy = ReplayPolicy(pure_tools=["currency_rate"], by_name={"refund": "block", "llm": "replay"})
    changed = policy.with_changed(["lookup_order", "currency_rate", "refund", "llm"])
    assert changed.decide("tool", "lookup_order", "call", cassette=True) == Decision.RECORD
    assert changed.decide("tool", "currency_rate", "call", cassette=True) == Decision.ALLOW
    assert changed.decide("tool", "refund", "call", cassette=True) == Decision.BLOCK
    assert changed.decide("chat_model", "llm", "chat", cassette=True) == Decision.ALLOW
    for name, method, rtype in (("lookup_order", "call", "tool"), ("llm", "chat", "chat_model")):
        assert changed.decide(rtype, name, method, cassette=True) == changed.decide(rtype, name, method)
    # what the candidate did not change keeps being replayed
    assert changed.decide("tool", "ship_label", "call", cassette=True) == Decision.REPLAY
    assert policy.decide("tool", "lookup_order", "call", cassette=True) == Decision.REPLAY
    assert changed.is_changed("lookup_order") and not changed.is_changed("ship_label")
    assert changed.with_changed(["refund"]) is changed and changed.changed == sorted(changed.changed)
    assert ReplayPolicy.model_validate_json(changed.to_json()) == changed  # it travels to the proxies as JSON
