"""Mem0 helpers used on both sides: the Airflow hook and the Flink job's agent build their ``mem0.Memory`` here.

Not under ``hooks/`` (Airflow side) nor ``flink/`` (job side) because both sides import it; so nothing in
this package imports airflow or pyflink.
"""
