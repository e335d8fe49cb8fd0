"""Pre-release gate, triggered by CI over Airflow's REST API with ``conf = {"candidate": "pkg.mod:factory"}``.

FAIL fails the run; PASS emits the Asset ``flink-agents-replay://<spec name>/approved``.
"""

from airflow_flink_replay.dag_factory import build_replay_dag, load_spec

dag = build_replay_dag(load_spec(), dag_id="flink_agents_release_gate", kind="gate")
