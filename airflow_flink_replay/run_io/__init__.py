"""A replay run's data on the Airflow side that is neither a hook nor an operator: where the run's files live
(:mod:`.run_storage`: a local path or an ``ObjectStoragePath`` URI) and production's own outputs for the window,
read from its output topic for the comparison (:mod:`.production_outputs`).

Not under ``hooks/``: neither holds a connection of its own; the run folder is opened through Airflow's object
storage, and production's outputs are read through the Kafka hook the caller passes in.
"""
