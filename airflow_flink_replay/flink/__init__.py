"""Job side: runs inside Flink's Python (pyflink + flink_agents). Never imports Airflow."""
