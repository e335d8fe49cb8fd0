"""Step 9's check: the run ends by asserting production's state, or fails naming how to restore it.

``AssertProductionOperator`` runs ``all_done`` after every cleanup task. It passes when production is
RUNNING from THIS run's savepoint (the run stopped it and resume brought it back), or when the run never
stopped it and it still runs; in every other case it fails, loudly, naming the savepoint to restore from
and the ``flink run`` command that does it. It is the net under resume: whatever failed or was killed in
between (a quiesce killed mid-stop, a resume whose retries ran out), a run never looks healthy while
production is down.

With production's lease (``lease``) it never prescribes a restore while another replay run holds the lease:
production is that run's to stop and resume, and the check says so. Otherwise it holds the lease while it
checks (no other run stops production meanwhile), reads in the lease's history whether this run ever stopped
production and whether another run stopped and resumed it after this one, and releases the lease at the end,
whatever the outcome.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from functools import cached_property
from typing import Any, NoReturn

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_flink_replay.core.flink_models import LIVE_STATES, FlinkPythonProgram, QuiesceResult
from airflow_flink_replay.core.manifest_io import normalized_location
from airflow_flink_replay.core.production_lease import LeaseRecord
from airflow_flink_replay.exceptions import FlinkRestError
from airflow_flink_replay.hooks.flink_rest import FlinkRestHook
from airflow_flink_replay.hooks.flink_savepoints import StopOutcome
from airflow_flink_replay.hooks.flink_submit import CliPythonSubmitter
from airflow_flink_replay.links.flink import FlinkJobLink
from airflow_flink_replay.operators.flink import MODES, QuiesceRef, operation_trigger_ids, run_path_segment
from airflow_flink_replay.operators.production_lease import LeaseSettings, RunLease, run_lease


class AssertProductionOperator(BaseOperator):
    """Assert that production runs again after the run: from this run's savepoint, or never touched.

    Returns ``{"production": "resumed" | "untouched" | "resumed_by_other" | "held_by_other", "job_id", "savepoint",
    "restored_from"}`` (the last two with ``by``: the other run holding or last holding production's lease). Fails
    (no retry: :class:`AirflowFailException`) when no job with production's name runs, when more than one
    does, or when the one that runs was not restored from this run's savepoint; the message names the
    savepoint and the command that restores production from it. REST errors fail the task normally, so
    its retries cover a Flink that is briefly unreachable.

    :param job_name: production's job name (templated).
    :param quiesce: what this run's quiesce did (:class:`~.flink.QuiesceRef`, templated): its result if it produced
        one, the run's quiesce mode (``existing`` never touches production), production's job id before the quiesce
        (preflight's) and the quiesce's task id (its trigger ids find this run's stop). None: nothing known, nothing
        was touched.
    :param program: production's program (templated): renders the restore command.
    :param flink_conn_id: production's Flink REST connection.
    :param timeout: seconds to wait for a stop of this run still in flight, and for production to run.
    :param lease: production's lease (:class:`~.production_lease.LeaseSettings`, its folder templated); None: no
        lease (the check trusts that no other run touched production).
    """

    template_fields: Sequence[str] = ("job_name", "quiesce", "program", "lease")
    operator_extra_links = (FlinkJobLink(),)
    ui_color = "#e6f4ea"

    def __init__(
        self,
        *,
        job_name: str | None = None,
        quiesce: QuiesceRef | None = None,
        program: FlinkPythonProgram | dict[str, Any] | None = None,
        flink_conn_id: str = FlinkRestHook.default_conn_name,
        timeout: float = 300.0,
        lease: LeaseSettings | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        self.lease = lease
        self.job_name = job_name
        self.quiesce = (quiesce or QuiesceRef()).as_json()
        self.program = program.model_dump() if isinstance(program, FlinkPythonProgram) else program
        self.flink_conn_id = flink_conn_id
        self.timeout = float(timeout)

    @cached_property
    def hook(self) -> FlinkRestHook:
        """The Flink REST hook of production's cluster."""
        return FlinkRestHook(self.flink_conn_id)

    def execute(self, context: Any) -> dict[str, Any]:
        """Find what this run did to production, then check that production runs as it should."""
        quiesce = self.quiesce.quiesce_result()
        job_id = quiesce.job_id if quiesce else self.quiesce.production_job_id
        if self.quiesce.mode == "existing" or not job_id:
            self.log.info("This run never stopped production (quiesce mode %s): nothing to assert", self.quiesce.mode)
            return {"production": "untouched", "job_id": job_id, "savepoint": None, "restored_from": None}
        hook = self.hook
        name = self.job_name or (quiesce.job_name if quiesce else None) or self._program_name() or ""
        lease = run_lease(self.log, context, self.lease, flink_url=hook.base_url, job_name=name)
        if lease is None:
            return self._assert(context, hook, name, quiesce, job_id)
        holder = lease.held_by_other()
        history = lease.history()
        if holder is not None or lease.acquire_now(check_only=True) is None:
            return self._held_elsewhere(name, job_id, holder or lease.held_by_other())
        mine = lease.of_this_run(history)
        try:
            with lease.heartbeat():
                return self._assert_with_lease(context, hook, name, quiesce, job_id, lease, history)
        finally:
            done = lease.release(why="production checked")
            if done is not None and mine and done.generation == mine[-1].generation:  # the quiesce's hold
                lease.push(done.summary())

    def _assert_with_lease(
        self,
        context: Any,
        hook: FlinkRestHook,
        name: str,
        quiesce: QuiesceResult | None,
        job_id: str,
        lease: RunLease,
        history: list[LeaseRecord],
    ) -> dict[str, Any]:
        """The check while this task holds production's lease; ``history``: the lease's generations before it."""
        mine, later = lease.of_this_run(history), lease.others_since(history)
        if not mine:  # the quiesce takes the lease before it touches production
            return self._never_stopped(context, hook, name, job_id, later[-1] if later else None)
        if later:  # this run released the lease with production RUNNING; another run stopped it after
            return self._resumed_by_other(context, hook, name, job_id, later[-1])
        return self._assert(context, hook, name, quiesce, (None if quiesce else mine[-1].job_id) or job_id)

    def _held_elsewhere(self, name: str, job_id: str, holder: LeaseRecord | None) -> dict[str, Any]:
        """Another replay run holds production's lease: it stops and resumes production; nothing to prescribe."""
        by = holder.describe() if holder else "another replay run"
        self.log.warning(
            "Production %r is held by %s: that replay run is stopping and resuming production and will resume it. "
            "This run does not check production now and prescribes no restore (that run's assert_production "
            "checks it)", name, by,
        )  # fmt: skip
        return {"production": "held_by_other", "job_id": job_id, "savepoint": None, "restored_from": None,
                "by": holder.holder.label if holder else None}  # fmt: skip

    def _never_stopped(
        self, context: Any, hook: FlinkRestHook, name: str, job_id: str, other: LeaseRecord | None
    ) -> dict[str, Any]:
        """This run never held production's lease, so it never stopped production: one job must run, the same one
        as at this run's preflight, or the one a run that held the lease since (``other``) resumed."""
        live = [j.jid for j in hook.list_jobs().by_name(name, states=LIVE_STATES)]
        if live != [job_id] and (other is None or len(live) != 1):
            self._fail(hook, name, other.savepoint if other else None,
                       f"this run never stopped production (it never held production's lease), yet the live jobs "
                       f"named {name!r} are {live or 'none'}")  # fmt: skip
        self._running(hook, name, live[0], None)
        FlinkJobLink.persist(context, hook.job_ui_url(live[0]))
        if live == [job_id]:
            self.log.info("Production job %s (%s) was never stopped by this run and RUNS", job_id, name)
            return {"production": "untouched", "job_id": job_id, "savepoint": None, "restored_from": None}
        by = other.holder if other else None
        self.log.info("This run never stopped production; %s did, and production RUNS again as job %s",
                      by.describe() if by else "another run", live[0])  # fmt: skip
        return {"production": "resumed_by_other", "job_id": live[0], "savepoint": None, "restored_from": None,
                "by": by.label if by else None}  # fmt: skip

    def _resumed_by_other(
        self, context: Any, hook: FlinkRestHook, name: str, job_id: str, other: LeaseRecord
    ) -> dict[str, Any]:
        """After this run gave production back, ``other`` (a later run) stopped and resumed it: one job must run."""
        live = [j.jid for j in hook.list_jobs().by_name(name, states=LIVE_STATES)]
        if len(live) != 1:
            self._fail(hook, name, other.savepoint,
                       f"{other.holder.describe()} stopped production after this run gave it back; live jobs named "
                       f"{name!r}: {live or 'none'}")  # fmt: skip
        self._running(hook, name, live[0], None)
        FlinkJobLink.persist(context, hook.job_ui_url(live[0]))
        self.log.info("Production RUNS as job %s: this run gave it back, then %s stopped and resumed it",
                      live[0], other.holder.describe())  # fmt: skip
        return {"production": "resumed_by_other", "job_id": live[0], "savepoint": other.savepoint,
                "restored_from": None, "by": other.holder.label}  # fmt: skip

    def _assert(
        self, context: Any, hook: FlinkRestHook, name: str, quiesce: QuiesceResult | None, job_id: str
    ) -> dict[str, Any]:
        """The check of what this run did to production (nobody else touched it since)."""
        if quiesce is not None:
            savepoint = quiesce.savepoint_path if quiesce.production_stopped else None
        else:
            outcome = self._outcome(context, hook, job_id)
            savepoint = None if outcome.kept_running else outcome.savepoint
            if not outcome.kept_running and not savepoint:
                self._fail(hook, name, None, f"job {job_id} is {outcome.job_state} and this run has no savepoint of it")
        live = [j.jid for j in hook.list_jobs().by_name(name, states=LIVE_STATES)]
        if savepoint is None:  # never stopped by this run: the same job must still run, alone
            if live != [job_id]:
                self._fail(
                    hook,
                    name,
                    None,
                    f"this run never stopped job {job_id}, yet the live jobs named {name!r} are {live or 'none'}",
                )
            self._running(hook, name, job_id, None)
            FlinkJobLink.persist(context, hook.job_ui_url(job_id))
            self.log.info("Production job %s (%s) was never stopped by this run and RUNS", job_id, name)
            return {"production": "untouched", "job_id": job_id, "savepoint": None, "restored_from": None}
        resumed = [jid for jid in live if jid != job_id]
        if job_id in live or len(resumed) != 1:
            self._fail(
                hook,
                name,
                savepoint,
                f"expected one resumed job named {name!r} and the stopped job {job_id} "
                f"ended; live jobs: {live or 'none'}",
            )
        restored = self._running(hook, name, resumed[0], savepoint)
        FlinkJobLink.persist(context, hook.job_ui_url(resumed[0]))
        self.log.info("Production job %s (%s) RUNS, restored from this run's savepoint %s", resumed[0], name, restored)
        return {"production": "resumed", "job_id": resumed[0], "savepoint": savepoint, "restored_from": restored}

    def _outcome(self, context: Any, hook: FlinkRestHook, job_id: str) -> StopOutcome:
        """This run's stop, once it is no longer in flight (the quiesce task left no result)."""
        ti = context["ti"]
        mode = self.quiesce.mode if self.quiesce.mode in MODES else None
        ids = operation_trigger_ids(ti.dag_id, ti.run_id, self.quiesce.task_id, -1, job_id, mode) if mode else []
        return hook.stop_outcome(
            job_id, ids, run_path_segment(ti.dag_id, ti.run_id), stopping=mode != "savepoint", timeout=self.timeout
        )

    def _running(self, hook: FlinkRestHook, name: str, job_id: str, savepoint: str | None) -> str | None:
        """Wait until ``job_id`` RUNS; with ``savepoint``, check it was restored from it. Returns where it
        restored from (Flink reports it in the checkpoint statistics, refreshed every few seconds)."""
        try:
            hook.wait_for_job_state(job_id, ("RUNNING",), timeout=self.timeout, poll_interval=1.0)
        except FlinkRestError as err:
            self._fail(hook, name, savepoint, f"job {job_id} does not run: {err}")
        if savepoint is None:
            return None
        restored = None
        for _ in range(8):  # web.refresh-interval: the statistics may lag the restore by a few seconds
            restored = hook.restored_savepoint(job_id)
            if restored:
                break
            time.sleep(1.5)
        if not restored or normalized_location(restored) != normalized_location(savepoint):
            self._fail(hook, name, savepoint, f"job {job_id} runs but restored from {restored or 'no savepoint'}")
        return restored

    def _program_name(self) -> str | None:
        return FlinkPythonProgram.model_validate(self.program).job_name if self.program else None

    def _fail(self, hook: FlinkRestHook, name: str, savepoint: str | None, finding: str) -> NoReturn:
        """Fail loudly: what was found, the savepoint to restore from and the command that does it."""
        if savepoint is None:
            try:
                latest = (
                    hook.get_checkpoints(str(self.quiesce.production_job_id)).latest_savepoint
                    if self.quiesce.production_job_id
                    else None
                )
            except FlinkRestError:
                latest = None
            savepoint = latest.external_path if latest else None
        where = savepoint or "<the production job's latest savepoint (Flink UI, checkpoints tab)>"
        message = (
            f"PRODUCTION IS NOT RUNNING AS IT SHOULD after this replay run: {finding}. "
            f"Restore production {name!r} from savepoint {where}: {self._restore_command(hook, where)} "
            "(or clear this run's resume_production task, which resubmits it from the same savepoint)"
        )
        self.log.error("%s", message)
        raise AirflowFailException(message)

    def _restore_command(self, hook: FlinkRestHook, savepoint: str) -> str:
        """``flink run -d -m <jobmanager> -s <savepoint> ...`` for production's program."""
        address = hook.base_url.split("://", 1)[-1]
        home = hook.settings.flink_home or "$FLINK_HOME"
        if not self.program:
            return f"{home}/bin/flink run -d -m {address} -s {shlex.quote(savepoint)} <production's program>"
        command = CliPythonSubmitter(home).command(FlinkPythonProgram.model_validate(self.program), savepoint)
        return f"{home}/bin/flink " + shlex.join([*command[1:3], "-m", address, *command[3:]])
