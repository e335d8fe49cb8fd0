"""Step 9 (cleanup), replay jobs: cancel every replay job of this DAG run that still runs.

The replay tasks cancel their own job when killed (``on_kill`` in the worker, the trigger's ``on_kill`` when
deferred); this task, ``all_done`` after them, catches whatever those paths missed (a worker lost with its
task, a trigger that timed out), so no replay keeps running after its run ended. A job is this run's when its
name is exactly one this run gives its variants (:func:`~airflow_flink_replay.core.replay_job_spec.replay_job_name`):
a prefix would also take the replays of a run whose id extends this one (``r1`` and ``r1-x``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator

from airflow_flink_replay.core.replay_job_spec import replay_job_name
from airflow_flink_replay.core.replay_spec import MAX_AA_REPLAYS, variant_names
from airflow_flink_replay.hooks.flink_rest import FlinkRestHook

#: Flink states after which a job needs no cancelling.
_ENDED = frozenset({"FINISHED", "FAILED", "CANCELED"})


class CancelLeftoverReplaysOperator(BaseOperator):
    """Cancel the replay jobs of this DAG run that have not ended; returns the cancelled job ids.

    :param flink_conn_id: the Flink REST connection of the cluster that runs the replays.
    :param variants: the replay variants of the run (their job names are the ones cancelled; the DAG passes
        ``ReplaySpec.variant_names()``). Default: every variant a spec can have (``aa_replays`` at its most): a
        name no job of the run has cancels nothing.
    """

    template_fields: Sequence[str] = ("flink_conn_id",)
    ui_color = "#fce8e6"

    def __init__(
        self,
        *,
        flink_conn_id: str = FlinkRestHook.default_conn_name,
        variants: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        self.flink_conn_id = flink_conn_id
        self.variants = list(variants) if variants is not None else variant_names(MAX_AA_REPLAYS)

    @cached_property
    def hook(self) -> FlinkRestHook:
        """The Flink REST hook."""
        return FlinkRestHook(self.flink_conn_id)

    def execute(self, context: Any) -> list[str]:
        """List the cluster's jobs, cancel this run's replays that still run."""
        ti = context["ti"]
        names = {replay_job_name(ti.dag_id, ti.run_id, variant) for variant in self.variants}
        cancelled = []
        for job in self.hook.list_jobs().jobs:
            if job.name in names and job.state not in _ENDED:
                self.log.warning("Cancelling leftover replay job %s (%s, %s)", job.jid, job.name, job.state)
                self.hook.cancel_job(job.jid)
                cancelled.append(job.jid)
        return cancelled
