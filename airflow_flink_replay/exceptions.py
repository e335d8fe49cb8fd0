"""Every error this package raises on purpose, under one base: :class:`FlinkReplayError`.

Catch ``FlinkReplayError`` to handle any of them. Each message carries the cause and a ``Fix: …`` line.
The classes keep the built-in base they had before they moved here (``ValueError`` for bad input,
``RuntimeError`` for a failed step), so existing ``except ValueError`` code still catches them.

Pure: imports neither Airflow nor PyFlink, so ``core/`` and the job side (``flink/``) raise these too.
The modules that defined them before import them back, so their old import paths keep working
(``from airflow_flink_replay.core.manifest import ManifestError``); new code imports from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_flink_replay.core.identity import IdentityReport
    from airflow_flink_replay.core.production_lease import LeaseRecord

__all__ = [
    "ActionStateIsolationError",
    "CompareInputError",
    "FlinkJobFailedError",
    "FlinkJobNotFoundError",
    "FlinkOperationFailedError",
    "FlinkOperationTimeoutError",
    "FlinkOutcomeUnknownError",
    "FlinkReplayError",
    "FlinkRestError",
    "FlinkSubmissionError",
    "FlinkUnreachableError",
    "ForkConflictError",
    "IdentityMismatchError",
    "IdentityRefusedError",
    "KafkaConnectionError",
    "KafkaTopicError",
    "LifecycleError",
    "LifecycleRefusedError",
    "ManifestError",
    "ManifestTamperedError",
    "NestingError",
    "NoForkError",
    "NotAForkError",
    "NothingToResume",
    "OwnJobError",
    "PathError",
    "PreflightError",
    "ProductionLeaseError",
    "ProductionLeaseHeldError",
    "ProductionLeaseNotHeldError",
    "ReplayPolicyBlocked",
    "ResultRefused",
    "RunFileRefusedError",
    "SecretReferenceError",
    "SecretScrubbedError",
    "SpecError",
    "StackSetupError",
    "UsageError",
]


class FlinkReplayError(Exception):
    """Base of every error of airflow-flink-replay."""


# ------------------------------------------------------------------------------- specs and manifests
class SpecError(FlinkReplayError, ValueError):
    """A replay spec (or a run's overrides) is invalid; the message names the field and the fix."""


class SecretReferenceError(FlinkReplayError, ValueError):
    """A secret is given as a value where only a reference may travel, or a reference cannot be resolved
    on the job side; the message names the field (never the value) and the fix."""


class SecretScrubbedError(FlinkReplayError, RuntimeError):
    """Code handed a resolved secret failed, and its error text held the value: this error carries that text
    with every resolved value replaced by its reference (``${env:NAME}``), the original one dropped."""


class PreflightError(FlinkReplayError, ValueError):
    """The replay must not start; the message lists every problem with its fix."""


class ManifestError(FlinkReplayError, ValueError):
    """A manifest is invalid; ``problems`` holds one ``field: what is wrong. Fix: ...`` line each."""

    def __init__(self, problems: list[str], title: str = "invalid replay manifest") -> None:
        self.problems = list(problems)
        super().__init__(f"{title}:\n" + "\n".join(f"  - {p}" for p in self.problems))


class ManifestTamperedError(ManifestError):
    """The stored digest does not match the content: the manifest changed after it was sealed."""


class IdentityMismatchError(FlinkReplayError, ValueError):
    """The savepoint does not map onto the replay job; ``report`` says why and how to fix it."""

    def __init__(self, report: IdentityReport) -> None:
        self.report = report
        super().__init__(report.render())


class IdentityRefusedError(FlinkReplayError, ValueError):
    """A replay program refused to submit: a variant's job graph does not map onto production's savepoint (the
    message holds every variant's identity report)."""


# ------------------------------------------------------------------------------------------ compare
class CompareInputError(FlinkReplayError, ValueError):
    """An input that cannot be read: names the file, the line and the fix."""

    def __init__(self, source: str, message: str, line: int | None = None) -> None:
        self.source = source
        self.line = line
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {message}")


class PathError(FlinkReplayError, ValueError):
    """A JSONPath that cannot be parsed (or a rule that is not a JSONPath)."""


class NestingError(FlinkReplayError, ValueError):
    """An output nested deeper than the flattener allows; the message is the path where it stopped."""


class UsageError(FlinkReplayError):
    """Bad command-line usage; ``flink-replay compare`` exits with ``EXIT_USAGE``."""


# -------------------------------------------------------------------------------------- Flink REST
class FlinkRestError(FlinkReplayError):
    """A Flink REST call failed. ``cause`` is Flink's own message; ``details`` the full text."""

    def __init__(
        self,
        message: str,
        *,
        operation: str,
        job_id: str | None = None,
        url: str | None = None,
        status_code: int | None = None,
        cause: str | None = None,
        details: str | None = None,
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.job_id = job_id
        self.url = url
        self.status_code = status_code
        self.cause = cause
        self.details = details


class FlinkUnreachableError(FlinkRestError):
    """No answer from the REST endpoint after the retries."""


class FlinkOutcomeUnknownError(FlinkRestError):
    """A non-idempotent call (job run, jar upload, savepoint/stop without trigger id) was sent but got no
    usable answer (read timeout, dropped connection, 502/503/504). Flink may have acted on it; it is not
    resent. The message says how to check (e.g. ``GET /jobs/overview`` for a job that started anyway)."""


class FlinkJobNotFoundError(FlinkRestError):
    """The job id is unknown to the cluster."""


class FlinkOperationFailedError(FlinkRestError):
    """An async operation (savepoint, stop-with-savepoint) completed with a failure cause."""


class FlinkOperationTimeoutError(FlinkRestError):
    """An async operation or a job-state wait did not finish in time."""


class FlinkJobFailedError(FlinkRestError):
    """A job ended FAILED/CANCELED while we waited for another state."""


class FlinkSubmissionError(FlinkReplayError, RuntimeError):
    """A job submission failed; the message carries the program's or Flink's real cause."""

    def __init__(self, message: str, *, cause: str = "", output: str = "") -> None:
        super().__init__(message)
        self.cause = cause
        self.output = output


# ------------------------------------------------------------------------------------------- Kafka
class KafkaTopicError(FlinkReplayError, RuntimeError):
    """A topic is missing or cannot be read; the message names the topic and the fix."""


class KafkaConnectionError(FlinkReplayError, ConnectionError):
    """The broker of a Kafka connection cannot be reached, or refuses its credentials; names the connection, the
    broker's reason and the fix (never a credential)."""

    def __init__(self, message: str, *, authentication: bool = False) -> None:
        super().__init__(message)
        #: The broker refused the credentials (mechanism, user or password): a retry fails the same way.
        self.authentication = authentication


class ActionStateIsolationError(FlinkReplayError, RuntimeError):
    """The replay's action-state topics cannot be isolated (or cleaned up) safely; names the topic and the fix."""


# -------------------------------------------------------------------------------------------- Mem0
class ForkConflictError(FlinkReplayError, RuntimeError):
    """The fork target is in use by something other than a fork of the same run."""


class NotAForkError(FlinkReplayError, RuntimeError):
    """A namespace without this project's fork provenance was asked to be dropped."""


class NoForkError(FlinkReplayError, RuntimeError):
    """A namespace holds no complete fork to verify production against (the fork never ran, or failed)."""


# ----------------------------------------------------------------------------- job side and stack
class ReplayPolicyBlocked(FlinkReplayError, RuntimeError):
    """A resource call the replay policy blocks (raised inside the replay job, ``flink/proxies.py``)."""


class ResultRefused(FlinkReplayError, ValueError):
    """A recorded result the job side does not rebuild: its codec is unknown or names a type the job's code does
    not declare, or its value is not one (the call is then unmatched; ``core/cassette.py``)."""


class RunFileRefusedError(FlinkReplayError, PermissionError):
    """The UI plugin refuses to read a run's file: its URI is outside every runs location the deployment allows
    (``[flink_replay] runs_locations``), has a ``..`` segment, or resolves through a symlink to outside them
    (``ui/locations.py``). The message says why without the URI's credentials, and the fix."""


class StackSetupError(FlinkReplayError, RuntimeError):
    """A part of the local stack could not be set up; the message says what to do."""


class OwnJobError(FlinkReplayError, RuntimeError):
    """A local command for your own job (``flink-replay deploy/produce/run-dag``) cannot go on; the message
    names the field or file and the fix."""


# ------------------------------------------------------------------------------ production's lease
class ProductionLeaseError(FlinkReplayError, RuntimeError):
    """Production's lease cannot be read or written where the spec keeps it; the message names the file and the fix."""


class ProductionLeaseHeldError(ProductionLeaseError):
    """Another replay run holds production's lease (it is stopping and resuming production)."""

    def __init__(self, message: str, *, holder: LeaseRecord, waited_s: float = 0.0) -> None:
        super().__init__(message)
        #: The generation that holds it.
        self.holder = holder
        #: Seconds this run waited for it.
        self.waited_s = waited_s


class ProductionLeaseNotHeldError(ProductionLeaseError):
    """A run renewed or released a lease it does not hold (never held, released, or taken over after expiry)."""


# ------------------------------------------------------------------------- production's stop and resume
class LifecycleError(FlinkReplayError, RuntimeError):
    """A step of production's quiesce, stop window or resume cannot go on now (``lifecycle/``); a retry may get
    further, so the operator fails the task for a retry. The message names the cause and the fix."""


class LifecycleRefusedError(LifecycleError):
    """A step of production's quiesce, stop window or resume that no retry can change (no room to resubmit
    production, a stop window that closed or failed, production's lease taken over): the operator fails the task
    without retrying."""


class NothingToResume(FlinkReplayError):
    """This run never stopped production, so there is nothing for resume to do (the operator skips the task)."""
