"""Agents for failure drills (tests): a candidate that crashes inside Flink."""
