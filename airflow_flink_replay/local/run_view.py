"""The console view of one replay DAG run: one line per chain step, then the verdict and its reasons.

Built from what the run left, never from its log: the task instances' states and times (the step's
duration is the wall-clock span of its tasks) and the run record (:class:`RunRecord`: savepoint,
downtime, memory forks, replay outputs, verdict), plus the manifest the record points to (records in
the window). The full Airflow log is in a file; this is what a person reads first.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from airflow_flink_replay import ids
from airflow_flink_replay.core.replay_spec import MAX_AA_REPLAYS, variant_names

#: Reasons shown on the console (the rest are in the report), and their length.
MAX_REASONS = 4
MAX_REASON_CHARS = 180


class _Task(Protocol):
    task_id: str
    state: str | None
    start: datetime | None
    end: datetime | None


def chain_steps() -> list[tuple[str, list[str]]]:
    """The replay chain as a person reads it: each step's name and the DAG tasks it is made of (the per-variant
    tasks of every variant a spec can have: a run shows those its DAG had)."""
    variants = variant_names(MAX_AA_REPLAYS)
    return [
        ("preflight", [ids.TASK_RESOLVE, ids.TASK_PREFLIGHT, ids.TASK_CHOOSE_START, ids.TASK_OFFSETS_BEFORE_QUIESCE]),
        ("agent check", [ids.TASK_AGENT_CHECK]),
        ("savepoint", [ids.TASK_QUIESCE, ids.TASK_REUSE_MANIFEST]),
        ("production resumed", [ids.TASK_RESUME_PRODUCTION]),
        ("capture window", [ids.TASK_START_OFFSETS, ids.TASK_CAPTURE_WINDOW, ids.TASK_MANIFEST]),
        ("memory forks", [ids.TASK_PRECOPY_MEMORY, *(ids.fork_task(v) for v in variants)]),
        ("replays", [ids.TASK_ISOLATE_ACTION_STATE, ids.TASK_REPLAY_FROM, ids.TASK_SUBMIT_REPLAYS,
                     *(ids.replay_task(v) for v in variants)]),
        ("compare", [ids.TASK_COMPARE, ids.TASK_APPROVE]),
        ("cleanup", [ids.TASK_VERIFY_PRODUCTION_MEMORY, ids.TASK_CANCEL_LEFTOVER_REPLAYS, ids.TASK_DELETE_REPLAY_TOPICS,
                     ids.TASK_DROP_FORKS, ids.TASK_ASSERT_PRODUCTION, ids.TASK_RUN_RECORD]),
    ]


def render_run(tasks: list[Any], record: dict[str, Any] | None, record_path: str | None) -> list[str]:
    """The console lines of one run: the chain steps, the verdict, its reasons, where the report is."""
    record = record or {}
    by_id: dict[str, _Task] = {t.task_id: t for t in tasks}
    figures = _figures(record)
    lines = []
    steps = chain_steps()
    known = {t for _, task_ids in steps for t in task_ids}
    steps.append(("other tasks", sorted(t for t in by_id if t not in known)))  # a task added to the DAG later
    for name, task_ids in steps:
        mine = [by_id[t] for t in task_ids if t in by_id]
        ran = [t for t in mine if t.state not in (None, "skipped", "removed")]
        if not ran:
            continue
        failed = _failures(ran, record)
        unfinished = [t.task_id for t in ran if t.state not in ("success", "failed", "upstream_failed")]
        figure = f"FAILED: {', '.join(failed)}" if failed else figures.get(name, "")
        if failed and figures.get(name, "").startswith("REFUSED"):
            figure = f"FAILED: {figures[name]}"
        if all(t.state == "upstream_failed" for t in ran):
            figure = "not run (a step before it failed)"
        if unfinished and not failed and name != "cleanup":
            figure = f"{figure} (not finished: {', '.join(unfinished)})".strip()
        lines.append(f"  {name:<19} {_span(ran):>7}  {figure}".rstrip())
    lines.extend(_verdict_lines(record, record_path))
    return lines


def _failures(ran: list[_Task], record: dict[str, Any]) -> list[str]:
    """The step's tasks that failed for a reason of their own. Not shown: tasks that did not run because
    one before them failed (``upstream_failed``), the gate's ``compare`` on a FAIL verdict and ``run_record``
    failing the run after writing the record — both by design, and the verdict line says why."""
    return [
        t.task_id for t in ran
        if t.state in ("failed", "up_for_retry")
        and not (t.task_id == ids.TASK_COMPARE and record.get("verdict") == "FAIL")
        and not (t.task_id == ids.TASK_RUN_RECORD and record)
    ]


def _span(tasks: list[_Task]) -> str:
    starts = [t.start for t in tasks if t.start]
    ends = [t.end for t in tasks if t.end]
    if not starts or not ends:
        return "-"
    return f"{(max(ends) - min(starts)).total_seconds():.1f}s"


def _figures(record: dict[str, Any]) -> dict[str, str]:
    """The key figure of each chain step, from the run record (and the manifest it points to)."""
    out: dict[str, str] = {}
    check = _agent_check(record.get("agent_check"))
    if check:
        out["agent check"] = check
    savepoint = record.get("savepoint") or {}
    if savepoint.get("job_name"):
        out["preflight"] = f"production {savepoint['job_name']} (Flink job {savepoint.get('job_id', '?')})"
    if savepoint.get("savepoint_path"):
        how = "reused" if savepoint.get("reused") else savepoint.get("mode", "")
        out["savepoint"] = f"{savepoint['savepoint_path']} ({how})" if how else savepoint["savepoint_path"]
    if record.get("downtime_s") is not None:
        out["production resumed"] = f"downtime {record['downtime_s']:.1f} s (stopped -> running again)"
    window = _window_records(record.get("manifest"))
    if window is not None:
        out["capture window"] = f"{window} records in the window"
    # the record lists the forks in its variants' order (both written for the run's variants)
    names = [v.get("variant") for v in record.get("variants") or []] or variant_names()
    forks = [(v, f.get("count")) for v, f in zip(names, record.get("memory_forks") or [], strict=False) if f]
    if forks:
        counts = {n for _, n in forks}
        out["memory forks"] = (
            f"{forks[0][1]} memories in each of {len(forks)} forks" if len(counts) == 1
            else "memories per fork: " + ", ".join(f"{v} {n}" for v, n in forks)
        )
    outputs = [(v["variant"], v.get("output_records")) for v in record.get("variants") or [] if v.get("job_id")]
    if outputs:
        out["replays"] = "outputs: " + ", ".join(f"{name} {n if n is not None else '?'}" for name, n in outputs)
    if record.get("verdict"):
        out["compare"] = f"verdict {record['verdict']}" + _noise(record) + _fidelity(record)
    drops = ((record.get("cleanup") or {}).get("forks_dropped") or {}).values()
    dropped = [d for d in drops if d and not d.get("kept") and d.get("existed", True)]
    deleted = (((record.get("action_state") or {}).get("cleanup")) or {}).get("deleted")
    if dropped or deleted:
        out["cleanup"] = f"{len(dropped)} memory forks dropped, {len(deleted or [])} replay topics deleted"
    return out


def _noise(record: dict[str, Any]) -> str:
    """The A/A noise in a few words: the noisiest fields and how often the two baselines differed in them."""
    noise = record.get("noise") or {}
    if not noise:
        return ""
    return ", A/A noise " + ", ".join(f"{path.removeprefix('$.')} {rate:.0%}" for path, rate in list(noise.items())[:3])


def _fidelity(record: dict[str, Any]) -> str:
    fidelity, itself = record.get("fidelity"), record.get("fidelity_self")
    if fidelity is None:
        return ""
    text = f", baseline = production for {fidelity:.1%} of its outputs"
    return text + (f" (= baseline-2 for {itself:.1%})" if itself is not None and itself < 1 else "")


def _agent_check(result: dict[str, Any] | None) -> str | None:
    """The agent check in one line: OK with each definition's actions and resources, or why it refused."""
    if not result:
        return None
    checked = result.get("checked") or {}
    if result.get("refused"):
        problem = next(iter(checked.get("problems") or []), "") or "see the report in the run record"
        return f"REFUSED: {problem.splitlines()[0]}"
    definitions = (checked.get("facts") or {}).get("definitions") or []
    return "OK: " + "; ".join(
        f"{d.get('role')} {len(d.get('actions') or [])} actions, {len(d.get('resources') or [])} resources"
        for d in definitions
    )


def _window_records(manifest_uri: str | None) -> int | None:
    """Records in the captured window, summed over the manifest's partitions (None if unreadable)."""
    if not manifest_uri:
        return None
    try:
        manifest = json.loads(Path(manifest_uri.removeprefix("file://")).read_text())
        return sum(int(p["record_count"]) for p in manifest["capture"]["partitions"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _verdict_lines(record: dict[str, Any], record_path: str | None) -> list[str]:
    verdict = record.get("verdict") or ("REFUSED by the agent check" if record.get("refusal") else "no verdict")
    lines = [f"  => {verdict}"]
    reasons = [r for r in record.get("reasons") or [] if r.get("severity") in ("fail", "inconclusive")]
    for reason in reasons[:MAX_REASONS]:
        text = f"[{reason.get('code')}] {reason.get('message', '')}"
        lines.append(f"     {text[:MAX_REASON_CHARS] + '...' if len(text) > MAX_REASON_CHARS else text}")
    if len(reasons) > MAX_REASONS:
        lines.append(f"     (+{len(reasons) - MAX_REASONS} more reasons in the report)")
    if record.get("report_dir"):
        lines.append(f"  report: {Path(record['report_dir']) / 'report.html'}")
    if record_path:
        lines.append(f"  run record: {record_path}")
    return lines
