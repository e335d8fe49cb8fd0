"""Production's whole stop window in one task: stop with savepoint, read the capture end offsets, take the
memory cut, resubmit, wait until RUNNING.

:class:`StopWindowOperator` is the quiesce operator whose completion runs the stop window procedure
(:class:`~airflow_flink_replay.lifecycle.stop_window.ProductionStopWindow`: why one task, what happens inside,
how production always comes back) without deferring, so nothing scheduling does can land inside the window.
The tasks that used to do those steps stay in the DAG as cheap checks: they find the results in this task's
XCom (``window``) and return them. The operator connects the memory store before the stop, wires the hooks
into the procedure, releases production's lease once production RUNS again and fails the task (no retry) after
a window whose offsets or memory cut failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from airflow_flink_replay.core.flink_models import FlinkPythonProgram, QuiesceResult
from airflow_flink_replay.hooks.flink_submit import SubmitterKind
from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook
from airflow_flink_replay.hooks.mem0 import Mem0Hook
from airflow_flink_replay.lifecycle.quiesce import SavepointOperation, TaskRun
from airflow_flink_replay.lifecycle.stop_window import OVERLAP_MAX_MEMORIES, ProductionStopWindow, raise_if_failed
from airflow_flink_replay.memory.journal_reader import MemoryJournalHook
from airflow_flink_replay.operators.flink import QuiesceAndSavepointOperator, as_task_failure

__all__ = ["OVERLAP_MAX_MEMORIES", "StopWindowOperator"]


class StopWindowOperator(QuiesceAndSavepointOperator):
    """Quiesce production and, in ``drain``/``stop`` mode, do everything production's stop needs in the same
    task: read the capture topic's end offsets, fork the memory at the cut, resubmit production from the
    savepoint and wait until every vertex RUNS. ``savepoint`` mode never stops production: it behaves as
    :class:`QuiesceAndSavepointOperator`.

    Takes the quiesce operator's arguments (it never defers: a deferral's return would put the scheduler in
    the window; with ``lease`` it holds production's lease from before the stop until the resumed job RUNS,
    and a window that did not bring production back leaves it to ``resume_production``) plus:

    :param capture_topic: the capture topic whose end offsets become the replay's start offsets (templated).
    :param offsets_before: its end offsets read before the stop (templated; see ``RecordStartOffsetsOperator``).
    :param kafka_config_id: the Kafka connection.
    :param output_topic: production's output topic: its end offsets are read too (the fidelity figure's start).
    :param cassette_topic: production's cassette topic: its end offsets are read too (the replays' cassette start).
    :param memory_source: production's memory namespace (templated; ``None``: no memory cut).
    :param memory_target: the baseline's fork namespace (templated); a pre-copy of the same ``fork_id`` there
        makes the cut a delta.
    :param memory_journal_topic: production's memory journal (``production.memory_journal_topic``): when the
        pre-copy noted its position and production did not fail over since (Flink's exception history), the cut
        reads only the memories the journal names since
        (:meth:`~.lifecycle.stop_window.ProductionStopWindow.trusted_journal`); else it reads the whole namespace.
    :param fork_id: the fork's identity (default: the DAG run id).
    :param mem0_conn_id: the Mem0 connection.
    :param program: how to resubmit production (:class:`FlinkPythonProgram` or its dict; templated).
    :param job_name: production's job name (default: the plan's).
    :param submitter: ``rest`` (default) or ``cli``.
    :param resume_timeout: seconds the resubmission and the wait until RUNNING may take.
    :param overlap_resume: start production's resubmission as soon as the savepoint completes, while the offsets
        and the memory cut are taken: its program and the job's deployment take seconds before any task RUNS, and
        the cut's last read of production is checked to have come before that (``ProductionStopWindow.fence``;
        one that did not fails the run, production resumed). False: resubmit only after the cut. None (default):
        overlap when the cut is short — no memory cut, a delta over a pre-copy of at most ``OVERLAP_MAX_MEMORIES``
        memories (the delta reads the whole namespace again: ~1.5 s per 10k here, against ~7 s from resubmission
        to RUNNING), or a delta found in production's memory journal (it reads only what production wrote since
        the pre-copy).

    XCom: the :class:`QuiesceResult` with ``window`` (:class:`StopWindow`): the start offsets, the memory cut,
    production's :class:`ResumeResult` (``downtime_seconds``: stop request → every vertex RUNNING) and the
    seconds of each step.
    """

    template_fields: Sequence[str] = (
        *QuiesceAndSavepointOperator.template_fields,
        "capture_topic",
        "offsets_before",
        "memory_source",
        "memory_target",
        "memory_journal_topic",
        "fork_id",
        "program",
        "job_name",
    )

    def __init__(
        self,
        *,
        capture_topic: str,
        program: FlinkPythonProgram | dict[str, Any],
        offsets_before: Mapping[str, Any] | None = None,
        kafka_config_id: str = "kafka_default",
        output_topic: str | None = None,
        cassette_topic: str | None = None,
        memory_source: Any = None,
        memory_target: Any = None,
        memory_journal_topic: str | None = None,
        fork_id: str = "{{ run_id }}",
        mem0_conn_id: str = Mem0Hook.default_conn_name,
        job_name: str | None = None,
        submitter: SubmitterKind = "rest",
        resume_timeout: float = 300.0,
        overlap_resume: bool | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs["deferrable"] = False
        kwargs.setdefault("wait_for_finished", False)
        super().__init__(**kwargs)
        self.capture_topic = capture_topic
        self.offsets_before: Any = offsets_before
        self.kafka_config_id = kafka_config_id
        self.output_topic = output_topic
        self.cassette_topic = cassette_topic
        self.memory_source = memory_source
        self.memory_target = memory_target
        self.memory_journal_topic = memory_journal_topic
        self.fork_id = fork_id
        self.mem0_conn_id = mem0_conn_id
        self.program = program.model_dump() if isinstance(program, FlinkPythonProgram) else program
        self.job_name = job_name
        self.submitter = submitter
        self.resume_timeout = float(resume_timeout)
        self.overlap_resume = overlap_resume
        self._window_run: ProductionStopWindow | None = None

    def execute(self, context: Any) -> Any:
        """Connect to the memory store first (not inside production's downtime), choose whether the resubmission
        overlaps the memory cut, then quiesce and run the window."""
        window = self._window(context)
        if self.mode in ("drain", "stop"):
            window.connect_before_stop()
        if self.overlap_resume is None:
            self.overlap_resume = window.choose_overlap()
        return super().execute(context)

    @cached_property
    def mem0_hook(self) -> Mem0Hook:
        """The Mem0 hook of the memory cut (connected before the stop)."""
        return Mem0Hook(mem0_conn_id=self.mem0_conn_id)

    def _window(self, context: Any) -> ProductionStopWindow:
        """This task instance's stop window (built once, by :meth:`_stop_window`)."""
        if self._window_run is None:
            self._window_run = self._stop_window(context)
        return self._window_run

    def _stop_window(self, context: Any) -> ProductionStopWindow:
        """The stop window procedure with this task's hooks and arguments."""
        journal = self.memory_journal_topic
        return ProductionStopWindow(
            self.hook, FlinkPythonProgram.model_validate(self.program), self.capture_topic,
            KafkaOffsetsHook(kafka_config_id=self.kafka_config_id), offsets_before=self.offsets_before,
            output_topic=self.output_topic, cassette_topic=self.cassette_topic, memory=self.mem0_hook,
            memory_source=self.memory_source, memory_target=self.memory_target,
            journal=MemoryJournalHook(journal, kafka_config_id=self.kafka_config_id) if journal else None,
            fork_id=str(self.fork_id), job_name=self.job_name, submitter=self.submitter,
            resume_timeout=self.resume_timeout, overlap_resume=self.overlap_resume,
            inside=lambda quiesce: self.inside_window(context, quiesce), log=self.log,
        )  # fmt: skip

    def _finish(self, context: Any, operation: SavepointOperation) -> dict[str, Any]:
        """The quiesce's result; once production stopped, the window's too (production RUNS again when it
        returns, or the task fails)."""
        result = super()._finish(context, operation)
        quiesce = QuiesceResult.model_validate(result)
        if not quiesce.production_stopped:
            return result
        with as_task_failure():
            done = self._window(context).run(quiesce, retried=TaskRun.of(context).retried)
            resumed = done.window.resumed if done.window else None
            if resumed is not None:  # every task of production's new job RUNS: the next run may stop it
                self._release_lease(context, quiesce.job_name, savepoint=quiesce.savepoint_path,
                                    why=f"production RUNNING again as job {resumed.job_id}")  # fmt: skip
            raise_if_failed(done)
        return done.model_dump(mode="json")

    def inside_window(self, context: Any, quiesce: QuiesceResult) -> None:
        """Runs inside the window after the offsets and before the memory cut, production still stopped and
        fenced (a seam for checks; nothing by default)."""
