"""Production's lifecycle around a replay as plain procedures: stop it with a savepoint, do what must happen while
it is stopped, bring it back — each idempotent on retry.

- :mod:`.quiesce`: the savepoint or stop of one task instance (deterministic trigger ids, reattach on retry, the
  metaspace check before anything is stopped);
- :mod:`.stop_window`: the stop window (start offsets, memory cut, resubmission until RUNNING, all while
  production is stopped, production resumed whatever fails);
- :mod:`.resume`: production back from this run's savepoint, with the rules that reattach instead of starting a
  second copy;
- :mod:`.start_offsets`: the capture topic's end offsets read as the replay's start offsets.

A procedure takes hooks and plain values and returns a typed result (a pydantic model, a dataclass, or the
TypedDict a deferral carries); it raises the project's errors (:class:`~airflow_flink_replay.exceptions.
LifecycleError`, :class:`~airflow_flink_replay.exceptions.LifecycleRefusedError`,
:class:`~airflow_flink_replay.exceptions.NothingToResume`). It never defers, links a page or pushes XCom, and
imports neither Airflow nor the operators (tested in ``tests/unit/test_layering.py``): the operators
(``operators/flink.py``, ``operators/stop_window.py``) wire it, wait in the triggerer when it says what to wait
for, and turn its errors into Airflow's with the same message.
"""
