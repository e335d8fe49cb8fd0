"""``ReplaySpec``: everything one replay DAG needs to know about a production Flink Agents job.

A spec is written once per production job (YAML next to the DAG, or Python) and turned into DAGs by
:mod:`airflow_flink_replay.dag_factory`. Per-run choices (candidate, quiesce mode, window size,
thresholds, keep the fork) come from the DAG run's params/conf and override the spec's defaults through
:meth:`ReplaySpec.with_run_overrides`. Pure: pydantic + yaml.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from airflow_flink_replay.core.compare.config import CompareConfig
from airflow_flink_replay.core.flink_models import FlinkPythonProgram
from airflow_flink_replay.core.kafka_security import KafkaClientSecurity
from airflow_flink_replay.core.manifest import EventTime, WatermarkSpec
from airflow_flink_replay.core.policy import ReplayPolicy
from airflow_flink_replay.core.results import ResultTopics
from airflow_flink_replay.core.secrets import (
    is_reference,
    refuse_credentials_in_locations,
    refuse_literal_secrets,
)
from airflow_flink_replay.exceptions import SpecError

QuiesceModeName = Literal["drain", "stop", "savepoint", "existing"]
#: Most A/A replays a spec may ask for (``aa_replays``): each costs a replay job, a memory fork and three topics.
MAX_AA_REPLAYS = 4
# names and references are checked with fullmatch: ``$`` would accept a trailing newline
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{1,62}")
_FACTORY = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
#: Longest production job name or job identifier; characters of these Unicode categories are refused in them
#: (control, format such as zero-width or bidi overrides, line and paragraph separators, lone surrogates).
MAX_JOB_NAME = 200
_INVISIBLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
#: Largest spec file read (a spec is a few KB).
MAX_SPEC_BYTES = 1 << 20
#: Characters Kafka does not allow in a topic name, and its longest topic name.
_ILLEGAL_TOPIC_CHARS = re.compile(r"[^a-zA-Z0-9._-]")
MAX_TOPIC_NAME = 249
#: Policy mappings keyed by resource names (not field names: ``refresh_token: block`` names no secret).
_RESOURCE_MAPS = ("policy.by_type", "policy.by_name", "policy.stand_ins", "policy.call_match")
#: Where the replay job finds the manifest signing key when the spec does not say (a Flink env variable).
DEFAULT_MANIFEST_KEY_REF = "${env:AFR_MANIFEST_KEY}"


def variant_names(aa_replays: int = 1) -> list[str]:
    """The replay variants of a run with ``aa_replays`` A/A replays, in the order the DAG builds them:
    ``baseline``, ``baseline_2`` … ``baseline_<aa_replays + 1>``, ``candidate``.

    Every name is ``[a-z0-9_]``, so it stays legal in a task id, a Flink job name, a Kafka topic name and (with
    ``_`` as ``-``) a Mem0 namespace. Without a spec, ``variant_names()`` is a default spec's (one A/A pair)."""
    return ["baseline", *(f"baseline_{n}" for n in range(2, aa_replays + 2)), "candidate"]


def extra_baseline_names(count: int) -> list[str]:
    """The baselines after ``baseline_2``, ``count`` of them: ``baseline_3``, ``baseline_4`` …"""
    return [f"baseline_{n}" for n in range(3, count + 3)]


def is_legal_topic_name(name: str) -> bool:
    """True for a Kafka-legal topic name: 1-249 of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``."""
    return 0 < len(name) <= MAX_TOPIC_NAME and not _ILLEGAL_TOPIC_CHARS.search(name) and name not in (".", "..")


def is_spec_name(name: str) -> bool:
    """True for a spec's ``name``: 2-63 characters of ``[a-z0-9_-]``, starting with a letter or digit."""
    return bool(_NAME.fullmatch(name))


def _shown(value: str, limit: int = 60) -> str:
    """``value`` for an error message: escaped (``repr``), and its beginning only when it is long."""
    return repr(value[:limit]) + (f" (… {len(value):,} characters)" if len(value) > limit else "")


def job_name_problem(value: str) -> str | None:
    """Why ``value`` cannot be a production job name or job identifier (None when it can): empty, longer than
    :data:`MAX_JOB_NAME`, or holding characters a log line or a terminal would hide or act on."""
    if not value.strip():
        return "is empty. Fix: give production's name"
    if len(value) > MAX_JOB_NAME:
        return f"is {len(value):,} characters long. Fix: at most {MAX_JOB_NAME}"
    hidden = sorted({f"U+{ord(c):04X}" for c in value if unicodedata.category(c) in _INVISIBLE})
    if hidden:
        return (f"holds control, format or separator characters ({', '.join(hidden[:5])}). Fix: visible characters "
                "only (letters, digits, punctuation, spaces)")
    return None


def replay_topic_name(production_topic: str, run_key: str, variant: str) -> str:
    """The replay's action-state topic of one variant: ``<production topic>-replay-<run key>-<variant>``.

    The one naming rule for replay topics (the DAG's ``resolve`` task through
    :meth:`ReplaySpec.action_state_topic`, ``IsolateActionStateOperator``'s default). Always Kafka-legal:
    other characters become ``-``, and a name longer than 249 characters keeps its beginning and ends in a
    digest of the whole, so names stay distinct.
    """
    name = _ILLEGAL_TOPIC_CHARS.sub("-", f"{production_topic}-replay-{run_key}-{variant}")
    if len(name) > MAX_TOPIC_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        name = f"{name[: MAX_TOPIC_NAME - 13]}-{digest}"
    return name


class ProductionJob(BaseModel):
    """The production Flink Agents job and the external state it owns."""

    model_config = ConfigDict(extra="forbid")

    job_name: str = Field(description="Flink job name; the RUNNING job with this name is production")
    program: FlinkPythonProgram = Field(description="how production is (re)submitted on resume")
    agent_job: str | None = Field(
        default=None,
        description='"module:attr" of production\'s job definition (an AgentJob: agent, deserializer, key '
        "selector, env resources, output serializer); the baselines replay it. Production's program applies the "
        "same definition (production_job.py --agent-job, or your main() calling apply_agent_job)",
    )
    agent_factory: str | None = Field(
        default=None,
        description='older form, instead of agent_job: "module:attr" of factory(mem0_config=..., **options) '
        "returning production's agent; its input is the record's JSON text keyed by key_field",
    )
    input_topic: str = Field(description="production's input topic")
    capture_topic: str = Field(description="topic the capture tee writes the agent's keyed input to")
    output_topic: str | None = Field(
        default=None,
        description="production's output topic (read only): its outputs for the window are compared with the "
        "baseline's, the fidelity figure; none = no fidelity figure",
    )
    cassette_topic: str | None = Field(
        default=None,
        description="topic production records its mediated calls to (production_job.py --cassette-topic): the "
        "replays are served production's results for the window (policy decision `replay`); none = no cassette",
    )
    memory_journal_topic: str | None = Field(
        default=None,
        description="topic production journals its memory writes to (production_job.py --memory-journal-topic; "
        "its memory built by build_offline_memory or wrapped by journal_memory): the memory cut in the stop window "
        "then re-reads only the memories written since the pre-copy instead of the whole namespace; none = the "
        "cut reads the whole namespace (exact with any writer)",
    )
    action_state_topic: str = Field(description="production's Flink Agents action-state topic (never touched)")
    action_state_partitions: int | None = Field(
        default=None, ge=1, description="partitions of the replay's action-state topics (default: production's)"
    )
    job_identifier: str = Field(description="production's Flink Agents job identifier = Mem0 user_id")
    key_field: str = Field(
        default="customer",
        description="agent_factory form: JSON field of the input that is the agent key; both forms: the field "
        "audit records name the key by",
    )
    agent_uid: str | None = Field(default=None, description="uid the production pipeline sets on the agent")
    max_parallelism: int | None = Field(default=None, ge=1)
    event_time: EventTime = Field(
        default_factory=EventTime,
        description="production's event time (Kafka record timestamp or a JSONPath field); recorded in the "
        "manifest, the replay job uses it",
    )
    watermark: WatermarkSpec = Field(
        default_factory=WatermarkSpec,
        description="production's watermark strategy (max out-of-orderness, idleness); recorded in the manifest, "
        "the replay job uses it",
    )

    @field_validator("agent_job", "agent_factory")
    @classmethod
    def _ref(cls, value: str | None, info: Any) -> str | None:
        if value and not _FACTORY.fullmatch(value):
            raise ValueError(f'{info.field_name} {value!r} must look like "package.module:attribute"')
        return value or None

    @field_validator("job_name", "job_identifier")
    @classmethod
    def _visible_name(cls, value: str, info: Any) -> str:
        problem = job_name_problem(value)
        if problem:
            raise ValueError(f"{info.field_name} {_shown(value)} {problem}")
        return value

    @field_validator(
        "input_topic", "capture_topic", "output_topic", "cassette_topic", "memory_journal_topic", "action_state_topic"
    )
    @classmethod
    def _topic_name(cls, value: str | None, info: Any) -> str | None:
        if value is not None and not is_legal_topic_name(value):
            raise ValueError(
                f"{info.field_name} {_shown(value)} is not a Kafka topic name. Fix: 1-{MAX_TOPIC_NAME} characters of "
                "a-z A-Z 0-9 . _ - (not '.' or '..'); leave an optional topic out rather than empty"
            )
        return value

    @model_validator(mode="after")
    def _one_agent(self) -> ProductionJob:
        if bool(self.agent_job) == bool(self.agent_factory):
            raise ValueError(
                'give exactly one of agent_job ("module:attr" of the AgentJob production runs) and agent_factory '
                "(the older factory form)"
            )
        return self

    @property
    def agent_ref(self) -> str:
        """Production's agent as written: the job definition, else the factory."""
        return self.agent_job or self.agent_factory or ""


class WindowSpec(BaseModel):
    """How much input to capture after production resumes."""

    model_config = ConfigDict(extra="forbid")

    records: int | None = Field(default=40, ge=1, description="replay this many captured records")
    minutes: float | None = Field(default=None, gt=0, description="... or wait this long")
    timeout_minutes: float = Field(default=30, gt=0, description="fail if the window is not filled by then")
    outputs_tied_by: Literal["record", "watermark"] = Field(
        default="record",
        description="how production's outputs tie to the window's records, when the replays wait for production "
        "to have processed the window before they read its cassette: 'record' (an agent: one output per record, "
        "stamped with its event time) or 'watermark' (a pipeline whose outputs come from an event-time window: "
        "an output stamped T means every record up to T went through; flink-replay deploy writes it)",
    )

    @model_validator(mode="after")
    def _one(self) -> WindowSpec:
        if self.records is None and self.minutes is None:
            raise ValueError("window needs `records` or `minutes`")
        if self.minutes is not None and self.minutes >= self.timeout_minutes:
            raise ValueError(
                f"window.minutes ({self.minutes:g}) must be below window.timeout_minutes ({self.timeout_minutes:g}): "
                "the sensor would time out first. Fix: raise timeout_minutes or lower window_minutes"
            )
        return self


class ReplaySpec(BaseModel):
    """One production job's replay configuration (see docs/operators.md for every field)."""

    # a validation error must not print the input: it could hold a secret (the errors name the field)
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    name: str = Field(description="short id used in DAG ids, topic and namespace names ([a-z0-9_-])")
    production: ProductionJob
    candidate_agent_job: str | None = Field(
        default=None,
        description='"module:attr" of the candidate\'s job definition (an AgentJob); None (and no '
        "candidate_agent_factory) = baselines only (noise tracking)",
    )
    candidate_agent_factory: str | None = Field(
        default=None, description='older form, instead of candidate_agent_job: "module:attr" of the candidate factory'
    )
    quiesce_mode: QuiesceModeName = "drain"
    existing_manifest: str | None = Field(
        default=None,
        description="quiesce_mode=existing: URI of an earlier run's manifest; its savepoint and window are replayed",
    )
    existing_savepoint: str | None = Field(
        default=None, description="quiesce_mode=existing: optional check that the manifest links this savepoint"
    )
    existing_memory: str | None = Field(
        default=None,
        description="quiesce_mode=existing: Mem0 namespace the forks copy (default: production's, as it is now)",
    )
    window: WindowSpec = Field(default_factory=WindowSpec)
    compare_key: str = "$.id"
    compare: CompareConfig = Field(default_factory=CompareConfig)
    policy: ReplayPolicy = Field(default_factory=ReplayPolicy)
    flink_conn_id: str = "flink_default"
    replay_flink_conn_id: str | None = Field(
        default=None, description="Flink connection for replay jobs (default: production's cluster)"
    )
    kafka_conn_id: str = "kafka_default"
    mem0_conn_id: str = "mem0_default"
    kafka_bootstrap: str = Field(description="bootstrap servers as seen from the Flink cluster")
    kafka_security: KafkaClientSecurity | None = Field(
        default=None,
        description="how the replay jobs' and the agent check's Kafka clients authenticate (the password as a "
        "reference resolved inside Flink); none: plaintext. The Airflow side uses the kafka_conn_id connection.",
    )
    connector_jars: list[str] = Field(default_factory=list, description="Kafka connector jars for the jobs")
    mem0_config: dict[str, Any] | None = Field(default=None, description="mem0 config the agents use")
    runs_uri: str = Field(description="base folder of run folders (manifest, outputs, reports, run record)")
    manifest_sources: list[str] | None = Field(
        default=None,
        description="URI prefixes an earlier manifest (existing_manifest) may be loaded from; None: runs_uri only",
    )
    manifest_signing_conn_id: str | None = Field(
        default=None,
        description="Airflow connection whose password is the HMAC key manifests are signed and checked with "
        "(None: manifests are sealed by their digest only)",
    )
    manifest_key_ref: str | None = Field(
        default=None,
        description="with manifest_signing_conn_id: where the replay job finds the same key inside Flink, as a "
        "reference ('${env:NAME}' or '${file:/path}'; default '${env:AFR_MANIFEST_KEY}')",
    )
    keep_fork: bool = False
    savepoint_dir: str | None = None
    replay_timeout_minutes: float = Field(default=20, gt=0)
    aa_replays: int = Field(
        default=1,
        description="how many A/A replays of production's agent run besides the baseline (1-4): baseline_2, then "
        "baseline_3 ... The noise is measured on more pairs of baselines, so more of them narrow it for a noisy "
        "(sampling) LLM agent, at the cost of one more replay job, memory fork and three topics each. It shapes "
        "the DAG (one fork and one replay task per variant), so it is a spec field, not a per-run choice",
    )
    lease_wait_minutes: float = Field(
        default=5, ge=0, le=24 * 60,
        description="minutes a run waits for production's lease while another replay run of the same production "
        "(another DAG of it) stops and resumes it; then it fails having touched nothing",
    )  # fmt: skip
    capacity_wait_minutes: float = Field(
        default=30, gt=0, le=24 * 60,
        description="minutes the replays of a run wait for free task slots on the replay cluster (other runs' "
        "replays hold them) before the submission fails having submitted nothing; the run record says how long "
        "they waited",
    )  # fmt: skip

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(
                f"name {_shown(value)} must be 2-63 characters of [a-z0-9_-], starting with a letter/digit. Fix: "
                "e.g. review-triage"
            )
        return value

    @field_validator("aa_replays")
    @classmethod
    def _aa_replays(cls, value: int) -> int:
        if not 1 <= value <= MAX_AA_REPLAYS:
            raise ValueError(
                f"aa_replays {value} is out of range: it counts the A/A replays of production's agent besides the "
                f"baseline. Fix: 1 (one A/A pair, the default) to {MAX_AA_REPLAYS}; each one more costs a replay job, "
                "a memory fork and three topics"
            )
        return value

    @field_validator("candidate_agent_job", "candidate_agent_factory")
    @classmethod
    def _candidate(cls, value: str | None, info: Any) -> str | None:
        if value and not _FACTORY.fullmatch(value):
            raise ValueError(f'{info.field_name} {value!r} must look like "package.module:attribute"')
        return value or None

    @model_validator(mode="after")
    def _one_candidate(self) -> ReplaySpec:
        if self.candidate_agent_job and self.candidate_agent_factory:
            raise ValueError(
                "give candidate_agent_job or candidate_agent_factory, not both (the candidate is one agent)"
            )
        return self

    @model_validator(mode="after")
    def _secrets_by_reference(self) -> ReplaySpec:
        """No literal secret in what travels to XCom, the run record and the jobs' arguments: the whole spec is
        walked (mem0_config, program arguments, env and Flink config, stand-ins, every URL), and no location
        holds ``user:password@``."""
        refuse_credentials_in_locations({
            "runs_uri": self.runs_uri, "existing_manifest": self.existing_manifest, "savepoint_dir": self.savepoint_dir,
            **{f"manifest_sources[{i}]": s for i, s in enumerate(self.manifest_sources or [])},
        })  # fmt: skip
        refuse_literal_secrets(self, "", opaque=_RESOURCE_MAPS)
        return self

    @model_validator(mode="after")
    def _manifest_signing(self) -> ReplaySpec:
        """The key reaches the replay job by reference only, and only together with the signing connection."""
        if self.manifest_key_ref is not None and not is_reference(self.manifest_key_ref):
            raise ValueError(
                "manifest_key_ref must be a reference ('${env:NAME}' or '${file:/path}'), never the key itself: "
                "it travels in the replay job's program arguments. Fix: put the key in an environment variable "
                "or a file of the Flink processes and name it here"
            )
        if self.manifest_key_ref is not None and not self.manifest_signing_conn_id:
            raise ValueError(
                "manifest_key_ref is set without manifest_signing_conn_id: manifests would be written unsigned "
                "and the replay job would refuse them. Fix: set manifest_signing_conn_id too, or drop "
                "manifest_key_ref"
            )
        if self.manifest_signing_conn_id and self.manifest_key_ref is None:
            self.manifest_key_ref = DEFAULT_MANIFEST_KEY_REF
        if self.manifest_sources is not None and not [s for s in self.manifest_sources if s.strip()]:
            raise ValueError(
                "manifest_sources is empty: no earlier manifest could ever be reused. Fix: leave it out (the "
                "runs location) or list the URI prefixes earlier manifests may come from"
            )
        return self

    def allowed_manifest_sources(self) -> list[str]:
        """The URI prefixes an earlier manifest may be loaded from: ``manifest_sources``, else ``runs_uri``."""
        return [s for s in self.manifest_sources or [] if s.strip()] or [self.runs_uri]

    @model_validator(mode="after")
    def _existing(self) -> ReplaySpec:
        if self.quiesce_mode == "existing" and not self.existing_manifest:
            raise ValueError(
                "quiesce_mode=existing needs existing_manifest: the manifest URI of an earlier run (its "
                "run_record.json names it); its savepoint and capture window are replayed again"
            )
        return self

    def memory_source(self) -> str:
        """The Mem0 namespace the replay's forks copy: production's, or ``existing_memory`` when reusing."""
        if self.quiesce_mode == "existing" and self.existing_memory:
            return self.existing_memory
        return self.production.job_identifier

    # ------------------------------------------------------------------------------------------ names
    def variant_names(self) -> list[str]:
        """Every variant a run of this spec replays, in the DAG's order: the baselines
        (:meth:`baselines`), then ``candidate`` (production's agent again in a run without a candidate: the
        DAG always has the slot)."""
        return variant_names(self.aa_replays)

    def baselines(self) -> list[str]:
        """The variants that replay production's agent: ``baseline``, ``baseline_2`` and the extra ones."""
        return [v for v in self.variant_names() if v != "candidate"]

    def extra_baselines(self) -> list[str]:
        """The A/A replays after ``baseline_2`` (``aa_replays`` above 1): ``baseline_3`` …, in order."""
        return extra_baseline_names(self.aa_replays - 1)

    def variants(self) -> list[str]:
        """The variants this spec replays: the baselines always, the candidate when one is set."""
        return [v for v in self.variant_names() if v != "candidate" or self.candidate_ref()]

    def fork_namespace(self, run_tag: str, variant: str) -> str:
        """The Mem0 user_id (= job identifier) of a variant's memory fork."""
        return f"replay-{self.name}-{run_tag}-{variant}".replace("_", "-")

    def action_state_topic(self, run_tag: str, variant: str) -> str:
        """The isolated action-state topic of a variant: :func:`replay_topic_name` with run key
        ``<name>-<run_tag>``, i.e. ``<production topic>-replay-<name>-<run_tag>-<variant>``."""
        return replay_topic_name(self.production.action_state_topic, f"{self.name}-{run_tag}", variant)

    def result_topics(self, run_tag: str, variant: str) -> ResultTopics:
        """The variant's result topics: its action-state topic's name with ``-outputs`` / ``-audit``
        (:func:`replay_topic_name` keeps them legal and distinct)."""
        run_key = f"{self.name}-{run_tag}"
        topic = self.production.action_state_topic
        return ResultTopics(
            outputs=replay_topic_name(topic, run_key, f"{variant}-outputs"),
            audit=replay_topic_name(topic, run_key, f"{variant}-audit"),
        )

    def candidate_ref(self) -> str | None:
        """The candidate as written (its job definition, else its factory); None without a candidate."""
        return self.candidate_agent_job or self.candidate_agent_factory

    def agent_job_for(self, variant: str) -> str | None:
        """The job definition (``"module:attr"`` of an AgentJob) a variant runs: production's for every
        baseline, the candidate's otherwise; None when that agent is given in the factory form
        (:meth:`agent_factory_for` then names it). Exactly one of the two is set for every variant."""
        if variant == "candidate":
            self._need_candidate()
            return self.candidate_agent_job
        return self.production.agent_job

    def agent_factory_for(self, variant: str) -> str | None:
        """The agent factory (older form) a variant runs; None when it is given as a job definition."""
        if variant == "candidate":
            self._need_candidate()
            return self.candidate_agent_factory
        return self.production.agent_factory

    def _need_candidate(self) -> None:
        if not self.candidate_ref():
            raise SpecError("variant 'candidate' needs candidate_agent_job (or candidate_agent_factory)")

    def with_candidate(self, ref: str | None) -> ReplaySpec:
        """This spec with ``ref`` as the candidate, in the form of the spec's candidate if it has one, else in
        production's form; ``None``: production's own agent (an A/A run)."""
        if ref is None:
            update = {
                "candidate_agent_job": self.production.agent_job,
                "candidate_agent_factory": self.production.agent_factory,
            }
        elif self.candidate_agent_job or (not self.candidate_agent_factory and self.production.agent_job):
            update = {"candidate_agent_job": ref, "candidate_agent_factory": None}
        else:
            update = {"candidate_agent_job": None, "candidate_agent_factory": ref}
        return self.model_copy(update=update)

    # -------------------------------------------------------------------------------------- overrides
    def with_run_overrides(self, params: dict[str, Any] | None) -> ReplaySpec:
        """This spec with a DAG run's params/conf applied (unknown or empty values are ignored).

        Accepted keys: ``candidate`` (``"module:attr"``, in the form of the spec's candidate, else of
        production's: see :meth:`with_candidate`), ``candidate_agent_job`` / ``candidate_agent_factory`` (the
        form said explicitly), ``quiesce_mode``, ``window_records``, ``window_minutes``, ``abs_threshold``,
        ``rel_threshold``, ``min_aligned``, ``keep_fork``, ``existing_manifest``, ``existing_savepoint``,
        ``existing_memory``.
        """
        if not params:
            return self
        p = {k: v for k, v in params.items() if v not in (None, "")}
        base = self.with_candidate(p["candidate"]) if "candidate" in p else self
        data = base.model_dump()
        for key, other in (
            ("candidate_agent_job", "candidate_agent_factory"),
            ("candidate_agent_factory", "candidate_agent_job"),
        ):
            if key in p:
                data[key], data[other] = p[key], None
        for key in ("quiesce_mode", "keep_fork", "existing_manifest", "existing_savepoint", "existing_memory"):
            if key in p:
                data[key] = p[key]
        if "window_records" in p or "window_minutes" in p:
            data["window"] = {
                **data["window"],
                "records": p.get("window_records"),
                "minutes": p.get("window_minutes"),
            }
        for key in ("abs_threshold", "rel_threshold", "min_aligned"):
            if key in p:
                data["compare"][key] = p[key]
        try:
            return ReplaySpec.model_validate(data)
        except ValidationError as err:
            raise SpecError(_explain(err, "run conf/params")) from None

    # ---------------------------------------------------------------------------------------- loading
    @classmethod
    def from_yaml(cls, path: str | Path) -> ReplaySpec:
        """Load a spec from a YAML file; errors name the field and the file.

        The file is read with bounds first (:mod:`~airflow_flink_replay.core.yaml_input`): a regular file of at
        most :data:`MAX_SPEC_BYTES` of UTF-8, one YAML mapping without alias bombs or deep nesting.
        """
        from airflow_flink_replay.core.yaml_input import load_yaml, read_text_file

        try:
            text = read_text_file(Path(path), f"spec {path}", "the path of a ReplaySpec YAML file", MAX_SPEC_BYTES)
            data = load_yaml(text, f"spec {path}")
        except ValueError as err:
            raise SpecError(str(err)) from None
        if not isinstance(data, dict):
            what = "empty" if data is None else f"a YAML {type(data).__name__}"
            raise SpecError(f"spec {path}: {what}, not a mapping of spec fields. Fix: name: ..., production: ...")
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise SpecError(_explain(err, str(path))) from None


def _explain(err: ValidationError, where: str) -> str:
    lines = [f"invalid replay spec ({where}):"]
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        lines.append(f"  - {loc}: {e['msg']}")
    return "\n".join(lines)

