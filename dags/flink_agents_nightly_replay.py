"""Nightly replay of production's last window: baseline vs baseline-2 tracks the noise floor and drift;
the spec's candidate (if any) is compared too. Report only: a nightly run never fails on FAIL."""

from airflow_flink_replay.dag_factory import build_replay_dag, load_spec

dag = build_replay_dag(load_spec(), dag_id="flink_agents_nightly_replay", kind="nightly", schedule="@daily")
