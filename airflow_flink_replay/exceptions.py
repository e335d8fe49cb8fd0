"""Every error this package raises on purpose, under one base: :class:`FlinkReplayError`.

Catch ``FlinkReplayError`` to handle any of them. Each message carries the cause and a ``Fix: …`` line.
The classes keep the built-in base they had before they moved here (``ValueError`` for bad input,
``RuntimeError`` for a failed step), so existing ``except ValueError`` code still catches them.

Pure: imports neither Airflow nor PyFlink, so ``core/`` and the job side (``flink/``) raise these too.
The modules that defined them before still import them, so their old import paths keep working.
"""

from __future__ import annotations


class FlinkReplayError(Exception):
    """Base of every error of airflow-flink-replay."""


# ------------------------------------------------------------------------------------------- Kafka
class ActionStateIsolationError(FlinkReplayError, RuntimeError):
    """The replay's action-state topics cannot be isolated (or cleaned up) safely; names the topic and the fix."""
