"""The replay DAG in stages (docs/concepts.md, the replay chain): the run's resolved values (``run``) and one
builder per stage (``stages``). ``airflow_flink_replay.dag_factory`` assembles them. The task ids and XCom keys are
in :mod:`airflow_flink_replay.ids`, which the operators import too: nothing here is imported by an operator.
"""
