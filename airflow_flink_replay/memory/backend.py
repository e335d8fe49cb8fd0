"""The seam between :class:`~airflow_flink_replay.hooks.mem0.Mem0Hook` and where the memories live: the
:class:`Mem0Backend` protocol.

Two backends implement it: :class:`~.oss.OssMem0Backend` (a local ``mem0.Memory`` over a vector
store, forked at vector level through :mod:`.stores`) and :class:`~.hosted.HostedMem0Backend`
(the Mem0 platform: export + re-add). The hook picks one from its connection, once, and delegates; what
both share lives here, once: the outcome of forking into a target that already holds something, which
namespace a drop may delete, and the verify-untouched classification (:func:`untouched_report`, fed by
the hook from :meth:`Mem0Backend.fork_baseline` and :meth:`Mem0Backend.digests`).

Backends receive checked arguments: the hook coerces namespaces, checks the fork pair and the fork id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from airflow_flink_replay.core.memory_fork import (
    FORK_ID_FIELD,
    DropResult,
    ForkManifest,
    ForkResult,
    JournalPosition,
    Mem0Namespace,
    UntouchedReport,
    combine_digests,
    diff_snapshots,
    has_provenance,
)
from airflow_flink_replay.exceptions import ForkConflictError, NotAForkError
from airflow_flink_replay.memory.stores import StoredMemory

__all__ = [
    "ForkBaseline",
    "Mem0Backend",
    "completed_fork",
    "fork_id_to_drop",
    "refuse_foreign",
    "untouched_report",
]


@dataclass(frozen=True)
class ForkBaseline:
    """What a fork recorded about its source at fork time: verify-untouched compares the source with it.

    ``snapshot`` is ``{source memory id: truncated digest hex}``; ``note`` explains a partial baseline
    (hosted Mem0: fork copies the replay deleted).
    """

    fork_id: str
    source: Mem0Namespace
    target: Mem0Namespace
    count: int
    fingerprint: str
    snapshot: dict[str, str]
    note: str = ""


class MemoryJournalReader(Protocol):
    """Production's memory journal as the cut reads it (:class:`~.journal_reader.MemoryJournalHook`)."""

    def position(self) -> JournalPosition:
        """The journal's end offsets now."""
        ...

    def ids_since(self, position: JournalPosition) -> set[str]:
        """Every memory id the journal names after ``position``, to the end of its log."""
        ...


@runtime_checkable
class Mem0Backend(Protocol):
    """Namespace operations of one Mem0 deployment (what
    :class:`~airflow_flink_replay.hooks.mem0.Mem0Hook` delegates to)."""

    def check(self) -> str:
        """Reach the deployment; return a one-line description (``test_connection``)."""
        ...

    def count(self, namespace: Mem0Namespace) -> int:
        """Number of memories in a namespace."""
        ...

    def list_memories(self, namespace: Mem0Namespace, *, with_vectors: bool = False) -> list[StoredMemory]:
        """Every memory of a namespace as stored (vectors where the backend exposes them)."""
        ...

    def digests(self, namespace: Mem0Namespace) -> tuple[dict[str, bytes], dict[str, dict[str, Any]]]:
        """``({memory id: digest}, {memory id: payload})`` of a namespace now (fingerprints, verify)."""
        ...

    def read_manifest(self, target: Mem0Namespace) -> ForkManifest | None:
        """The complete fork in ``target``, or None."""
        ...

    def fork(
        self,
        source: Mem0Namespace,
        target: Mem0Namespace,
        *,
        fork_id: str,
        journal: MemoryJournalReader | None = None,
        on_source_read: Callable[[], None] | None = None,
    ) -> ForkResult:
        """Copy ``source`` into ``target``: no-op when this fork is complete, refuse a target in use,
        remove what it wrote on error (see :meth:`~airflow_flink_replay.hooks.mem0.Mem0Hook.fork`)."""
        ...

    def precopy(
        self, source: Mem0Namespace, target: Mem0Namespace, *, fork_id: str, journal: MemoryJournalReader | None = None
    ) -> ForkResult:
        """Copy ``source`` into ``target`` ahead of the cut, so that :meth:`fork` then copies only the changes
        (see :meth:`~airflow_flink_replay.hooks.mem0.Mem0Hook.precopy`); a backend without deltas returns a
        no-op result."""
        ...

    def drop(self, namespace: Mem0Namespace, *, keep: bool = False) -> DropResult:
        """Delete a fork namespace; refuse one that is not a fork (:func:`fork_id_to_drop`)."""
        ...

    def fork_baseline(self, target: Mem0Namespace) -> ForkBaseline:
        """The fork in ``target`` as verify-untouched needs it; ``RuntimeError`` when there is none."""
        ...


# --------------------------------------------------------------------------- shared fork/drop rules
def completed_fork(
    manifest: ForkManifest, source: Mem0Namespace, target: Mem0Namespace, fork_id: str, duration_s: float
) -> ForkResult:
    """A fork into a target that holds a complete fork: the recorded result (``noop``) when it is this
    fork of this source, else :class:`ForkConflictError`."""
    if manifest.fork_id == fork_id and manifest.source == source:
        return ForkResult(**manifest.model_dump(exclude={"snapshot_parts"}), duration_s=duration_s, noop=True)
    raise ForkConflictError(
        f"target {target} already holds fork {manifest.fork_id!r} of {manifest.source}. "
        "Fix: drop it first (DropMem0ForkOperator) or choose another target namespace"
    )


def refuse_foreign(target: Mem0Namespace, fork_id: str, payloads: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse a target holding memories that are not leftovers of this same fork (never delete them)."""
    foreign = [i for i, p in payloads.items() if p.get(FORK_ID_FIELD) != fork_id]
    if foreign:
        raise ForkConflictError(
            f"target {target} already holds {len(foreign)} memories that are not from fork {fork_id!r} "
            f"(e.g. {foreign[0]}): refusing to write into a namespace in use. Fix: choose another target "
            "namespace (the replay's own, e.g. replay-<run id>)"
        )


def fork_id_to_drop(
    namespace: Mem0Namespace, manifest_fork_id: str | None, payloads: Mapping[str, Mapping[str, Any]]
) -> str | None:
    """The fork id a drop of ``namespace`` removes, or None when there is nothing to drop.

    A namespace with a complete fork is a fork; without one it is an interrupted fork only when every
    memory in it carries fork provenance; anything else raises :class:`NotAForkError`.
    """
    if manifest_fork_id is not None:
        return manifest_fork_id
    if not payloads:
        return None
    untagged = [i for i, p in payloads.items() if not has_provenance(p)]
    if untagged:
        raise NotAForkError(
            f"namespace {namespace} is not a fork made by airflow-flink-replay ({len(untagged)} memories without "
            "fork provenance, no complete fork): refusing to drop it. Fix: name the replay's fork namespace "
            "(the fork task's target), never production's"
        )
    return str(next(iter(payloads.values())).get(FORK_ID_FIELD))


# ------------------------------------------------------------------------------- verify-untouched
def untouched_report(
    baseline: ForkBaseline,
    *,
    now: Mapping[str, bytes],
    payloads: Mapping[str, Mapping[str, Any]],
    production_writes_expected: bool,
) -> UntouchedReport:
    """Classify the changes of the source namespace since the fork (both backends).

    ``now`` is the current ``{id: digest}`` and ``payloads`` the current payloads of the source. Equal
    fingerprints mean unchanged. Otherwise every added/removed/changed id is listed; added or changed
    memories carrying fork provenance are a **replay leak**, and with ``production_writes_expected=False``
    every change is; the rest are production's own changes (reported, ``ok`` stays true).
    """
    fingerprint_now = combine_digests(now.values())
    unchanged = fingerprint_now == baseline.fingerprint
    added, removed, changed = ([], [], []) if unchanged else diff_snapshots(baseline.snapshot, now)
    touched = added + removed + changed
    if production_writes_expected:
        leak = sorted(i for i in added + changed if has_provenance(payloads.get(i) or {}))
    else:
        leak = sorted(touched)
    production = sorted(set(touched) - set(leak))
    source = baseline.source
    if leak:
        reason = f"{len(leak)} change(s) to production namespace {source} attributed to the replay" + (
            "" if production_writes_expected else " (production declared stopped)"
        )
        if production:
            reason += f"; {len(production)} other change(s) by production itself"
    elif touched:
        reason = f"{len(touched)} change(s) by production itself since the fork; none from the replay"
    elif not unchanged:
        reason = f"production namespace {source} changed since the fork (fingerprint differs)"
    else:
        reason = "production namespace unchanged since the fork"
    if baseline.note:
        reason += f" ({baseline.note})"
    return UntouchedReport(
        fork_id=baseline.fork_id,
        source=source,
        target=baseline.target,
        fingerprint_at_fork=baseline.fingerprint,
        fingerprint_now=fingerprint_now,
        count_at_fork=baseline.count,
        count_now=len(now),
        unchanged=unchanged,
        added=added,
        removed=removed,
        changed=changed,
        replay_leak_ids=leak,
        production_change_ids=production,
        production_writes_expected=production_writes_expected,
        ok=not leak and (production_writes_expected or unchanged),
        reason=reason,
    )
