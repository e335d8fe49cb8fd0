"""The Mem0 memory fork: its backends, production's memory journal and the offline ``mem0.Memory`` builder.

- :mod:`.backend`: the :class:`~.backend.Mem0Backend` protocol the hook delegates to, and the rules both
  backends share; :mod:`.oss` (a local ``mem0.Memory``, forked at vector-store level through the store
  adapters of :mod:`.stores`) and :mod:`.hosted` (the Mem0 platform: export + re-add) implement it;
- :mod:`.journal`: production's memory journal, written by production's own memory; :mod:`.journal_reader`
  reads it on the Airflow side at the memory cut;
- :mod:`.offline`: the offline ``mem0.Memory`` both sides build (the hook's backend and the Flink job's agent).

The one hook is :class:`~airflow_flink_replay.hooks.mem0.Mem0Hook` (it reads the ``mem0`` connection and builds
a backend); the pure model of a fork (namespaces, fingerprints, results) is
:mod:`airflow_flink_replay.core.memory_fork`; the operators are :mod:`airflow_flink_replay.operators.mem0`.

The Flink job side imports :mod:`.journal` and :mod:`.offline`: they, the backends and this package's
``__init__`` import neither Airflow nor PyFlink (tested in ``tests/unit/test_layering.py``). Only
:mod:`.journal_reader` imports Airflow (it is a Kafka-provider hook); nothing on the job side imports it.
"""
