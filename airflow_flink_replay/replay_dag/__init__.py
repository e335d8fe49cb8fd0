"""The replay DAG in stages (DESIGN.md §3): task ids and XCom keys (``ids``), the run's resolved values
(``run``), and one builder per stage (``stages``). ``airflow_flink_replay.dag_factory`` assembles them.

Kept import-free so that operators may read :mod:`.ids` without importing the stage builders.
"""
