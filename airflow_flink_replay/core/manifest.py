"""The replay manifest: the one record that makes a replay reproducible.

A :class:`ReplayManifest` links three things that must line up for a replay to mean anything:

- the **production side** — the Flink job, the savepoint it was stopped with (path, format, quiesce mode,
  timestamps, checkpoint id), the agent operator's identity (vertex id / uid / uid hash, parallelism,
  max parallelism) and production's plan vertex ids;
- the **capture** window (the replay's input) — the capture topic and, per partition, the exact offset
  range ``[start, end)`` with the record count and the first/last record timestamps, how keys and values
  are (de)serialised, the ordering guarantee, the event-time field and the watermark strategy;
- the **isolation** — memory namespaces and action-state topics per replay variant, filled in by later
  steps of the chain.

The manifest is sealed by a sha256 digest over its canonical JSON (sorted keys, no whitespace, the
``digest`` field left out), so any edit after writing — by hand or by accident — is detected on load.
A digest anyone can recompute proves nothing against someone who edits the file on purpose: with a key
(an Airflow connection's password on the Airflow side, a ``${env:…}`` / ``${file:…}`` reference resolved
inside Flink on the job side) the manifest also carries an HMAC-SHA256 ``signature`` over the same
canonical JSON, the ``isolation`` section included: the step that fills it in later verifies the signature
and signs again with the key. Manifests signed before the signature covered it (``hmac-sha256:<hex>``, without
``v2:``) still verify as they did, over everything but the isolation section, and say so
(:attr:`ReplayManifest.signature_covers_isolation`, their summary).

Pure: pydantic only (works with pydantic 2.11 on the Flink side and 2.14 on the Airflow side). Reading
and writing through URIs lives in :mod:`airflow_flink_replay.core.manifest_io`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from airflow_flink_replay.exceptions import ManifestError, ManifestTamperedError

#: The manifest format this code writes and reads.
SCHEMA_VERSION = 1

#: Serializers a replay source knows how to read.
SERIALIZERS = ("string", "json", "bytes", "avro")

_HEX32 = re.compile(r"^[0-9a-f]{32}\Z")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")
_SIGNATURE = re.compile(r"^hmac-sha256:(v2:)?[0-9a-f]{64}\Z")
#: The signature form that covers the isolation section; without it (written before issue 42), it does not.
_SIGNATURE_V2 = "hmac-sha256:v2:"

#: How to fix a field that is missing altogether (used when a required field is absent).
_MISSING_FIXES: dict[str, str] = {
    "production.savepoint": (
        "a manifest must link to the savepoint the replay restores from: run the quiesce step "
        "(QuiesceAndSavepointOperator) or pass the path of an existing savepoint"
    ),
    "production.savepoint.path": (
        "set the savepoint location (operation.location of the completed stop/savepoint request)"
    ),
    "production.agent": "give the agent operator's vertex id and max parallelism from production's plan",
    "production.job_id": "give production's Flink job id (GET /jobs/overview)",
    "capture": "describe the capture topic and the offset window per partition",
    "capture.topic": "name the capture topic the replay reads",
    "capture.partitions": "list the offset window of every partition of the capture topic",
    "run_id": "give the replay run id (the Airflow run id is a good choice)",
}


def _fail(problem: str, fix: str) -> ValueError:
    return ValueError(f"{problem}. Fix: {fix}")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------------------------- input
class SerializerSpec(_Model):
    """How the bytes of a record's key or value are read. ``avro`` needs its writer schema."""

    format: str = Field(description="one of string, json, bytes, avro")
    avro_schema: str | None = Field(default=None, description="Avro writer schema (JSON text) for avro")
    json_schema: dict[str, Any] | None = Field(
        default=None, description="optional JSON schema the decoded json value conforms to"
    )

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, data: Any) -> Any:
        return {"format": data} if isinstance(data, str) else data

    @field_validator("format")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in SERIALIZERS:
            raise _fail(f"unknown serializer {value!r}", f"use one of {', '.join(SERIALIZERS)}")
        return value

    @model_validator(mode="after")
    def _schema_fits(self) -> SerializerSpec:
        if self.format == "avro" and not self.avro_schema:
            raise _fail("serializer 'avro' without avro_schema", "add the Avro writer schema (JSON text)")
        if self.avro_schema is not None:
            if self.format != "avro":
                raise _fail(f"avro_schema given for serializer {self.format!r}", "drop it or use 'avro'")
            try:
                json.loads(self.avro_schema)
            except json.JSONDecodeError as err:
                raise _fail(f"avro_schema is not valid JSON ({err.msg})", "give the schema as JSON text") from err
        if self.json_schema is not None and self.format != "json":
            raise _fail(f"json_schema given for serializer {self.format!r}", "drop it or use 'json'")
        return self


class EventTime(_Model):
    """Where a record's event time comes from: the Kafka record timestamp or a JSONPath into the value."""

    source: Literal["kafka_timestamp", "field"] = "kafka_timestamp"
    field: str | None = Field(default=None, description="JSONPath into the value, e.g. $.event.ts_ms")
    unit: Literal["ms", "s", "iso8601"] = "ms"

    @model_validator(mode="after")
    def _field_fits(self) -> EventTime:
        if self.source == "field" and not self.field:
            raise _fail("event time source 'field' without a field", "give a JSONPath such as $.ts")
        if self.source == "kafka_timestamp" and self.field:
            raise _fail("a field was given for event time source 'kafka_timestamp'", "set source: field")
        if self.field is not None and not self.field.startswith("$"):
            raise _fail(f"event time field {self.field!r} is not a JSONPath", "start it with '$', e.g. $.ts")
        return self


class WatermarkSpec(_Model):
    """Bounded out-of-orderness watermarks, with an optional idleness timeout per partition."""

    max_out_of_orderness_ms: int = Field(default=0, ge=0)
    idleness_ms: int | None = Field(default=None, gt=0)

    def as_job_argument(self) -> str:
        """The replay job's ``watermark`` argument: ``monotonous`` (0 ms) or ``bounded:<ms>``."""
        if self.max_out_of_orderness_ms == 0:
            return "monotonous"
        return f"bounded:{self.max_out_of_orderness_ms}"


class PartitionWindow(_Model):
    """One partition's slice of the capture topic: offsets ``[start_offset, end_offset)``."""

    partition: int = Field(ge=0)
    start_offset: int = Field(ge=0, description="first offset of the window (inclusive)")
    end_offset: int = Field(ge=0, description="offset after the window's last record (exclusive)")
    record_count: int = Field(ge=0, description="records actually present in the range, counted by reading")
    first_timestamp_ms: int | None = Field(default=None, description="Kafka timestamp of the first record")
    last_timestamp_ms: int | None = Field(default=None, description="Kafka timestamp of the last record")

    @model_validator(mode="after")
    def _consistent(self) -> PartitionWindow:
        if self.start_offset > self.end_offset:
            raise _fail(
                f"partition {self.partition}: start_offset {self.start_offset} is after end_offset {self.end_offset}",
                "the window must end at or after its start; read the end offsets after the start offsets",
            )
        span = self.end_offset - self.start_offset
        if self.record_count > span:
            raise _fail(
                f"partition {self.partition}: record_count {self.record_count} exceeds the offset range "
                f"[{self.start_offset}, {self.end_offset}) of {span}",
                "count the records by reading the range again",
            )
        if self.record_count and (self.first_timestamp_ms is None or self.last_timestamp_ms is None):
            raise _fail(
                f"partition {self.partition}: {self.record_count} records but no first/last timestamp",
                "read the first and last record of the range and record their timestamps",
            )
        if not self.record_count and (self.first_timestamp_ms is not None or self.last_timestamp_ms is not None):
            raise _fail(f"partition {self.partition}: timestamps given for an empty range", "drop them")
        return self


class ProductionOutputs(_Model):
    """Where production's own outputs for the window start: its output topic's end offsets at the savepoint
    (read with the capture's start offsets). Production processes the window's records after it resumes,
    so their outputs come after these offsets (the fidelity figure reads them)."""

    topic: str = Field(min_length=1)
    start_offsets: dict[int, int]


class CassetteLink(_Model):
    """Production's cassette for the window: its cassette topic's end offsets at the savepoint (read with the
    capture's start offsets). The mediated calls production makes for the window's records come after them;
    a replay reads from there to the topic's end when it is submitted (:mod:`airflow_flink_replay.core.cassette`)."""

    topic: str = Field(min_length=1)
    start_offsets: dict[int, int]


class CaptureInput(_Model):
    """The replay's input: a window of the capture topic and how to read it."""

    kafka_conn_id: str = Field(description="Airflow connection id of the Kafka cluster (never credentials)")
    bootstrap_servers: str | None = Field(
        default=None, description="host:port list for the Flink job (no credentials: those stay in the connection)"
    )
    topic: str = Field(min_length=1)
    partitions: list[PartitionWindow] = Field(min_length=1)
    key_serializer: SerializerSpec = SerializerSpec(format="string")
    value_serializer: SerializerSpec = SerializerSpec(format="json")
    ordering: Literal["per_partition"] = Field(
        default="per_partition",
        description="records of one key stay in order because a key maps to one partition and each "
        "partition is replayed in offset order; there is no order across partitions",
    )
    event_time: EventTime = EventTime()
    watermark: WatermarkSpec = WatermarkSpec()
    production_outputs: ProductionOutputs | None = Field(
        default=None, description="production's output topic and its offsets at the savepoint (fidelity)"
    )
    cassette: CassetteLink | None = Field(
        default=None, description="production's cassette topic and its offsets at the savepoint (recorded calls)"
    )

    @field_validator("bootstrap_servers")
    @classmethod
    def _no_secrets(cls, value: str | None) -> str | None:
        if value and ("@" in value or "://" in value):
            raise _fail(
                "bootstrap_servers looks like it carries a scheme or credentials",
                "give plain host:port pairs; credentials belong in the Airflow connection",
            )
        return value

    @field_validator("partitions")
    @classmethod
    def _unique_sorted(cls, value: list[PartitionWindow]) -> list[PartitionWindow]:
        seen: set[int] = set()
        for window in value:
            if window.partition in seen:
                raise _fail(
                    f"duplicate partition {window.partition}",
                    "list each partition of the capture topic once",
                )
            seen.add(window.partition)
        return sorted(value, key=lambda w: w.partition)

    @property
    def record_count(self) -> int:
        """Records in the whole window (sum over partitions)."""
        return sum(w.record_count for w in self.partitions)

    def start_offsets(self) -> dict[int, int]:
        """``{partition: start_offset}``."""
        return {w.partition: w.start_offset for w in self.partitions}

    def end_offsets(self) -> dict[int, int]:
        """``{partition: end_offset}`` (exclusive)."""
        return {w.partition: w.end_offset for w in self.partitions}

    def replay_window(self) -> dict[str, Any]:
        """``capture_topic`` / ``start_offsets`` / ``end_offsets``: the keyword arguments a ReplayJobSpec takes."""
        return {"capture_topic": self.topic, "start_offsets": self.start_offsets(), "end_offsets": self.end_offsets()}


# -------------------------------------------------------------------------------------- production
class SavepointInfo(_Model):
    """The savepoint production was stopped (or snapshotted) with."""

    path: str = Field(description="savepoint location, e.g. file:///…/savepoint-abc")
    format: Literal["CANONICAL", "NATIVE"] = "CANONICAL"
    quiesce_mode: Literal["drain", "stop", "savepoint", "existing"]
    triggered_at: datetime | None = None
    completed_at: datetime | None = None
    checkpoint_id: int | None = Field(default=None, ge=0)
    racing_records: int | None = Field(
        default=None,
        ge=0,
        description="savepoint mode: capture records written between the savepoint's trigger and completion; "
        "they may be in the savepoint's state and are not replayed",
    )

    @field_validator("path")
    @classmethod
    def _present(cls, value: str) -> str:
        if not value.strip():
            raise _fail("missing savepoint: the path is empty", _MISSING_FIXES["production.savepoint"])
        return value

    @model_validator(mode="after")
    def _ordered(self) -> SavepointInfo:
        if self.triggered_at and self.completed_at and self.completed_at < self.triggered_at:
            raise _fail("completed_at is before triggered_at", "record the times from the same clock (UTC)")
        return self


class AgentVertex(_Model):
    """The Flink Agents operator's identity in production (what the replay must map its state to)."""

    vertex_id: str = Field(description="32 hex chars: production's operator id of the agent operator")
    name: str = "action-execute-operator"
    uid: str | None = Field(default=None, description="the pinned uid, if production set one")
    uid_hash: str | None = Field(default=None, description="the pinned uid hash, if production set one")
    parallelism: int = Field(ge=1)
    max_parallelism: int = Field(ge=1)

    @field_validator("vertex_id", "uid_hash")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        if value is not None and not _HEX32.match(value):
            raise _fail(f"{value!r} is not a Flink operator id", "use the 32 lower-case hex chars from the plan")
        return value

    @model_validator(mode="after")
    def _bounds(self) -> AgentVertex:
        if self.parallelism > self.max_parallelism:
            raise _fail(
                f"parallelism {self.parallelism} exceeds max_parallelism {self.max_parallelism}",
                "copy both from production's job details (GET /jobs/{id})",
            )
        return self


class PlanVertexInfo(_Model):
    """One vertex of production's plan at the savepoint: what the identity preflight of a later replay of
    this savepoint (``quiesce_mode=existing``) compares the replay job's plan with."""

    id: str
    name: str
    parallelism: int = Field(default=1, ge=1)
    max_parallelism: int | None = Field(default=None, ge=1)


class ProductionSide(_Model):
    """The production job at the moment of the savepoint."""

    job_id: str
    job_name: str
    flink_version: str | None = None
    savepoint: SavepointInfo
    agent: AgentVertex
    plan_vertex_ids: list[str] = Field(default_factory=list, description="all vertex ids of production's plan")
    plan_vertices: list[PlanVertexInfo] = Field(
        default_factory=list, description="production's plan (ids, names, parallelism) at the savepoint"
    )

    def production_plan(self) -> dict[str, Any]:
        """Production's plan in the quiesce step's ``ProductionPlan`` shape.

        A manifest sealed before ``plan_vertices`` existed yields the agent vertex alone: enough to pin the
        replay's agent to production's operator id and max parallelism (the rest of the plan is unknown).
        """
        vertices = [v.model_dump(mode="json") for v in self.plan_vertices] or [
            {
                "id": self.agent.vertex_id,
                "name": self.agent.name,
                "parallelism": self.agent.parallelism,
                "max_parallelism": self.agent.max_parallelism,
            }
        ]
        return {"job_id": self.job_id, "job_name": self.job_name, "vertices": vertices,
                "agent_vertex_id": self.agent.vertex_id}

    @field_validator("job_id")
    @classmethod
    def _job_id(cls, value: str) -> str:
        if not _HEX32.match(value):
            raise _fail(f"{value!r} is not a Flink job id", "use the 32 hex chars from GET /jobs/overview")
        return value

    @model_validator(mode="after")
    def _agent_in_plan(self) -> ProductionSide:
        if self.plan_vertex_ids and self.agent.vertex_id not in self.plan_vertex_ids:
            raise _fail(
                f"agent vertex {self.agent.vertex_id} is not among production's plan_vertex_ids",
                "take both from the same plan (GET /jobs/{id}/plan)",
            )
        return self


def production_from_quiesce_result(
    result: dict[str, Any],
    *,
    flink_version: str | None = None,
    agent_uid: str | None = None,
    agent_uid_hash: str | None = None,
    checkpoint_id: int | None = None,
) -> ProductionSide:
    """Build the production side from the quiesce step's XCom (``QuiesceResult`` as JSON).

    Duck-typed on the keys ``job_id``, ``job_name``, ``mode``, ``savepoint_path``, ``format_type``,
    ``requested_at``, ``savepoint_completed_at`` and ``plan`` (``vertices`` with ``id``/``name``/
    ``parallelism``/``max_parallelism`` and ``agent_vertex_id``). A dict already shaped like
    :class:`ProductionSide` (with a ``savepoint`` object) is validated as it is.
    """
    if isinstance(result.get("savepoint"), dict):
        return ProductionSide.model_validate(result)
    problems = []
    if not result.get("savepoint_path"):
        problems.append(f"production.savepoint: missing. Fix: {_MISSING_FIXES['production.savepoint']}")
    plan = result.get("plan") or {}
    vertices = plan.get("vertices") or []
    agent_id = plan.get("agent_vertex_id")
    agent = next((v for v in vertices if v.get("id") == agent_id), None)
    if agent is None:
        problems.append(
            "production.agent: the quiesce result's plan has no agent vertex ('action-execute-operator'). "
            "Fix: quiesce the Flink Agents job, not another job"
        )
    max_par = (agent or {}).get("max_parallelism") or plan.get("max_parallelism")
    if agent is not None and not max_par:
        problems.append(
            "production.agent.max_parallelism: unknown — the quiesce result's plan has no maxParallelism for the "
            "agent vertex. Fix: record the plan from the job details (GET /jobs/{id}), which list it per vertex"
        )
    if problems:
        raise ManifestError(problems)
    assert agent is not None and agent_id is not None and max_par is not None
    try:
        return ProductionSide(
            job_id=result["job_id"],
            job_name=result.get("job_name", ""),
            flink_version=flink_version,
            savepoint=SavepointInfo(
                path=result["savepoint_path"],
                format=result.get("format_type", "CANONICAL"),
                quiesce_mode=result.get("mode", "stop"),
                triggered_at=result.get("requested_at"),
                completed_at=result.get("savepoint_completed_at"),
                checkpoint_id=checkpoint_id,
            ),
            agent=AgentVertex(
                vertex_id=agent_id,
                uid=agent_uid,
                uid_hash=agent_uid_hash,
                parallelism=agent.get("parallelism", 1),
                max_parallelism=max_par,
            ),
            plan_vertex_ids=[v["id"] for v in vertices],
            plan_vertices=[
                PlanVertexInfo(
                    id=v["id"],
                    name=v.get("name", ""),
                    parallelism=v.get("parallelism") or 1,
                    max_parallelism=v.get("max_parallelism"),
                )
                for v in vertices
            ],
        )
    except ValidationError as err:
        raise ManifestError([f"production.{line}" for line in friendly_errors(err)]) from None


# --------------------------------------------------------------------------------------- isolation
class Isolation(_Model):
    """Where each replay variant keeps its own state, so nothing touches production's."""

    production_memory_namespace: str | None = None
    memory_namespaces: dict[str, str] = Field(default_factory=dict, description="variant -> Mem0 namespace")
    production_action_state_topic: str | None = None
    action_state_topics: dict[str, str] = Field(default_factory=dict, description="variant -> topic")

    @model_validator(mode="after")
    def _not_production(self) -> Isolation:
        for variant, topic in self.action_state_topics.items():
            if self.production_action_state_topic and topic == self.production_action_state_topic:
                raise _fail(
                    f"variant {variant!r} would use production's action-state topic {topic!r}",
                    "give every variant a fresh topic (IsolateActionStateOperator)",
                )
        for variant, ns in self.memory_namespaces.items():
            if self.production_memory_namespace and ns == self.production_memory_namespace:
                raise _fail(
                    f"variant {variant!r} would use production's memory namespace {ns!r}",
                    "fork production's memory into a replay namespace first",
                )
        topics = list(self.action_state_topics.values())
        if len(set(topics)) != len(topics):
            raise _fail("two variants share one action-state topic", "give each variant its own topic")
        return self


# -------------------------------------------------------------------------------------- manifest
def _drop_empty(body: dict[str, Any], key: str) -> None:
    if body.get(key) in (None, [], {}):
        body.pop(key, None)


class ReplayManifest(_Model):
    """Everything a replay needs to be reproducible, sealed by a sha256 digest of its canonical JSON."""

    schema_version: int = SCHEMA_VERSION
    run_id: str = Field(min_length=1)
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    production: ProductionSide
    capture: CaptureInput
    isolation: Isolation = Isolation()
    reused_from: str | None = Field(
        default=None,
        description="quiesce_mode=existing: '<run id> <digest>' of the earlier manifest whose savepoint and "
        "window this run replays again",
    )
    digest: str | None = Field(default=None, description="sha256:<hex> of the canonical JSON without this field")
    signature: str | None = Field(
        default=None,
        description="hmac-sha256:v2:<hex> keyed signature of the canonical JSON without digest and signature "
        "(hmac-sha256:<hex>, written before v2: without the isolation section either; None: unsigned)",
    )

    @field_validator("schema_version")
    @classmethod
    def _version(cls, value: int) -> int:
        if value != SCHEMA_VERSION:
            raise _fail(
                f"schema_version {value} is not supported (this code reads {SCHEMA_VERSION})",
                "use the airflow-flink-replay version that wrote the manifest, or re-create it",
            )
        return value

    @field_validator("digest")
    @classmethod
    def _digest_form(cls, value: str | None) -> str | None:
        if value is not None and not _DIGEST.match(value):
            raise _fail(f"digest {value!r} is not of the form sha256:<64 hex>", "re-create the manifest")
        return value

    @field_validator("signature")
    @classmethod
    def _signature_form(cls, value: str | None) -> str | None:
        if value is not None and not _SIGNATURE.match(value):
            raise _fail("signature is not of the form hmac-sha256:v2:<64 hex>", "re-create the manifest")
        return value

    # -- construction / parsing ------------------------------------------------------------------
    @classmethod
    def parse(cls, data: dict[str, Any] | str | bytes, *, verify: bool = True) -> ReplayManifest:
        """Build a manifest from a dict or JSON text; raise :class:`ManifestError` with friendly lines.

        With ``verify`` the digest must be present and match the content (else
        :class:`ManifestTamperedError`).
        """
        if isinstance(data, str | bytes):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as err:
                raise ManifestError([f"(file): not JSON ({err}). Fix: restore the manifest file"]) from err
        try:
            manifest = cls.model_validate(data)
        except ValidationError as err:
            raise ManifestError(friendly_errors(err)) from None
        if verify:
            manifest.verify()
        return manifest

    def for_reuse(self, run_id: str) -> ReplayManifest:
        """This manifest's savepoint and window for a new run (``quiesce_mode=existing``), unsealed.

        The new manifest keeps production's side (savepoint, agent, plan) and the capture window, starts
        with empty isolation (the new run forks and isolates afresh) and names the manifest it came from.
        """
        self.verify()
        savepoint = self.production.savepoint.model_copy(update={"quiesce_mode": "existing"})
        return self.model_copy(
            update={
                "run_id": run_id,
                "created_at": datetime.now(UTC),
                "production": self.production.model_copy(update={"savepoint": savepoint}),
                "isolation": Isolation(),
                "reused_from": f"{self.run_id} {self.digest}",
                "digest": None,
                "signature": None,
            }
        )

    # -- canonical form and digest ---------------------------------------------------------------
    def canonical_json(self) -> bytes:
        """The canonical JSON bytes the digest covers: sorted keys, compact, UTF-8, no ``digest``/``signature``."""
        return _canonical(self._body())

    def _body(self) -> dict[str, Any]:
        body = self.model_dump(mode="json", exclude={"digest", "signature"})
        # Fields added after schema 1 was first written are left out while empty, so manifests sealed
        # before they existed still verify (their digest never covered them).
        _drop_empty(body, "reused_from")
        _drop_empty(body["production"], "plan_vertices")
        _drop_empty(body["production"]["savepoint"], "racing_records")
        _drop_empty(body["capture"], "production_outputs")
        _drop_empty(body["capture"], "cassette")
        return body

    @property
    def signature_covers_isolation(self) -> bool:
        """False for a signature written before it covered the isolation section (or no signature at all)."""
        return bool(self.signature and self.signature.startswith(_SIGNATURE_V2))

    def legacy_signed_content(self) -> bytes:
        """What a signature written before ``v2`` covers: :meth:`canonical_json` without the ``isolation``
        section (then filled in by tasks that held no key). Only used to verify such signatures."""
        body = self._body()
        body.pop("isolation", None)
        return _canonical(body)

    def compute_digest(self) -> str:
        """``sha256:<hex>`` of :meth:`canonical_json`."""
        return "sha256:" + hashlib.sha256(self.canonical_json()).hexdigest()

    def sealed(self) -> ReplayManifest:
        """A copy carrying the digest of its current content."""
        return self.model_copy(update={"digest": self.compute_digest()})

    def compute_signature(self, key: str | bytes, *, legacy: bool = False) -> str:
        """``hmac-sha256:v2:<hex>`` of :meth:`canonical_json` (everything but digest and signature) under
        ``key``; with ``legacy``, the pre-v2 form over :meth:`legacy_signed_content` (to verify old manifests)."""
        raw = key.encode("utf-8") if isinstance(key, str) else key
        if not raw:
            raise ManifestError(
                ["signature: the signing key is empty. Fix: give the signing connection a password (the key)"]
            )
        if legacy:
            return "hmac-sha256:" + hmac.new(raw, self.legacy_signed_content(), hashlib.sha256).hexdigest()
        return _SIGNATURE_V2 + hmac.new(raw, self.canonical_json(), hashlib.sha256).hexdigest()

    def signed(self, key: str | bytes) -> ReplayManifest:
        """A sealed copy carrying the digest and the keyed signature of its current content."""
        return self.model_copy(update={"signature": self.compute_signature(key)}).sealed()

    def verify_signature(self, key: str | bytes) -> None:
        """Verify the digest, then the signature under ``key`` (a missing signature is refused too: with a
        key configured, stripping the signature must not be a way around it).

        :raises ManifestTamperedError: digest mismatch, no signature, or a signature that does not match.
        """
        self.verify()
        if self.signature is None:
            raise ManifestTamperedError(
                [
                    "signature: missing, but a signing key is configured — the manifest was written without the "
                    "key or its signature was removed. Fix: re-create it with the signing key configured "
                    "(manifest_signing_conn_id), or run without the key to accept unsigned manifests"
                ],
                title="unsigned replay manifest",
            )
        expected = self.compute_signature(key, legacy=not self.signature_covers_isolation)
        if not hmac.compare_digest(expected, self.signature):
            raise ManifestTamperedError(
                [
                    "signature: mismatch — the content (digest recomputed or not) is not what the key signed: the "
                    "manifest was changed after it was written, or signed with another key. Fix: re-create it "
                    "from the capture window (CreateReplayManifestOperator) and check that both sides use the "
                    "same key"
                ],
                title="replay manifest signature mismatch (tampered)",
            )

    def verify(self) -> None:
        """Raise :class:`ManifestTamperedError` unless the stored digest matches the content."""
        if self.digest is None:
            raise ManifestTamperedError(
                [
                    "digest: missing. Fix: write manifests with save_manifest()/CreateReplayManifestOperator, "
                    "which seal them"
                ],
                title="unsealed replay manifest",
            )
        actual = self.compute_digest()
        if actual != self.digest:
            raise ManifestTamperedError(
                [
                    f"digest: mismatch — the file says {self.digest} but its content hashes to {actual}: the "
                    "manifest was changed after it was written (tampered or edited by hand). Fix: re-create "
                    "it from the capture window (CreateReplayManifestOperator); never edit it by hand"
                ],
                title="replay manifest digest mismatch (tampered)",
            )

    def with_isolation(self, **changes: Any) -> ReplayManifest:
        """A re-sealed copy with the isolation section updated (later steps of the chain fill it in).

        A signature that covers the isolation section no longer matches and is dropped: sign the copy again
        (:meth:`signed`). One written before it covered the section stays, as valid as it was.
        """
        merged = {**self.isolation.model_dump(), **changes}
        try:
            isolation = Isolation.model_validate(merged)
        except ValidationError as err:
            raise ManifestError([f"isolation.{line}" for line in friendly_errors(err)]) from None
        signature = None if self.signature_covers_isolation else self.signature
        return self.model_copy(update={"isolation": isolation, "signature": signature}).sealed()

    def to_json(self, *, indent: int | None = 2) -> str:
        """JSON text (sealed manifests keep their digest)."""
        return self.model_dump_json(indent=indent)

    # -- human summary -----------------------------------------------------------------------------
    def summary(self) -> str:
        """A few lines a person reads before trusting a replay."""
        p, i, sp = self.production, self.capture, self.production.savepoint
        lines = [
            f"replay manifest v{self.schema_version}  run {self.run_id}  created {self.created_at.isoformat()}",
            f"digest      {self.digest or '(unsealed)'}" + _signature_note(self),
            f"production  job {p.job_name} ({p.job_id})  Flink {p.flink_version or '?'}",
            f"savepoint   {sp.path}  [{sp.format}, quiesce={sp.quiesce_mode}"
            + (f", checkpoint {sp.checkpoint_id}" if sp.checkpoint_id is not None else "")
            + (f", completed {sp.completed_at.isoformat()}" if sp.completed_at else "")
            + "]",
            f"agent       vertex {p.agent.vertex_id}"
            + (f" uid {p.agent.uid!r}" if p.agent.uid else "")
            + (f" uid-hash {p.agent.uid_hash}" if p.agent.uid_hash else "")
            + f"  parallelism {p.agent.parallelism}/{p.agent.max_parallelism} (max)",
            f"capture     topic {i.topic} via connection {i.kafka_conn_id!r}: {i.record_count} records in "
            f"{len(i.partitions)} partition(s); key={i.key_serializer.format} value={i.value_serializer.format}",
            f"event time  {i.event_time.source}{' ' + i.event_time.field if i.event_time.field else ''}; "
            f"watermark out-of-orderness {i.watermark.max_out_of_orderness_ms} ms"
            + (f", idleness {i.watermark.idleness_ms} ms" if i.watermark.idleness_ms else ""),
        ]
        for w in i.partitions:
            ts = ""
            if w.record_count:
                ts = f"  ts {_iso_ms(w.first_timestamp_ms)} .. {_iso_ms(w.last_timestamp_ms)}"
            lines.append(
                f"  p{w.partition:<3} offsets [{w.start_offset}, {w.end_offset})  {w.record_count} records{ts}"
            )
        iso = self.isolation
        if iso.action_state_topics or iso.memory_namespaces:
            for variant in sorted(set(iso.action_state_topics) | set(iso.memory_namespaces)):
                lines.append(
                    f"variant     {variant}: action state {iso.action_state_topics.get(variant, '-')}, "
                    f"memory {iso.memory_namespaces.get(variant, '-')}"
                )
        else:
            lines.append("isolation   (not filled in yet)")
        return "\n".join(lines)


def _signature_note(manifest: ReplayManifest) -> str:
    if not manifest.signature:
        return ""
    if manifest.signature_covers_isolation:
        return "  (signed)"
    return "  (signed before v2: isolation not covered by the signature)"


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _iso_ms(ms: int | None) -> str:
    if ms is None:
        return "?"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def friendly_errors(err: ValidationError) -> list[str]:
    """Turn pydantic errors into ``field.path: problem. Fix: ...`` lines."""
    lines = []
    for e in err.errors(include_url=False):
        loc = ".".join(str(part) for part in e["loc"])
        kind = e["type"]
        if kind == "missing":
            fix = _MISSING_FIXES.get(loc, "add it")
            lines.append(f"{loc}: missing. Fix: {fix}")
        elif kind == "extra_forbidden":
            lines.append(f"{loc}: unknown field. Fix: remove it or check its spelling")
        elif kind == "value_error":
            msg = str(e["msg"]).removeprefix("Value error, ")
            lines.append(f"{loc or '(manifest)'}: {msg}")
        else:
            lines.append(f"{loc}: {e['msg']} (got {e.get('input')!r}). Fix: correct the value")
    return lines


__all__ = [
    "SCHEMA_VERSION",
    "SERIALIZERS",
    "AgentVertex",
    "CaptureInput",
    "EventTime",
    "Isolation",
    "ManifestError",
    "ManifestTamperedError",
    "PartitionWindow",
    "ProductionOutputs",
    "ProductionSide",
    "ReplayManifest",
    "SavepointInfo",
    "SerializerSpec",
    "WatermarkSpec",
    "friendly_errors",
    "production_from_quiesce_result",
]
