"""UI-triggered replay: fill the Params form (candidate agent, quiesce mode, window, thresholds, keep fork).

The spec comes from ``$FLINK_REPLAY_SPEC`` (a ReplaySpec YAML; the demo writes ``.stack/demo/replay_spec.yaml``).
"""

from airflow_flink_replay.dag_factory import build_replay_dag, load_spec

dag = build_replay_dag(load_spec(), dag_id="flink_agents_replay", kind="manual")
