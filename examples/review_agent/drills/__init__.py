"""Agents for failure drills (tests): a candidate that crashes inside Flink."""

#: What the crashing candidate raises inside the TaskManager (the failure drill asserts it reaches Airflow).
CRASH_MESSAGE = "drill: the candidate agent crashes on every review"
