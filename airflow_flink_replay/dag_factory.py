"""Build the replay DAGs from a :class:`ReplaySpec`: UI-triggered, nightly, and the pre-release gate.

The stages live in :mod:`airflow_flink_replay.replay_dag` (task ids and XCom keys in ``ids``, the run's
values in ``run``, one builder per stage in ``stages``); this module assembles them into a DAG.

One chain (docs/concepts.md), three front doors::

    resolve → preflight → choose_start ─┬→ offsets_before_quiesce → quiesce → start_offsets
                                        └→ reuse_manifest (quiesce_mode=existing)
      → fork_memory_baseline ─┬→ resume_production (all_done) → capture_window → manifest
                              └→ fork_memory_{baseline_2,[baseline_3…],candidate} (copies of the baseline's fork)
      → isolate_action_state → replay_from → submit_replays → replay (one per variant) → compare (gate)
      → [approve (gate: Asset on PASS)]
    cleanup (all_done): verify production memory, cancel leftover replays, delete replay topics,
      drop the forks (unless kept), write the run record.

Quiesce modes: ``drain`` / ``stop`` stop production with a savepoint (an exact boundary); ``savepoint``
keeps it running (the capture offsets read before and after the savepoint bound the records that raced
it); ``existing`` replays an earlier run's savepoint and window again (``existing_manifest``) and never
touches production — the capture and resume tasks are skipped.

The variants are the spec's (``ReplaySpec.variant_names()``): baseline, baseline-2, the extra A/A replays of
``aa_replays`` (baseline-3 …; none by default) and the candidate. ``aa_replays`` shapes the DAG (one fork and
one replay task per variant), so it is read from the spec when the DAG is built, never from a run's conf.

Each replay variant gets its own memory fork and action-state topic: a baseline's memory writes must not
reach the candidate. In drain/stop modes the forks are taken while production is stopped (the savepoint
instant) — only the baseline's fork holds production stopped: every other variant copies that frozen fork
while production is already running again, so they all start from the same memories in every mode.
"""

from __future__ import annotations

from datetime import UTC, timedelta
from pathlib import Path
from typing import Any, Literal

from airflow.sdk import DAG

from airflow_flink_replay import ids
from airflow_flink_replay.core.replay_spec import ReplaySpec
from airflow_flink_replay.replay_dag import stages
from airflow_flink_replay.replay_dag.run import approved_asset, resolve_run, resolve_task, run_params

__all__ = ["Kind", "approved_asset", "build_replay_dag", "load_spec", "resolve_run", "run_params"]

Kind = Literal["manual", "nightly", "gate"]
_DOCS = {
    "manual": "Replay production's last window with a candidate agent (Params form).",
    "nightly": "Nightly: the baselines against each other on the last window (noise floor, drift), candidate if "
    "configured.",
    "gate": "Pre-release gate, triggered over the REST API with `conf.candidate`: FAIL fails the run, PASS "
    "emits the Asset {asset}.",
}


def build_replay_dag(
    spec: ReplaySpec,
    *,
    dag_id: str,
    kind: Kind = "manual",
    schedule: Any = None,
    tags: list[str] | None = None,
    default_args: dict[str, Any] | None = None,
) -> DAG:
    """Build one replay DAG for ``spec`` (see the module doc for the chain)."""
    gate = kind == "gate"
    with DAG(
        dag_id=dag_id,
        schedule=schedule,
        start_date=None if schedule is None else _epoch(),
        catchup=False,
        max_active_runs=1,
        params=run_params(spec) if kind == "manual" else {},
        tags=["flink-agents", "replay", *(tags or [])],
        doc_md=_DOCS[kind].format(asset=approved_asset(spec).uri),
        default_args={"retries": 0, "retry_delay": timedelta(seconds=10), **(default_args or {})},
    ) as dag:
        run = resolve_task(spec, dag_id)  # an XComArg: run[key] pulls that key of the resolved run
        capture = stages.capture(spec, run)
        memory = stages.memory(spec, run, capture)
        changed = capture.agent_check.output[ids.XCOM_CHANGED_RESOURCES_KEY]  # kept off the cassette, reported
        replay = stages.replay(spec, run, changed=changed)
        compare = stages.compare(spec, run, gate=gate, changed=changed)
        cleanup = stages.cleanup(spec, run, isolate=replay.isolate, cap=capture)
        stages.wire(capture, memory, replay, compare, cleanup)
    return dag


def _epoch() -> Any:
    from datetime import datetime

    return datetime(2026, 1, 1, tzinfo=UTC)


def load_spec(path: str | Path | None = None) -> ReplaySpec:
    """The spec for the DAG files: ``path``, ``$FLINK_REPLAY_SPEC``, or the demo's spec in ``.stack/``."""
    import os

    candidates = [path, os.environ.get("FLINK_REPLAY_SPEC"),
                  Path(__file__).resolve().parent.parent / ".stack" / "demo" / "replay_spec.yaml"]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return ReplaySpec.from_yaml(candidate)
    raise FileNotFoundError(
        "no replay spec: set FLINK_REPLAY_SPEC to a ReplaySpec YAML (see docs/operators.md), or run "
        "`flink-replay demo setup` to write the demo's"
    )
