"""Mem0 memory fork for a replay: fork production's namespace, check it stayed untouched, drop the fork.

Step 3 (fork) and part of step 9 (cleanup) of the replay chain. Thin over :class:`Mem0Hook`; each pushes
a pydantic result (``model_dump(mode="json")``) to XCom:

* :class:`ForkMem0NamespaceOperator` → :class:`~airflow_flink_replay.core.memory_fork.ForkResult`
* :class:`PrecopyMem0NamespaceOperator` → :class:`~airflow_flink_replay.core.memory_fork.ForkResult`
  (``kind="precopy"``)
* :class:`VerifyMem0UntouchedOperator` → :class:`~airflow_flink_replay.core.memory_fork.UntouchedReport`
* :class:`DropMem0ForkOperator` → :class:`~airflow_flink_replay.core.memory_fork.DropResult`
* :class:`DropMem0ForksOperator` → a :class:`~airflow_flink_replay.core.memory_fork.DropResult` by fork label
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from airflow_flink_replay.core.memory_fork import ForkResult, Mem0Namespace, check_fork_pair
from airflow_flink_replay.exceptions import ForkConflictError, NoForkError, NotAForkError
from airflow_flink_replay.hooks.mem0 import Mem0Hook
from airflow_flink_replay.memory.journal_reader import MemoryJournalHook

NamespaceArg = Mem0Namespace | dict[str, Any] | str


def _flag(value: Any, field: str) -> bool:
    """A bool from a bool, or from a rendered template / XCom string ("true"/"false")."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off", "", "none"):
        return False
    raise AirflowFailException(f"{field}: expected true or false, got {value!r}")


def _namespace(value: NamespaceArg, field: str) -> Mem0Namespace:
    try:
        return Mem0Namespace.coerce(value, what=field)
    except ValueError as exc:
        raise AirflowFailException(str(exc)) from exc


class ForkMem0NamespaceOperator(BaseOperator):
    """Fork production's Mem0 namespace into the replay's namespace (vector level, no re-embedding).

    Run it while production is stopped for the savepoint, so the fork equals the savepoint instant. After a
    :class:`PrecopyMem0NamespaceOperator` of the same ``fork_id`` and target it copies only what changed
    since the pre-copy (``delta=True`` in the result); otherwise everything.

    :param source: production's namespace: a mapping with ``user_id``/``agent_id``/``run_id``, a JSON
        object string, or a bare string taken as ``user_id`` (Flink Agents: the job identifier).
    :param target: the replay's namespace, setting the same fields as ``source`` (e.g.
        ``"replay-{{ run_id }}"``); it becomes the replay job's ``job-identifier``.
    :param fork_id: identity of this fork (default: the DAG run id). A retry with the same id after a
        complete fork is a no-op; a target holding anything else is refused.
    :param mem0_conn_id: connection of type ``mem0``.
    :param batch_size: records per read/write batch.
    :param stop_window: a ``StopWindowOperator``'s result (templated). When its window forked ``target`` at the
        cut, that fork is returned as it is and the store is not touched.
    """

    template_fields: Sequence[str] = ("source", "target", "fork_id", "mem0_conn_id", "stop_window")
    ui_color = "#e8f4e8"

    def __init__(
        self,
        *,
        source: NamespaceArg,
        target: NamespaceArg,
        fork_id: str = "{{ run_id }}",
        mem0_conn_id: str = Mem0Hook.default_conn_name,
        batch_size: int = 5000,
        stop_window: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.target = target
        self.fork_id = fork_id
        self.mem0_conn_id = mem0_conn_id
        self.batch_size = batch_size
        self.stop_window = stop_window

    @cached_property
    def hook(self) -> Mem0Hook:
        """The Mem0 hook."""
        return Mem0Hook(mem0_conn_id=self.mem0_conn_id, batch_size=self.batch_size)

    def _call(self, hook: Mem0Hook, source: Mem0Namespace, target: Mem0Namespace) -> ForkResult:
        return hook.fork(source, target, fork_id=str(self.fork_id))

    def execute(self, context: Any) -> dict[str, Any] | None:
        """Fork and return the :class:`ForkResult` as JSON-ready dict (never None here; the pre-copy
        subclass returns None when its store fails)."""
        source = _namespace(self.source, "source")
        target = _namespace(self.target, "target")
        cut: dict[str, Any] = ((self.stop_window or {}).get("window") or {}).get("memory_cut") or {}
        same = bool(cut) and cut["fork_id"] == str(self.fork_id)
        if same and Mem0Namespace.coerce(cut["target"], what="the cut's target") == target:
            self.log.info("%s was forked at the cut, inside the stop window: nothing to do", target)
            self._report(ForkResult.model_validate(cut))
            return dict(cut)
        try:
            result = self._call(self.hook, source, target)
        except (ForkConflictError, ValueError) as exc:
            raise AirflowFailException(str(exc)) from exc
        self._report(result)
        return result.model_dump(mode="json")

    def _report(self, result: ForkResult) -> None:
        what = "pre-copied" if result.kind == "precopy" else "forked"
        self.log.info(
            "%s %d memories %s → %s in %.3f s (source fingerprint %s)%s",
            "already complete (no-op):" if result.noop else what,
            result.count,
            result.source,
            result.target,
            result.duration_s,
            result.source_fingerprint[:16],
            f"; delta since the pre-copy of {result.precopied_at}: {result.added} added, {result.updated} updated, "
            f"{result.removed} removed"
            if result.delta
            else "",
        )


class PrecopyMem0NamespaceOperator(ForkMem0NamespaceOperator):
    """Pre-copy production's Mem0 namespace into the replay's namespace while production runs.

    Takes the bulk copy out of production's stop window: the :class:`ForkMem0NamespaceOperator` with the
    same ``fork_id`` and target, run at the cut, then copies only the memories added, updated or deleted
    since (an exact per-memory content-digest diff, see ``docs/memory-fork.md``). Same arguments. Retried,
    it runs one more delta round; a hosted-Mem0 connection makes it a no-op (the fork copies in full).

    :param memory_journal_topic: production's memory journal (``production.memory_journal_topic``): its position
        is noted before the source is read, so the cut in the stop window reads only what production wrote since
        (an unreachable journal: noted nowhere, the cut reads the whole namespace).
    :param kafka_config_id: the Kafka connection of the journal.
    """

    template_fields: Sequence[str] = (*ForkMem0NamespaceOperator.template_fields, "memory_journal_topic")
    ui_color = "#f0f8f0"

    def __init__(
        self, *, memory_journal_topic: str | None = None, kafka_config_id: str = "kafka_default", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.memory_journal_topic = memory_journal_topic
        self.kafka_config_id = kafka_config_id

    def _call(self, hook: Mem0Hook, source: Mem0Namespace, target: Mem0Namespace) -> ForkResult:
        journal = None
        if self.memory_journal_topic:
            journal = MemoryJournalHook(self.memory_journal_topic, kafka_config_id=self.kafka_config_id)
            try:
                journal.ready()
            except Exception as exc:  # the cut then reads everything, as without a journal
                self.log.warning("memory journal %s not readable (%s: %s): the cut will read the whole namespace",
                                 self.memory_journal_topic, type(exc).__name__, exc)
                journal.close()
                journal = None
        try:
            return hook.precopy(source, target, fork_id=str(self.fork_id), journal=journal)
        finally:
            if journal is not None:
                journal.close()

    def execute(self, context: Any) -> dict[str, Any] | None:
        """Pre-copy and return the :class:`ForkResult`; None when the store failed (the fork copies in full).

        The pre-copy only shortens the stop window, so a store error does not fail the run here: it is
        logged and the fork at the cut copies everything, as without a pre-copy (what the pre-copy wrote
        is removed, or removed by the fork as leftovers). A refusal (a target in use, a bad namespace)
        fails at once: the fork would refuse the same target, and nothing is stopped yet.
        """
        source = _namespace(self.source, "source")
        target = _namespace(self.target, "target")
        try:
            check_fork_pair(source, target)
        except ValueError as exc:
            raise AirflowFailException(str(exc)) from exc
        if not str(self.fork_id or "").strip():
            raise AirflowFailException("fork_id: give the replay run's id (e.g. the Airflow run_id)")
        try:
            result = self._call(self.hook, source, target)
        except ForkConflictError as exc:
            raise AirflowFailException(str(exc)) from exc
        except Exception as exc:  # the store (an unreachable Chroma raises ValueError): the fork copies in full
            self.log.warning(
                "pre-copy of %s failed (%s: %s): the fork copies in full inside the stop window",
                source, type(exc).__name__, exc,
            )  # fmt: skip
            return None
        self._report(result)
        return result.model_dump(mode="json")


class VerifyMem0UntouchedOperator(BaseOperator):
    """After the replay: check that production's namespace was not changed by the replay.

    Recomputes the digests of the fork's source namespace and compares them with the snapshot recorded
    at fork time. Changes carrying fork provenance are the replay's and fail the task; other changes are
    production's own writes since it resumed and are reported, not failed — unless
    ``production_writes_expected=False`` (production stayed stopped), where any change fails. A target that
    holds no complete fork (the run stopped before the fork: a refused agent check, a failed preflight) skips
    the task: no replay ran against that fork, so there is nothing to verify and no second failure to report.

    :param target: the fork (replay) namespace; its manifest names the source.
    """

    template_fields: Sequence[str] = ("target", "production_writes_expected", "mem0_conn_id")

    def __init__(
        self,
        *,
        target: NamespaceArg,
        production_writes_expected: bool | str = True,
        mem0_conn_id: str = Mem0Hook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.production_writes_expected = production_writes_expected
        self.mem0_conn_id = mem0_conn_id

    @cached_property
    def hook(self) -> Mem0Hook:
        """The Mem0 hook."""
        return Mem0Hook(mem0_conn_id=self.mem0_conn_id)

    def execute(self, context: Any) -> dict[str, Any]:
        """Verify and return the :class:`UntouchedReport` (fails on a replay leak)."""
        hook = self.hook
        try:
            report = hook.verify_untouched(
                _namespace(self.target, "target"),
                production_writes_expected=_flag(self.production_writes_expected, "production_writes_expected"),
            )
        except NoForkError as exc:  # nothing forked (e.g. the agent check refused): no replay read production
            raise AirflowSkipException(f"nothing to verify: {exc}") from exc
        except RuntimeError as exc:
            raise AirflowFailException(str(exc)) from exc
        self.log.info(
            "%s: added=%d removed=%d changed=%d",
            report.reason,
            len(report.added),
            len(report.removed),
            len(report.changed),
        )
        if not report.ok:
            context["ti"].xcom_push(key="report", value=report.model_dump(mode="json"))
            more = f" (+{len(report.replay_leak_ids) - 10} more)" if len(report.replay_leak_ids) > 10 else ""
            raise AirflowFailException(
                f"{report.reason}. Replay leak ids: {report.replay_leak_ids[:10]}{more}; full report in XCom 'report'"
            )
        return report.model_dump(mode="json")


class DropMem0ForkOperator(BaseOperator):
    """Drop the replay's memory fork (cleanup; runs whatever happened upstream: ``all_done``).

    Only namespaces carrying this project's fork provenance are dropped; a production namespace is
    refused. An empty namespace is a no-op.

    :param namespace: the fork namespace.
    :param keep: keep the fork for debugging (the task only reports it); templated, so an XCom or a
        DAG param (``"{{ params.keep_fork }}"``) works.
    """

    template_fields: Sequence[str] = ("namespace", "keep", "mem0_conn_id")

    def __init__(
        self,
        *,
        namespace: NamespaceArg,
        keep: bool = False,
        mem0_conn_id: str = Mem0Hook.default_conn_name,
        trigger_rule: str = "all_done",
        **kwargs: Any,
    ) -> None:
        super().__init__(trigger_rule=trigger_rule, **kwargs)
        self.namespace = namespace
        self.keep = keep
        self.mem0_conn_id = mem0_conn_id

    @cached_property
    def hook(self) -> Mem0Hook:
        """The Mem0 hook."""
        return Mem0Hook(mem0_conn_id=self.mem0_conn_id)

    def execute(self, context: Any) -> dict[str, Any]:
        """Drop (or keep) the fork and return the :class:`DropResult`."""
        hook = self.hook
        try:
            result = hook.drop(_namespace(self.namespace, "namespace"), keep=_flag(self.keep, "keep"))
        except NotAForkError as exc:
            raise AirflowFailException(str(exc)) from exc
        self.log.info("drop %s: %s", result.namespace, result.model_dump(mode="json"))
        return result.model_dump(mode="json")


class DropMem0ForksOperator(DropMem0ForkOperator):
    """Drop several memory forks in one task (the replay DAG's ``drop_forks``: one Mem0 client for every
    variant's fork instead of one task, process and client each).

    Every fork is tried even when one fails; the task then fails naming each failure (a retry drops what is
    left: dropping a dropped fork is a no-op). A production namespace is refused as in
    :class:`DropMem0ForkOperator`.

    :param namespaces: the forks by label (e.g. variant), each as ``namespace`` there (templated).
    :param keep: keep the forks for debugging (templated).
    """

    template_fields: Sequence[str] = ("namespaces", "keep", "mem0_conn_id")

    def __init__(self, *, namespaces: Mapping[str, NamespaceArg] | Any, **kwargs: Any) -> None:
        super().__init__(namespace="", **kwargs)
        self.namespaces = namespaces

    def execute(self, context: Any) -> dict[str, Any]:  # type: ignore[override]
        """Drop (or keep) every fork; return the :class:`DropResult` by label."""
        if not isinstance(self.namespaces, Mapping):
            raise AirflowFailException(f"namespaces: expected a mapping of label to namespace, got {self.namespaces!r}")
        hook, keep = self.hook, _flag(self.keep, "keep")
        results: dict[str, Any] = {}
        failed: list[str] = []
        for label, namespace in self.namespaces.items():
            try:
                result = hook.drop(_namespace(namespace, f"namespaces[{label!r}]"), keep=keep)
            except Exception as exc:  # every fork is tried; the task fails below, naming each failure
                self.log.error("drop %s (%s) failed: %s", label, namespace, exc)
                failed.append(f"{label}: {type(exc).__name__}: {exc}")
                continue
            self.log.info("drop %s %s: %s", label, result.namespace, result.model_dump(mode="json"))
            results[label] = result.model_dump(mode="json")
        if failed:
            context["ti"].xcom_push(key="dropped", value=results)
            raise AirflowException("could not drop every memory fork (a retry drops what is left):\n"
                                   + "\n".join(failed))
        return results
