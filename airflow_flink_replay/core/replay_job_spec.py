"""Everything the replay job entry point (:mod:`airflow_flink_replay.flink.replay_job`) takes.

The Airflow-side submitter builds a :class:`ReplayJobSpec`, turns it into program arguments with
:meth:`ReplayJobSpec.to_argv` (``--spec-json <json>``) or writes it to a file (``--spec-file <path>``), and
submits ``airflow_flink_replay/flink/replay_job.py`` with them. The job parses them back with
:meth:`ReplayJobSpec.from_argv`. Pure (pydantic, and fsspec through :mod:`~airflow_flink_replay.core.manifest_io`).

The replay window is either a sealed :class:`~airflow_flink_replay.core.manifest.ReplayManifest` (a path or
URI, loaded through :func:`~airflow_flink_replay.core.manifest_io.load_manifest`, digest verified: a manifest
edited after it was written is refused) or an explicit ``capture_topic`` + ``start_offsets`` + ``end_offsets``.
The submitting task carries the manifest's text in the spec (:meth:`ReplayJobSpec.with_manifest_carried`,
``manifest_text``): the job verifies that text and reads no file, so the manifest needs no path the Flink cluster
shares with Airflow.
With ``manifest_key_ref`` (a ``${env:…}`` / ``${file:…}`` reference, resolved only where the manifest is
loaded, inside Flink) the manifest's HMAC signature must match too: a digest recomputed after an edit is
refused. The key itself never enters the spec, so never the program arguments.

A spec that names production's action-state topic or job identifier as its own is refused where it is
built (``production_action_state_topic`` / ``production_job_identifier``): the guard holds for a spec
made by hand or by :class:`~airflow_flink_replay.operators.replay.SubmitReplayJobOperator` on its own, not
only in the DAG, and the job re-checks it when it starts.

Event time and watermarks (:class:`ReplayTiming`) come from the manifest — production's event-time source
(Kafka record timestamp or a JSONPath field) and watermark strategy (max out-of-orderness, idleness) — unless
the spec sets ``event_time`` / ``watermark`` / ``watermark_idleness_ms`` explicitly; without a manifest the
defaults are the Kafka record timestamp and monotonous watermarks.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from airflow_flink_replay.core.cassette import CassetteWindow
from airflow_flink_replay.core.kafka_security import KafkaClientSecurity
from airflow_flink_replay.core.manifest import (
    CaptureInput,
    EventTime,
    ReplayManifest,
)
from airflow_flink_replay.core.policy import ReplayPolicy
from airflow_flink_replay.core.results import AuditTopic, ResultTopics
from airflow_flink_replay.core.secrets import is_reference, refuse_literal_secrets, resolve_references
from airflow_flink_replay.exceptions import ManifestError, ManifestTamperedError, SecretReferenceError

__all__ = [
    "ReplayInput",
    "ReplayJobSpec",
    "ReplayTiming",
    "ReplayWindow",
    "load_replay_manifest",
    "load_window_from_manifest",
    "timing_from_capture",
]

# shapes are checked with fullmatch: ``$`` would accept a trailing newline
_HEX32 = re.compile(r"[0-9a-f]{32}")
_FACTORY = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_WATERMARK = re.compile(r"none|monotonous|bounded:\d+")
#: Flink Agents config keys (lower-cased) that name the action-state store and the job identifier (Mem0's
#: user_id): a replay sets them from its own isolated topic and namespace; ``agent_config`` may not.
RESERVED_AGENT_CONFIG = frozenset(
    {"actionstatestorebackend", "kafkabootstrapservers", "kafkaactionstatetopic",
     "kafkaactionstatetopicnumpartitions", "job-identifier"}
)  # fmt: skip


class ReplayWindow(BaseModel):
    """Capture topic and, per partition, the first offset to replay and the offset to stop before."""

    topic: str
    start_offsets: dict[int, int]
    end_offsets: dict[int, int]

    @model_validator(mode="after")
    def _consistent(self) -> ReplayWindow:
        if set(self.start_offsets) != set(self.end_offsets):
            raise ValueError(
                f"start_offsets partitions {sorted(self.start_offsets)} differ from end_offsets partitions "
                f"{sorted(self.end_offsets)}; give both for the same partitions"
            )
        for p, start in self.start_offsets.items():
            end = self.end_offsets[p]
            if start < 0 or end < start:
                raise ValueError(f"partition {p}: need 0 <= start ({start}) <= end ({end})")
        return self

    @property
    def record_count(self) -> int:
        """Records in the window (end - start summed over partitions)."""
        return sum(self.end_offsets[p] - s for p, s in self.start_offsets.items())


TimingOrigin = Literal["manifest", "spec", "default"]


def _default_origin() -> dict[str, TimingOrigin]:
    return {"event_time": "default", "watermark": "default", "idleness_ms": "default"}


class ReplayTiming(BaseModel):
    """Event time and watermarks of the replay's input, as production had them.

    ``watermark`` is ``"none"``, ``"monotonous"`` or ``"bounded:<max out-of-orderness ms>"``;
    ``idleness_ms`` marks the input idle after that long without records (None = never). ``origin`` says
    where each part came from (``manifest``, ``spec`` override, or the ``default``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    event_time: EventTime = EventTime()
    watermark: str = "monotonous"
    idleness_ms: int | None = Field(default=None, gt=0)
    origin: dict[str, TimingOrigin] = Field(default_factory=_default_origin)

    @field_validator("watermark")
    @classmethod
    def _watermark_shape(cls, value: str) -> str:
        if not _WATERMARK.fullmatch(value):
            raise ValueError(f'watermark {value!r} must be "none", "monotonous" or "bounded:<ms>"')
        return value

    @property
    def max_out_of_orderness_ms(self) -> int | None:
        """The out-of-orderness bound in ms (0 for monotonous, None without watermarks)."""
        if self.watermark == "none":
            return None
        return 0 if self.watermark == "monotonous" else int(self.watermark.split(":", 1)[1])


def timing_from_capture(capture: CaptureInput) -> ReplayTiming:
    """The manifest's event time and watermark strategy as the replay job applies them."""
    return ReplayTiming(
        event_time=capture.event_time,
        watermark=capture.watermark.as_job_argument(),
        idleness_ms=capture.watermark.idleness_ms,
        origin={"event_time": "manifest", "watermark": "manifest", "idleness_ms": "manifest"},
    )


class ReplayInput(BaseModel):
    """What the replay job reads: the window, its timing and (when it came from one) the manifest's digest."""

    model_config = ConfigDict(frozen=True)

    window: ReplayWindow
    timing: ReplayTiming
    manifest_digest: str | None = None


def load_replay_manifest(location: str, key_ref: str | None = None, text: str | None = None) -> ReplayManifest:
    """Load and verify the manifest at ``location`` (plain path, ``file://`` URI, or any fsspec URI); given its
    ``text`` (the manifest carried in the submission), that text is verified and ``location`` only names it.

    With ``key_ref`` (``${env:NAME}`` / ``${file:/path}``) the reference is resolved here — on the job side,
    inside Flink — and the manifest's signature is checked with the key; the key is never logged or kept.

    Raises :class:`~airflow_flink_replay.core.manifest.ManifestTamperedError` naming the location when the
    digest or the signature does not match (the file was edited after it was sealed) or a signature is
    required but missing, :class:`ManifestError` when it is not a valid manifest, cannot be found, or the
    key reference cannot be resolved.
    """
    from airflow_flink_replay.core.manifest_io import load_manifest

    key: str | None = None
    if key_ref is not None:
        try:
            key = str(resolve_references(key_ref, path="manifest_key_ref"))
        except SecretReferenceError as err:
            raise ManifestError([str(err)], title=f"replay job cannot check the signature of {location}") from None
    try:
        if text is not None:
            manifest = ReplayManifest.parse(text, verify=True)
            if key is not None:
                manifest.verify_signature(key)
            return manifest
        return load_manifest(location, signing_key=key)
    except ManifestTamperedError as err:
        what = "signature" if any(p.startswith("signature") for p in err.problems) else "digest"
        raise ManifestTamperedError(
            err.problems, title=f"replay job refuses manifest {location}: {what} check failed (tampered)"
        ) from None
    except ManifestError as err:
        raise ManifestError(err.problems, title=f"replay job cannot use manifest {location}") from None
    except ImportError as err:  # an fsspec backend (s3fs, gcsfs, ...) missing on this side
        raise ManifestError(
            [
                f"manifest: {err}. Fix: install the fsspec backend for this URI scheme in the Flink-side venv, "
                "or stage the manifest to a local path"
            ],
            title=f"replay job cannot read manifest {location}",
        ) from None


def _window_of(capture: CaptureInput) -> ReplayWindow:
    return ReplayWindow(topic=capture.topic, start_offsets=capture.start_offsets(), end_offsets=capture.end_offsets())


def load_window_from_manifest(location: str) -> ReplayWindow:
    """The replay window of the (verified) manifest at ``location``."""
    return _window_of(load_replay_manifest(location).capture)


#: Flink job names this package builds stay within this many characters.
JOB_NAME_MAX = 200
#: The per-run prefix stays within this many, leaving the rest for the variant.
_JOB_NAME_PREFIX_MAX = 150


def _shortened(text: str, limit: int, digest_of: str) -> str:
    """``text`` when it fits in ``limit``; else its beginning + ``-`` + 16 hex of sha256(``digest_of``)."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(digest_of.encode()).hexdigest()[:16]
    return f"{text[: limit - len(digest) - 1]}-{digest}"


def replay_job_name_prefix(dag_id: str, run_id: str) -> str:
    """``afr-replay-<dag_id>-<run_id>-``: what every replay job name of one DAG run starts with.

    The variant follows (:func:`replay_job_name`); the cleanup task cancels the jobs whose name starts with
    it. A DAG id + run id too long for ``JOB_NAME_MAX`` keep their beginning and get a digest of both in
    place of the rest, so the prefix stays unique per run and every variant keeps its own suffix.
    """
    middle = _shortened(f"{dag_id}-{run_id}", _JOB_NAME_PREFIX_MAX - len("afr-replay--"), f"{dag_id}\n{run_id}")
    return f"afr-replay-{middle}-"


def replay_job_name(dag_id: str, run_id: str, variant: str) -> str:
    """The Flink job name of one replay variant: :func:`replay_job_name_prefix` + the variant.

    At most ``JOB_NAME_MAX`` characters; a variant name too long for the rest is shortened with a digest,
    so two variants never share a name.
    """
    prefix = replay_job_name_prefix(dag_id, run_id)
    return prefix + _shortened(variant, JOB_NAME_MAX - len(prefix), variant)


class ReplayJobSpec(BaseModel):
    """Arguments of one replay job (one variant)."""

    # a validation error must not print the input: it could hold a secret (the errors name the field)
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    variant: str = Field(description="Variant name written into every output line (baseline, candidate, ...).")
    agent_job: str | None = Field(
        default=None,
        description='"module:attr" of the job definition (an AgentJob: agent, deserializer, key selector, env '
        "resources, output serializer) the replay applies to the captured input; production's for the baselines.",
    )
    agent_factory: str | None = Field(
        default=None,
        description='Older form, instead of agent_job: "module:attr" of a callable returning the Agent, called as '
        "factory(mem0_config=..., **agent_options); its input is the record's JSON text keyed by key_field.",
    )
    job_identifier: str = Field(description="Flink Agents job-identifier = the Mem0 fork namespace.")
    action_state_topic: str = Field(description="Isolated, fresh Kafka action-state topic (never production's).")
    production_action_state_topic: str | None = Field(
        default=None,
        description="Production's action-state topic: a spec whose action_state_topic equals it is refused. "
        "Optional for specs written before it existed; the DAG always sets it.",
    )
    production_job_identifier: str | None = Field(
        default=None,
        description="Production's job identifier (its Mem0 user_id): a spec whose job_identifier equals it is "
        "refused. Optional for specs written before it existed; the DAG always sets it.",
    )
    output_dir: str = Field(
        description="Without `results`: the folder the job writes its output JSONL part files to (a path every "
        "TaskManager and the Airflow worker share). With `results`: only names where Airflow collects the "
        "outputs (next to this folder, any ObjectStoragePath URI); the job writes nothing there."
    )
    audit_dir: str = Field(description="Without `results`: the folder of the audit JSONL files (shared path).")
    results: ResultTopics | None = Field(
        default=None,
        description="The variant's own output and audit topics (created empty before the replay, deleted after): "
        "the job writes its results there and Airflow reads them back, so no folder is shared with Flink. "
        "None: the output_dir / audit_dir folders.",
    )
    kafka_bootstrap: str
    kafka_security: KafkaClientSecurity | None = Field(
        default=None, description="SASL/TLS of the replay's Kafka source (references resolved inside Flink)."
    )

    manifest: str | None = Field(
        default=None,
        description="Sealed manifest (path, file:// or another fsspec URI): the capture window and production's "
        "event time / watermark strategy. Its digest is verified; a hand-edited manifest is refused.",
    )
    manifest_text: str | None = Field(
        default=None,
        description="The sealed manifest itself (its JSON), carried in the submission: the job reads it instead "
        "of the file at `manifest` (which then only names it), so the Flink cluster needs no path shared with "
        "Airflow. Verified like a file: digest, and signature with manifest_key_ref. Set by the submitting "
        "task (with_manifest_carried).",
    )
    manifest_key_ref: str | None = Field(
        default=None,
        description="Reference to the manifest signing key ('${env:NAME}' or '${file:/path}'), resolved inside "
        "Flink; with it the manifest's signature must match. Never the key itself.",
    )
    capture_topic: str | None = None
    start_offsets: dict[int, int] | None = None
    end_offsets: dict[int, int] | None = None

    policy: ReplayPolicy = Field(default_factory=ReplayPolicy)
    cassette: CassetteWindow | None = Field(
        default=None,
        description="Production's recorded calls for the window (its cassette topic and offsets): served to the "
        "policy's `replay` decisions; without one, `replay` falls back. bootstrap/security are the spec's own.",
    )
    changed_resources: tuple[str, ...] = Field(
        default=(),
        description="The candidate's resources the agent check found changed or added (their fingerprints differ "
        "from production's): never served production's cassette (ReplayPolicy.changed). Set for the candidate "
        "only, by the submit task from the agent check's XCom.",
    )
    agent_uid: str | None = Field(default=None, description="setUid on the agent operator (jobs built with a uid).")
    agent_uid_hash: str | None = Field(default=None, description="setUidHash: production's 32-hex agent vertex id.")
    max_parallelism: int | None = Field(
        default=None,
        description="Production's max parallelism: pinned on the agent operator and set job-wide (Flink checks it "
        "for every operator mapped to savepoint state).",
    )
    parallelism: int = 1
    action_state_partitions: int | None = Field(default=None, description="Partitions of the action-state topic.")
    mem0_config: dict[str, Any] | None = Field(default=None, description="mem0 config dict for the agent's memory.")
    agent_options: dict[str, Any] = Field(default_factory=dict, description="Extra kwargs for the agent factory.")
    isolate_agent_build: bool = Field(
        default=True,
        description="Import the factory's package under a unique, content-hashed module name (TaskManagers "
        "share one Python interpreter; this keeps baseline and candidate code apart).",
    )
    mediate_resources: bool = Field(
        default=True,
        description="Wrap the agent's resources in policy proxies (off only to reproduce production's exact "
        "action identity, e.g. to demonstrate the action-state hazard).",
    )
    agent_config: dict[str, str | int | bool] = Field(
        default_factory=dict, description="Extra Flink Agents config entries for the agent operator."
    )
    key_field: str = Field(
        default="customer",
        description="agent_factory form: JSON field of the input that is the agent key. Both forms: the field the "
        "audit names the key by (a job definition whose key selector is a FieldKey uses its field).",
    )
    watermark: str | None = Field(
        default=None,
        description='Watermark strategy override: "none", "monotonous" or "bounded:<ms>". None (the default): '
        "production's strategy from the manifest (monotonous without a manifest).",
    )
    watermark_idleness_ms: int | None = Field(
        default=None,
        ge=0,
        description="Idleness timeout override in ms (0 = never idle). None: the manifest's (none without one).",
    )
    event_time: EventTime | None = Field(
        default=None,
        description="Event-time source override (Kafka record timestamp or a JSONPath field). None: the "
        "manifest's (the Kafka record timestamp without one).",
    )
    checkpoint_interval_ms: int = 1000
    connector_jars: list[str] = Field(default_factory=list, description="Kafka connector + kafka-clients jars.")
    job_name: str | None = None

    @field_validator("agent_job", "agent_factory")
    @classmethod
    def _ref_shape(cls, value: str | None, info: Any) -> str | None:
        if value is not None and not _FACTORY.fullmatch(value):
            raise ValueError(f'{info.field_name} {value!r} must look like "package.module:attribute"')
        return value

    @model_validator(mode="after")
    def _one_agent(self) -> ReplayJobSpec:
        if bool(self.agent_job) == bool(self.agent_factory):
            raise ValueError(
                "give exactly one of agent_job (the job definition, an AgentJob) and agent_factory (the older "
                "factory form)"
            )
        return self

    @property
    def agent_ref(self) -> str:
        """The agent this spec runs, as written: the job definition, else the factory."""
        return self.agent_job or self.agent_factory or ""

    @field_validator("agent_uid_hash")
    @classmethod
    def _hex32(cls, value: str | None) -> str | None:
        if value is not None and not _HEX32.fullmatch(value.lower()):
            raise ValueError(f"agent_uid_hash {value!r} must be a 32-hex Flink vertex id (JobVertexID)")
        return value.lower() if value else value

    @field_validator("watermark")
    @classmethod
    def _watermark_shape(cls, value: str | None) -> str | None:
        if value is None or _WATERMARK.fullmatch(value):
            return value
        raise ValueError(
            f'watermark {value!r} must be "none", "monotonous" or "bounded:<ms>" (or left out: the manifest\'s)'
        )

    @field_validator("agent_config")
    @classmethod
    def _no_store_or_identity(cls, value: dict[str, Any]) -> dict[str, Any]:
        """The replay's action-state store and Mem0 namespace come from ``action_state_topic`` and
        ``job_identifier`` (checked against production's): an agent option may not name others."""
        taken = sorted(k for k in value if k.lower() in RESERVED_AGENT_CONFIG)
        if taken:
            raise ValueError(
                f"agent_config sets {taken}: the replay's action-state store and identity are its own (a fresh "
                "topic and the memory fork's namespace), set from action_state_topic and job_identifier; an agent "
                "option naming them could point the replay at production's recorded results and memories. Fix: "
                "leave these keys out of agent_config"
            )
        return value

    @model_validator(mode="after")
    def _secrets_by_reference(self) -> ReplayJobSpec:
        """The spec travels as a program argument (JobManager log, REST): secrets only as references."""
        refuse_literal_secrets(self.mem0_config, "mem0_config")
        refuse_literal_secrets(self.agent_options, "agent_options")
        refuse_literal_secrets(self.agent_config, "agent_config")
        return self

    @model_validator(mode="after")
    def _key_by_reference(self) -> ReplayJobSpec:
        """The signing key travels as a reference; the spec is shown by Flink's JobManager log and REST API."""
        if self.manifest_key_ref is not None:
            if not is_reference(self.manifest_key_ref):
                raise ValueError(
                    "manifest_key_ref must be a reference ('${env:NAME}' or '${file:/path}'), never the key: the "
                    "spec is a program argument that Flink's JobManager log and REST API show. Fix: give the key "
                    "to the Flink processes as an environment variable or a mounted file and name it here"
                )
            if self.manifest is None:
                raise ValueError(
                    "manifest_key_ref is set but there is no manifest to check. Fix: give the manifest, or drop "
                    "manifest_key_ref"
                )
        return self

    @model_validator(mode="after")
    def _not_production(self) -> ReplayJobSpec:
        problems = self.production_clashes()
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def production_clashes(self) -> list[str]:
        """Why this spec would touch production's state: its action-state topic or job identifier is
        production's (``cause. Fix: …`` each; [] when neither is, or production's are not known)."""
        problems = self._empty_names()
        if self.production_action_state_topic and self.action_state_topic == self.production_action_state_topic:
            problems.append(
                f"action_state_topic {self.action_state_topic!r} is production's action-state topic: the replay "
                "would reuse production's recorded LLM and tool results (the prompt is not in their key) and write "
                "into production's store. Fix: give the replay a fresh, empty topic (IsolateActionStateOperator)"
            )
        if self.production_job_identifier and self.job_identifier == self.production_job_identifier:
            problems.append(
                f"job_identifier {self.job_identifier!r} is production's job identifier: the replay would read and "
                "write production's Mem0 memories. Fix: use the memory fork's namespace (ForkMem0NamespaceOperator)"
            )
        taken = {self.production_action_state_topic: "production's action-state topic",
                 self.action_state_topic: "the replay's action-state topic"}
        for kind, topic in (self.results.model_dump().items() if self.results else ()):
            if topic in taken:
                problems.append(
                    f"results.{kind} {topic!r} is {taken[topic]}: the replay would write its {kind} there. Fix: give "
                    "the variant result topics of its own (the replay DAG names them <action-state topic>-outputs "
                    "and -audit)"
                )
        if self.results and self.results.outputs == self.results.audit:
            problems.append(
                f"results.outputs and results.audit are one topic ({self.results.audit!r}). Fix: two topics"
            )
        return problems

    def _empty_names(self) -> list[str]:
        """The names the guard compares that are given but empty: an empty production topic or identifier would
        read as "not known" and turn the guard off; an empty replay topic or namespace names nothing."""
        fixes = {
            "production_action_state_topic": (self.production_action_state_topic, "give production's action-state "
                                              "topic (the DAG sets it), or leave the field out"),
            "production_job_identifier": (self.production_job_identifier, "give production's job identifier (the "
                                          "DAG sets it), or leave the field out"),
            "action_state_topic": (self.action_state_topic, "give the replay a fresh topic of its own"),
            "job_identifier": (self.job_identifier, "give the replay its memory fork's namespace"),
        }
        return [
            f"{field} is empty: the guard against replaying on production's state needs it. Fix: {fix}"
            for field, (value, fix) in fixes.items()
            if value is not None and not value.strip()
        ]

    def audit_target(self) -> str:
        """Where the job's proxies and guard send audit records: the results' audit topic (as
        :class:`~airflow_flink_replay.core.results.AuditTopic` JSON, security by reference), else ``audit_dir``."""
        if self.results is None:
            return self.audit_dir
        security = self.kafka_security.to_arg() if self.kafka_security else ""
        return AuditTopic(topic=self.results.audit, bootstrap=self.kafka_bootstrap, security=security).target()

    @model_validator(mode="after")
    def _window_given(self) -> ReplayJobSpec:
        explicit = [self.capture_topic, self.start_offsets, self.end_offsets]
        if self.manifest is None and any(v is None for v in explicit):
            raise ValueError("give either manifest or all of capture_topic, start_offsets, end_offsets")
        if self.agent_uid and self.agent_uid_hash:
            raise ValueError("give agent_uid or agent_uid_hash, not both")
        return self

    def window(self) -> ReplayWindow:
        """The replay window (explicit offsets win over the manifest)."""
        return self.replay_input().window

    def timing(self) -> ReplayTiming:
        """Event time and watermarks: the manifest's (production's), with this spec's explicit overrides."""
        return self.replay_input().timing

    def replay_input(self) -> ReplayInput:
        """Window and timing in one go (the manifest, if any, is loaded and verified once)."""
        manifest = (
            load_replay_manifest(self.manifest, self.manifest_key_ref, self.manifest_text)
            if self.manifest is not None
            else None
        )
        if self.capture_topic and self.start_offsets is not None and self.end_offsets is not None:
            window = ReplayWindow(
                topic=self.capture_topic, start_offsets=self.start_offsets, end_offsets=self.end_offsets
            )
        else:
            assert manifest is not None  # _window_given
            window = _window_of(manifest.capture)
        base = timing_from_capture(manifest.capture) if manifest is not None else ReplayTiming()
        return ReplayInput(
            window=window,
            timing=self.override_timing(base),
            manifest_digest=manifest.digest if manifest is not None else None,
        )

    def with_manifest_carried(self, opener: Callable[[str], Any] | None = None) -> ReplayJobSpec:
        """This spec carrying its manifest's text (read and digest-checked here, on the submitting side), so the
        job on the Flink cluster reads no file: ``manifest`` may be a location only Airflow can read (a local
        folder of the worker, ``s3://<conn>@bucket`` through Airflow's object storage). Unchanged without a
        manifest or when already carried. ``opener`` turns the location into what to open (the Airflow side passes
        :func:`airflow_flink_replay.run_io.run_storage.location`, which knows its connections); none: fsspec.

        :raises ManifestError: the manifest cannot be read or is not valid; ManifestTamperedError when its
            digest does not match (checked again, with the signature when keyed, by the job).
        """
        if self.manifest is None or self.manifest_text is not None:
            return self
        from airflow_flink_replay.core.manifest_io import load_manifest

        try:
            manifest = load_manifest(opener(self.manifest) if opener else self.manifest)
        except ManifestTamperedError as err:
            raise ManifestTamperedError(
                err.problems, title=f"refusing to submit a replay of manifest {self.manifest}: digest check failed"
            ) from None
        except ManifestError as err:
            title = f"cannot read manifest {self.manifest} to submit the replay"
            raise ManifestError(err.problems, title=title) from None
        except ImportError as err:  # an fsspec backend (s3fs, gcsfs, ...) missing on the submitting side
            raise ManifestError(
                [f"manifest: {err}. Fix: install the fsspec backend for this URI scheme where the replay is submitted"],
                title=f"cannot read manifest {self.manifest} to submit the replay",
            ) from None
        return self.model_copy(update={"manifest_text": manifest.to_json(indent=None)})

    def override_timing(self, base: ReplayTiming) -> ReplayTiming:
        """``base`` with the explicit ``event_time`` / ``watermark`` / ``watermark_idleness_ms`` of this spec."""
        changes: dict[str, Any] = {}
        origin = dict(base.origin)
        if self.event_time is not None:
            changes["event_time"], origin["event_time"] = self.event_time, "spec"
        if self.watermark is not None:
            changes["watermark"], origin["watermark"] = self.watermark, "spec"
        if self.watermark_idleness_ms is not None:
            changes["idleness_ms"] = self.watermark_idleness_ms or None
            origin["idleness_ms"] = "spec"
        return ReplayTiming.model_validate({**base.model_dump(), **changes, "origin": origin})

    def to_argv(self) -> list[str]:
        """Program arguments for the replay job: ``["--spec-json", <json>]``."""
        return ["--spec-json", self.model_dump_json()]

    def write(self, path: str | Path) -> list[str]:
        """Write the spec to ``path`` and return ``["--spec-file", path]``."""
        Path(path).write_text(self.model_dump_json(indent=2), encoding="utf-8")
        return ["--spec-file", str(path)]

    @classmethod
    def from_argv(cls, argv: list[str]) -> ReplayJobSpec:
        """Parse ``--spec-json <json>`` or ``--spec-file <path>``."""
        parser = argparse.ArgumentParser(prog="replay_job", description="Bounded Flink Agents replay job")
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--spec-json")
        group.add_argument("--spec-file")
        ns, _unknown = parser.parse_known_args(argv)
        if ns.spec_file:
            return cls.model_validate_json(Path(ns.spec_file).read_text(encoding="utf-8"))
        return cls.model_validate_json(ns.spec_json)

    @classmethod
    def all_from_argv(cls, argv: list[str]) -> list[ReplayJobSpec]:
        """Every spec of ``argv``, in order: ``--spec-json <json>`` and ``--spec-file <path>``, each repeatable
        (one replay program submitting several variants)."""
        specs: list[ReplayJobSpec] = []
        for flag, value in itertools.pairwise(argv):
            if flag == "--spec-json":
                specs.append(cls.model_validate_json(value))
            elif flag == "--spec-file":
                specs.append(cls.model_validate_json(Path(value).read_text(encoding="utf-8")))
        if not specs:
            raise ValueError("replay_job needs --spec-json <json> or --spec-file <path> (repeatable)")
        return specs

    def with_changed_resources(self, names: Iterable[str]) -> ReplayJobSpec:
        """This spec never serving production's cassette to ``names`` (the candidate's changed resources) on top
        of those it already names."""
        changed = tuple(sorted(set(self.changed_resources) | set(names)))
        return self if changed == self.changed_resources else self.model_copy(update={"changed_resources": changed})

    def cassette_json(self) -> str:
        """The cassette window as the replay's proxies read it (the spec's bootstrap and security), or ''."""
        if self.cassette is None:
            return ""
        security = self.kafka_security.to_arg() if self.kafka_security else ""
        window = self.cassette.model_copy(update={"bootstrap": self.kafka_bootstrap, "security": security})
        return window.model_dump_json()
