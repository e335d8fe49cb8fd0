"""Running in-test DAGs under ``dag.test()``: one helper for every test module."""

from __future__ import annotations

from typing import Any


def register_dag(dag: Any, bundle_name: str = "tests") -> None:
    """Serialize an in-memory DAG into the test metadata DB, so ``dag.test()`` can create its run.

    ``dag.test()`` in Airflow 3.3 only finds DAGs that a bundle (the dags folder) or an earlier parse wrote
    to the DB; DAGs built inside a test are written here the way the DAG processor writes them.
    """
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.models.dagbundle import DagBundleModel
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    with create_session() as session:
        session.merge(DagBundleModel(name=bundle_name))
        session.flush()
        update_dag_parsing_results_in_db(
            bundle_name, None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(), session=session
        )
