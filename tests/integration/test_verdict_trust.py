"""The release gate's verdict on an agent shaped like the ones users bring (tests/jobs/counter_agent, labelled in
its docstring): several outputs per key, ``compare_key: $.id`` not unique, a per-key counter in short-term
memory, a random 0-1 s durable step, two tools called through ``ctx.get_resource`` (``annotate`` pure,
``open_ticket`` a side effect served from production's cassette), production's outputs on two partitions.

Everything runs as a user runs it, through ``benchmarks/aa_stability.py``'s steps: ``flink-replay deploy``,
``produce``, ``run-dag gate --feed`` (``airflow dags test`` on the stack, records fed while the gate runs).

- A/A twice: PASS with fidelity 100%, outputs tied to their input records, the cassette covering the window; the
  second run with ``aa_replays: 2`` (a third baseline): four replays, the noise measured on two pairs of
  baselines, and baseline_3's fork and topics cleaned up like the others'.
- Both tools' bodies changed: FAIL naming ``$.review`` and ``$.ticket``; the pure tool ran (``allow``), the
  side-effecting one was recorded, neither was served production's recording, and both are listed as changed;
  audit records, side-effect findings and output examples name the same key text (the output ids).
- The subclassing trap as candidate: the agent check refuses it; no other task fails; the run record names it.

Cost: one deploy and four gate runs over a 20-record window (one of them with a fourth replay), ~4 minutes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from benchmarks.aa_stability import JOB, comparison, deploy, gate, stable, stop, summary

pytestmark = pytest.mark.timeout(1200)

WINDOW = 20


@pytest.fixture(scope="module")
def production(stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    prod = deploy(tmp_path_factory.mktemp("verdict-trust"), window=WINDOW)
    try:
        yield prod
    finally:
        stop(prod)


def _audits(record: dict[str, Any], variant: str) -> list[dict[str, Any]]:
    found = next(v for v in record["variants"] if v["variant"] == variant)
    return [json.loads(line) for line in Path(found["audit"]).read_text().splitlines() if line.strip()]


def _table_matches_audits(record: dict[str, Any]) -> None:
    """The agent check's table shows, for the candidate, the decision its replay applied to every call."""
    table = {d["name"]: d["decision"].split()[0] for d in record["agent_check"]["checked"]["decisions"]["candidate"]}
    applied = {a["resource_name"]: a["decision"] for a in _audits(record, "candidate")}
    assert applied and all(table[name] == decision for name, decision in applied.items()), (table, applied)


def _reasons(record: dict[str, Any], code: str) -> list[dict[str, Any]]:
    return [r for r in comparison(record).get("reasons") or [] if r["code"] == code]


@contextmanager
def _aa_replays(prod: Any, count: int) -> Iterator[None]:
    """The production's spec with ``aa_replays: count`` for the runs inside (the DAG is built from it), then as
    it was."""
    import yaml

    original = prod.spec.read_text()
    prod.spec.write_text(yaml.safe_dump({**yaml.safe_load(original), "aa_replays": count}, sort_keys=False))
    try:
        yield
    finally:
        prod.spec.write_text(original)


def test_production_as_its_own_candidate_passes_twice_with_full_fidelity(production: Any) -> None:
    for aa_replays in (1, 2):
        with _aa_replays(production, aa_replays):
            record = gate(production, f"{JOB}:production")
        assert record["_exit"] == 0 and stable(record), (summary(record), record["_printed"][-3000:])
        result = comparison(record)
        assert result["fidelity"]["tie"] == "input_record", result["fidelity"]
        assert result["fidelity"]["equal"] == result["fidelity"]["baseline_outputs"] == WINDOW
        variants = ["baseline", "baseline_2", *(["baseline_3"] if aa_replays == 2 else []), "candidate"]
        assert [v["variant"] for v in record["variants"]] == variants, record["variants"]
        assert [v["output_records"] for v in record["variants"]] == [WINDOW] * len(variants), record["variants"]
        if aa_replays == 2:
            _noise_on_every_pair_and_baseline_3_cleaned_up(record, result)
        # the key is not unique: said so, and outputs were aligned per input record
        assert _reasons(record, "ALIGNMENT") and result["counts"]["alignment"] == "event_time", result["counts"]
        # the replays read the cassette once production had output every window record
        coverage = _reasons(record, "CASSETTE_COVERAGE")
        assert coverage and f"all {WINDOW} window records" in coverage[0]["message"], coverage
        for variant in variants:
            outcomes = {(a["resource_name"], a["decision"], a["outcome"]) for a in _audits(record, variant)}
            assert outcomes == {("annotate", "allow", "ok"), ("open_ticket", "replay", "replayed")}, outcomes
        _table_matches_audits(record)


def _noise_on_every_pair_and_baseline_3_cleaned_up(record: dict[str, Any], result: dict[str, Any]) -> None:
    """aa_replays=2: the noise was measured on more than one pair of baselines (baseline~baseline_2 and
    baseline~baseline_3), and the cleanup dropped baseline_3's fork and deleted its action-state and result topics as
    it did the other variants'. (summary.json is the whole result: the XCom summary's ``noise_pairs`` is its
    ``counts.noise_pairs``.)"""
    assert result["counts"]["noise_pairs"] == 2, result["counts"]
    states = record["task_states"]
    assert states["fork_memory_baseline_3"] == states["replay_baseline_3"] == "success", states
    drops = record["cleanup"]["forks_dropped"]
    assert list(drops) == [v["variant"] for v in record["variants"]], drops
    # dropped, not kept; baseline_3's fork held memories exactly when the others' did (copies of one fork)
    assert all(d and not d["kept"] for d in drops.values()) and len({d["existed"] for d in drops.values()}) == 1, drops
    extra = next(v for v in record["variants"] if v["variant"] == "baseline_3")
    assert extra["fork_namespace"] == drops["baseline_3"]["namespace"]["user_id"], (extra, drops["baseline_3"])
    deleted = set(record["action_state"]["cleanup"]["deleted"])
    topic = extra["action_state_topic"]
    assert {topic, f"{topic}-outputs", f"{topic}-audit"} <= deleted and len(deleted) == 3 * 4, deleted


def test_changed_tools_are_exercised_and_the_candidate_fails_naming_their_fields(production: Any) -> None:
    record = gate(production, f"{JOB}:changed_tool")
    assert record["verdict"] == "FAIL", summary(record)
    failing = {f for r in record["reasons"] if r["severity"] == "fail" for f in r["fields"]}
    assert {"$.review", "$.ticket"} <= failing, record["reasons"]
    assert record["agent_check"]["changed"] == {"annotate": "changed", "open_ticket": "changed"}
    # never served production's recording: the pure tool ran, the side effect was recorded
    candidate = {(a["resource_name"], a["decision"], a["outcome"]) for a in _audits(record, "candidate")}
    assert candidate == {("annotate", "allow", "ok"), ("open_ticket", "record", "recorded")}, candidate
    _table_matches_audits(record)
    baseline = {(a["resource_name"], a["outcome"]) for a in _audits(record, "baseline")}
    assert ("open_ticket", "replayed") in baseline, baseline
    changed = _reasons(record, "CHANGED_RESOURCES")
    assert changed, comparison(record).get("reasons")
    text = changed[0]["message"]
    assert "annotate" in text and "open_ticket" in text, text
    _one_key_text(record)


def _one_key_text(record: dict[str, Any]) -> None:
    """Audit records, side-effect findings and output examples name the agent key by the same text (issue 48): the
    job keys by a function (``key_selector=review_id``, pickled), and the key is the output's ``$.id``, never the
    key's hash."""
    ids = {f"item-{i}" for i in range(5)}
    result = comparison(record)
    audit_keys = {a["key"] for v in ("baseline", "baseline_2", "candidate") for a in _audits(record, v)}
    assert audit_keys and audit_keys <= ids, audit_keys
    changes = [c["key"] for r in result["resources"] for c in r["changes"]]
    assert changes and set(changes) <= ids, result["resources"]
    outcome = _reasons(record, "SIDE_EFFECT_OUTCOME")
    assert outcome and any(f"e.g. key {k}:" in outcome[0]["message"] for k in ids), outcome
    examples = {e["key"] for e in result["examples"]}
    assert examples and examples <= ids, examples


def test_a_refused_candidate_fails_the_agent_check_alone(production: Any) -> None:
    record = gate(production, f"{JOB}:plain_subclass")
    assert record["_exit"] != 0 and record["verdict"] is None
    assert "empty plan" in (record["refusal"] or ""), record.get("refusal")
    failed = {t for t, s in record["task_states"].items() if s == "failed"}
    assert failed == {"agent_check"}, record["task_states"]
    assert record["task_states"]["verify_production_memory"] == "skipped"
    # nothing was stopped: the run never held production's lease, so there is nothing for it to resume, and the
    # check that production runs as it should passes
    assert record["task_states"]["resume_production"] == "skipped", record["task_states"]
    assert all(record["task_states"][t] == "success" for t in ("assert_production", "drop_forks",
                                                                "delete_replay_topics"))
    assert "REFUSED by the agent check" in record["_printed"]
