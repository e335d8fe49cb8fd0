"""Hooks: the Flink REST (transport in ``flink_rest_base``, endpoints in ``flink_rest``, savepoint and stop
procedures in ``flink_savepoints``), submitting Python jobs (``flink_submit``), Kafka offsets and topics and the
replay's result topics (through the Kafka provider's hooks), production's lease, window progress, and Mem0
(``Mem0Hook``; its backends are in :mod:`airflow_flink_replay.memory`)."""
