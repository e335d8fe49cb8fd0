"""The run record: one JSON document per replay run that chains every artefact with its digest.

manifest → savepoint → memory forks → isolated topics → replay jobs → outputs/audits → report → verdict.
Written next to the manifest by the DAG's last task (whatever happened), so a person can follow a
verdict back to the exact input, state and code that produced it. Pure: pydantic + hashlib.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

RUN_RECORD_SCHEMA = 1


def file_digest(path: str | Path) -> str | None:
    """sha256 of a local file, or of every file below a folder (sorted by relative path); None if absent."""
    p = Path(str(path).removeprefix("file://"))
    if not p.exists():
        return None
    h = hashlib.sha256()
    files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    for f in files:
        if p.is_dir():
            h.update(str(f.relative_to(p)).encode() + b"\0")
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


class VariantRecord(BaseModel):
    """What one replay variant ran on and produced."""

    variant: str
    agent_factory: str
    job_id: str | None = None
    state: str | None = None
    fork_namespace: str | None = None
    action_state_topic: str | None = None
    output: str | None = None
    output_digest: str | None = None
    output_records: int | None = None
    audit: str | None = None
    audit_digest: str | None = None
    unmediated_calls: dict[str, int] | None = Field(
        default=None, description="calls made outside every resource, per kind (socket, dns, subprocess, file)"
    )
    cassette_calls: dict[str, int] | None = Field(
        default=None,
        description="'replay' decisions served production's recorded result (replayed; of them by_arguments: "
        "matched by their identifying arguments, free text worded otherwise) or not (unmatched)",
    )
    results: dict[str, dict[str, Any]] | None = Field(
        default=None,
        description="outputs and audit: records read back, kept, and dropped as sent twice by a restart (a job "
        "that wrote files: the lines collected, read = kept)",
    )
    duration_s: float | None = None
    capacity_wait_s: float | None = Field(
        default=None, description="seconds the submission waited for free task slots on the replay cluster"
    )
    submit_lock_wait_s: float | None = Field(
        default=None, description="seconds the submission waited for the JobManager's submission lock"
    )


class RunRecord(BaseModel):
    """The chain of one replay run (``run_record.json`` in the run folder)."""

    schema_version: int = RUN_RECORD_SCHEMA
    spec_name: str
    dag_id: str
    run_id: str
    created_at: datetime
    manifest: str | None = None
    manifest_digest: str | None = None
    agent_check: dict[str, Any] | None = None
    refusal: str | None = Field(
        default=None, description="why the agent check refused the run (nothing was stopped, forked or replayed)"
    )
    savepoint: dict[str, Any] | None = None
    production_resumed: dict[str, Any] | None = None
    lease: dict[str, Any] | None = Field(
        default=None,
        description="production's lease as the last task that held it left it: holder (dag_id/run_id), acquired_at, "
        "released_at, released_by, waited_s, took_over; a run that never got it: held_by, the run that held it",
    )
    downtime_s: float | None = None
    memory_forks: list[dict[str, Any]] = Field(default_factory=list)
    production_memory_check: dict[str, Any] | None = None
    action_state: dict[str, Any] | None = None
    variants: list[VariantRecord] = Field(default_factory=list)
    report_dir: str | None = None
    report_digests: dict[str, str | None] = Field(default_factory=dict)
    verdict: str | None = None
    reasons: list[dict[str, Any]] = Field(default_factory=list)
    fidelity: float | None = Field(
        default=None, description="share of the baseline's outputs equal to production's own (output_topic given)"
    )
    fidelity_self: float | None = Field(
        default=None, description="share of the baseline's outputs equal to baseline-2's, measured the same way"
    )
    noise: dict[str, float] = Field(
        default_factory=dict, description="fields in which the two baselines differed: path -> noise rate"
    )
    task_states: dict[str, str | None] = Field(default_factory=dict)
    cleanup: dict[str, Any] = Field(default_factory=dict)

    def digest(self) -> str:
        """sha256 over the record's canonical JSON."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()
