"""A Flink Agents agent shaped like the ones users bring (see job.py), for the verdict-trust tests."""
