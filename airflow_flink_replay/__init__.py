"""airflow-flink-replay: replay a changed Flink Agents job on production state, from Airflow.

The package has two sides. The orchestrator side (``core``, ``hooks``, ``lifecycle``, ``operators``, ``sensors``,
``triggers``, ``links``, ``run_io``, ``replay_dag`` and ``dag_factory``, ``ids``; ``local``, ``commands`` and ``cli``
for the development stack and the command line) runs in Airflow. The job side (``flink``) runs inside
the Flink cluster's Python and never imports Airflow. ``core`` is pure: neither Airflow nor PyFlink. ``memory``
(the Mem0 fork) serves both: only its journal reader imports Airflow.
"""

__version__ = "0.1.0"
