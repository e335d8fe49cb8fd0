"""Step 5 of the replay chain: record the start offsets, then write the manifest for the capture window.

- :class:`RecordStartOffsetsOperator` runs right after the quiesce step (production FINISHED by
  stop-with-savepoint): the capture topic's end offsets at that moment are the replay start offsets.
- :class:`CreateReplayManifestOperator` runs after :class:`~airflow_flink_replay.sensors.capture_window.
  CaptureWindowSensor`: it reads the window (per-partition counts, first/last timestamps — by consuming),
  links it to the savepoint and writes the sealed manifest to a URI. XCom: ``{"uri", "digest",
  "record_count", "partitions"}``.
- :class:`ReuseManifestOperator` (``quiesce_mode=existing``) re-issues an earlier run's manifest, loaded only
  from the allowed places (``manifest_sources``).

With ``signing_conn_id`` both sign what they write (HMAC-SHA256 keyed by that Airflow connection's
password) and the reuse refuses an earlier manifest whose signature is missing or does not match. The key
is read from the connection when the task runs; it is never logged, pushed to XCom or put in a spec.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any, NamedTuple, TypeVar

from airflow.sdk import BaseOperator
from airflow.sdk.bases.hook import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_flink_replay.core.manifest import (
    CaptureInput,
    CassetteLink,
    EventTime,
    PartitionWindow,
    ProductionOutputs,
    ReplayManifest,
    SerializerSpec,
    WatermarkSpec,
    production_from_quiesce_result,
)
from airflow_flink_replay.core.manifest_io import (
    checked_manifest_source,
    load_manifest,
    normalized_location,
    save_manifest,
    savepoint_problems,
)
from airflow_flink_replay.exceptions import ManifestError
from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook, Record
from airflow_flink_replay.lifecycle.start_offsets import read_start_offsets
from airflow_flink_replay.run_io import run_storage


def signing_key(conn_id: str | None) -> str | None:
    """The manifest signing key: the password of Airflow connection ``conn_id`` (None without a conn id).

    :raises AirflowException: the connection has no password (naming the connection, never a value).
    """
    if not conn_id:
        return None
    key = BaseHook.get_connection(conn_id).password
    if not key:
        raise AirflowException(
            f"manifest signing connection {conn_id!r} has no password: the password is the HMAC key manifests are "
            "signed with. Fix: set it (airflow connections add ... --conn-password), the same value the replay "
            "job reads through manifest_key_ref"
        )
    return key


def record_checker(key: SerializerSpec, value: SerializerSpec, event_time: EventTime) -> Callable[[Record], str | None]:
    """A per-record check that the window's records read as the manifest declares (None = fine)."""
    finder = None
    if event_time.source == "field" and event_time.field:
        from jsonpath_ng import parse as jsonpath

        finder = jsonpath(event_time.field)

    def check(rec: Record) -> str | None:
        if key.format in ("string", "json") and rec.key is not None:
            try:
                rec.key.decode("utf-8")
            except UnicodeDecodeError:
                return f"key is not UTF-8 text (key_serializer {key.format!r}; use 'bytes')"
        if value.format in ("string", "json"):
            if rec.value is None:
                return "empty value (a tombstone) in the capture window"
            try:
                text = rec.value.decode("utf-8")
            except UnicodeDecodeError:
                return f"value is not UTF-8 text (value_serializer {value.format!r}; use 'bytes' or 'avro')"
            if value.format == "json" or finder is not None:
                try:
                    doc = json.loads(text)
                except json.JSONDecodeError as err:
                    return f"value is not JSON ({err.msg}); declare value_serializer 'string' or 'bytes'"
                if finder is not None and not finder.find(doc):
                    return f"event time field {event_time.field} not found in the value"
        return None

    return check


class RecordStartOffsetsOperator(BaseOperator):
    """Record the capture topic's end offsets right after the quiesce step's savepoint.

    XCom: :class:`~airflow_flink_replay.core.capture_window.StartOffsets` as JSON (``topic``, ``offsets``,
    ``read_at``, ``job_id``, ``savepoint_path``, ``quiesce_mode``, ``offsets_before``, ``racing_records``).
    Without ``quiesce_result`` it just reads the end offsets (the "before" read of ``savepoint`` mode); after a
    ``StopWindowOperator`` it returns the offsets that task read while production was stopped.

    :param topic: the capture topic (templated).
    :param quiesce_result: the quiesce step's XCom (templated).
    :param offsets_before: the capture topic's end offsets read before the savepoint was triggered
        (templated: an earlier run of this operator's XCom, or its ``offsets``). Required after a ``savepoint``-mode
        quiesce, where production kept writing: the records between the two reads raced the barrier.
    :param kafka_config_id: the Kafka connection.
    :param output_topic: production's output topic, read with the capture topic (the fidelity figure's start).
    :param cassette_topic: production's cassette topic, read with the capture topic (the replays' cassette start).
    """

    template_fields: Sequence[str] = ("topic", "quiesce_result", "offsets_before")

    def __init__(
        self,
        *,
        topic: str,
        quiesce_result: Mapping[str, Any] | None = None,
        offsets_before: Mapping[str | int, int] | None = None,
        kafka_config_id: str = "kafka_default",
        output_topic: str | None = None,
        cassette_topic: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.cassette_topic = cassette_topic
        self.topic = topic
        self.quiesce_result = quiesce_result
        self.offsets_before = offsets_before
        self.kafka_config_id = kafka_config_id
        self.output_topic = output_topic

    @cached_property
    def hook(self) -> KafkaOffsetsHook:
        """The Kafka offsets/admin hook (closing it only drops its reading consumer)."""
        return KafkaOffsetsHook(kafka_config_id=self.kafka_config_id)

    def execute(self, context: Any) -> dict[str, Any]:
        """Read and return the start offsets (or those the stop window read while production was stopped)."""
        in_window = ((self.quiesce_result or {}).get("window") or {}).get("start_offsets")
        if in_window:
            self.log.info("replay start offsets of %s (read inside the stop window): %s",
                          self.topic, in_window["offsets"])
            return dict(in_window)
        hook = self.hook
        try:
            start = read_start_offsets(hook, self.topic, self.quiesce_result, self.offsets_before, self.output_topic,
                                       self.cassette_topic)
        except ValueError as err:
            raise AirflowException(str(err)) from err
        finally:
            hook.close()
        self.log.info("replay start offsets of %s: %s", start.topic, start.offsets)
        if start.racing_records:
            self.log.warning(
                "%d capture records raced the savepoint (production kept running): the replay starts after them",
                start.racing_records,
            )
        return start.model_dump(mode="json")


_Linked = TypeVar("_Linked", ProductionOutputs, CassetteLink)


def _linked_topic(start_offsets: Any, name: str, cls: type[_Linked]) -> _Linked | None:
    """A production topic read with the start offsets (``output`` or ``cassette``) and its offsets at the
    savepoint, from the start-offsets XCom (None when it was not read)."""
    if not isinstance(start_offsets, Mapping) or not start_offsets.get(f"{name}_topic"):
        return None
    if start_offsets.get(f"{name}_offsets") is None:
        return None
    offsets = {int(p): int(o) for p, o in start_offsets[f"{name}_offsets"].items()}
    return cls(topic=str(start_offsets[f"{name}_topic"]), start_offsets=offsets)


class CaptureFormat(NamedTuple):
    """How the capture topic's records read, recorded in the manifest's capture section (the replay jobs read them
    from there). The replay DAG passes the spec's ``production.event_time`` and ``production.watermark``.

    :param key_serializer: ``string``/``json``/``bytes``/``avro`` or a SerializerSpec dict.
    :param value_serializer: as ``key_serializer``.
    :param event_time: ``{"source": "kafka_timestamp"}`` (None: that) or ``{"source": "field", "field": "$.ts"}``.
    :param watermark: ``{"max_out_of_orderness_ms": …, "idleness_ms": …}``.
    """

    key_serializer: str | Mapping[str, Any] = "string"
    value_serializer: str | Mapping[str, Any] = "json"
    event_time: Mapping[str, Any] | None = None
    watermark: Mapping[str, Any] | None = None


class ProductionFacts(NamedTuple):
    """What the manifest records of production that the quiesce result does not say; ``flink_version`` and
    ``checkpoint_id`` templated (a NamedTuple: Airflow renders a tuple's members into a new tuple of the same class,
    where it would set an object's attributes in place).

    :param flink_version: production's Flink version.
    :param agent_uid: the uid production's agent carries, if pinned.
    :param checkpoint_id: the savepoint's checkpoint id, if known.
    """

    flink_version: str | None = None
    agent_uid: str | None = None
    checkpoint_id: int | str | None = None


class WindowScan(NamedTuple):
    """How the window is read and checked; ``expected_records`` templated (a NamedTuple, as :class:`ProductionFacts`).

    :param expected_records: fail unless the window holds exactly this many records.
    :param timeout: seconds to read the window.
    :param check_records: check while reading that every record decodes with the declared serializers and
        carries the event-time field (first problems are reported with partition@offset).
    """

    expected_records: int | str | None = None
    timeout: float = 120.0
    check_records: bool = True


class CreateReplayManifestOperator(BaseOperator):
    """Write the replay manifest for a complete capture window, linked to production's savepoint.

    :param manifest_uri: where to write (templated): ``file://…``, ``s3://…`` (fsspec) or a path.
    :param window: the capture window (templated; ``CaptureWindowSensor``'s XCom).
    :param production: the quiesce step's XCom (``QuiesceResult`` JSON) or a ``ProductionSide`` dict (templated).
    :param start_offsets: the start-offsets step's XCom (templated); its ``racing_records`` (savepoint mode)
        goes into the manifest's savepoint section.
    :param kafka_config_id: the Kafka connection (its id goes into the manifest; never its secrets).
    :param capture_format: how the capture topic's records read (:class:`CaptureFormat`: serializers, event time,
        watermark).
    :param production_facts: what the manifest records of production besides the quiesce result
        (:class:`ProductionFacts`, templated: Flink version, agent uid, checkpoint id).
    :param scan: how the window is read and checked (:class:`WindowScan`, templated: the expected record count,
        the timeout, the record check).
    :param run_id: the replay run id (templated; default: the Airflow run id).
    :param signing_conn_id: Airflow connection whose password is the HMAC key: the manifest is also signed
        (None: sealed by its digest only).
    """

    template_fields: Sequence[str] = (
        "manifest_uri", "window", "production", "start_offsets", "production_facts", "scan", "run_id",
    )  # fmt: skip

    def __init__(
        self,
        *,
        manifest_uri: str,
        window: Mapping[str, Any] | str,
        production: Mapping[str, Any] | str,
        start_offsets: Mapping[str, Any] | None = None,
        kafka_config_id: str = "kafka_default",
        capture_format: CaptureFormat | None = None,
        production_facts: ProductionFacts | None = None,
        scan: WindowScan | None = None,
        run_id: str | None = None,
        signing_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.manifest_uri = manifest_uri
        self.window = window
        self.production = production
        self.start_offsets = start_offsets
        self.kafka_config_id = kafka_config_id
        self.capture_format = capture_format or CaptureFormat()
        self.production_facts = production_facts or ProductionFacts()
        self.scan = scan or WindowScan()
        self.run_id = run_id
        self.signing_conn_id = signing_conn_id

    def build_manifest(self, hook: KafkaOffsetsHook, run_id: str) -> ReplayManifest:
        """Read the window and assemble the (unsealed) manifest."""
        window = dict(self.window)  # type: ignore[arg-type]
        topic = window["topic"]
        start = {int(p): int(o) for p, o in window["start_offsets"].items()}
        end = {int(p): int(o) for p, o in window["end_offsets"].items()}
        fmt, facts = self.capture_format, self.production_facts
        key_ser = SerializerSpec.model_validate(fmt.key_serializer)
        value_ser = SerializerSpec.model_validate(fmt.value_serializer)
        event_time = EventTime.model_validate(fmt.event_time or {})
        check = record_checker(key_ser, value_ser, event_time) if self.scan.check_records else None
        try:
            scans = hook.scan(topic, start, end, timeout=float(self.scan.timeout), check=check)
        except ValueError as err:
            raise ManifestError(
                [
                    f"capture: the window's records do not read as declared: {err}. Fix: declare the serializers / "
                    "event time the capture topic really holds"
                ]
            ) from err
        production = production_from_quiesce_result(
            dict(self.production),  # type: ignore[arg-type]
            flink_version=facts.flink_version or None,
            agent_uid=facts.agent_uid,
            checkpoint_id=int(facts.checkpoint_id) if facts.checkpoint_id not in (None, "", "None") else None,
        )
        capture = CaptureInput(
            kafka_conn_id=self.kafka_config_id,
            bootstrap_servers=hook.bootstrap_servers() or None,
            topic=topic,
            partitions=[
                PartitionWindow(
                    partition=s.partition,
                    start_offset=s.start_offset,
                    end_offset=s.end_offset,
                    record_count=s.record_count,
                    first_timestamp_ms=s.first_timestamp_ms,
                    last_timestamp_ms=s.last_timestamp_ms,
                )
                for s in scans.values()
            ],
            key_serializer=key_ser,
            value_serializer=value_ser,
            event_time=event_time,
            watermark=WatermarkSpec.model_validate(fmt.watermark or {}),
        )
        outputs = _linked_topic(self.start_offsets, "output", ProductionOutputs)
        if outputs is not None:
            capture = capture.model_copy(update={"production_outputs": outputs})
        cassette = _linked_topic(self.start_offsets, "cassette", CassetteLink)
        if cassette is not None:
            capture = capture.model_copy(update={"cassette": cassette})
        racing = self.start_offsets.get("racing_records") if isinstance(self.start_offsets, Mapping) else None
        if racing is not None and production.savepoint.quiesce_mode == "savepoint":
            savepoint = production.savepoint.model_copy(update={"racing_records": int(racing)})
            production = production.model_copy(update={"savepoint": savepoint})
        return ReplayManifest(run_id=run_id, production=production, capture=capture)

    @cached_property
    def hook(self) -> KafkaOffsetsHook:
        """The Kafka offsets/admin hook (closing it only drops its reading consumer)."""
        return KafkaOffsetsHook(kafka_config_id=self.kafka_config_id)

    def execute(self, context: Any) -> dict[str, Any]:
        """Read the window, write the sealed manifest, return its URI and digest."""
        run_id = self.run_id or str(context.get("run_id") or "manual")
        hook = self.hook
        try:
            manifest = self.build_manifest(hook, run_id)
        except (ManifestError, ValueError) as err:
            raise AirflowException(f"cannot build the replay manifest: {err}") from err
        finally:
            hook.close()
        count = manifest.capture.record_count
        expected = self.scan.expected_records
        if expected not in (None, "", "None") and count != int(expected):  # type: ignore[arg-type]
            raise AirflowException(
                f"the capture window holds {count} records, expected {expected}: "
                f"{ {w.partition: w.record_count for w in manifest.capture.partitions} }"
            )
        # through Airflow's object storage: an s3://<conn>@bucket URI is written with that connection
        target = run_storage.location(str(self.manifest_uri))
        sealed = save_manifest(manifest, target, signing_key=signing_key(self.signing_conn_id))
        self.log.info("replay manifest written to %s\n%s", self.manifest_uri, sealed.summary())
        return {
            "uri": self.manifest_uri,
            "digest": sealed.digest,
            "record_count": count,
            "topic": manifest.capture.topic,
            "partitions": {str(w.partition): w.model_dump(mode="json") for w in manifest.capture.partitions},
        }


def reuse_problems(
    earlier: ReplayManifest,
    existing_savepoint: str | None,
    expected_topic: str | None,
    expected_job_name: str | None,
    *,
    check_savepoint: bool = True,
) -> list[str]:
    """Why an earlier run's manifest may not be replayed again (empty: it may): its savepoint is gone
    (``check_savepoint``), or it links another savepoint, capture topic or production job than expected."""
    problems = savepoint_problems(earlier) if check_savepoint else []
    linked = earlier.production.savepoint.path
    if existing_savepoint and normalized_location(existing_savepoint) != normalized_location(linked):
        problems.append(
            f"it links savepoint {linked}, not existing_savepoint {existing_savepoint}. Fix: give the "
            "manifest of the run that took that savepoint, or leave existing_savepoint empty"
        )
    if expected_topic and earlier.capture.topic != expected_topic:
        problems.append(
            f"its capture topic is {earlier.capture.topic!r}, not {expected_topic!r}. Fix: give a manifest "
            "of this spec's production job"
        )
    if expected_job_name and earlier.production.job_name != expected_job_name:
        problems.append(
            f"it was taken of job {earlier.production.job_name!r}, not {expected_job_name!r}. Fix: give "
            "a manifest of this spec's production job"
        )
    return problems


class ReuseManifestOperator(BaseOperator):
    """``quiesce_mode=existing``: replay an earlier run's savepoint and capture window again.

    Loads the earlier manifest (its digest must match: a hand-edited manifest is refused), checks that its
    savepoint still exists, and writes a new manifest for this run (``quiesce_mode`` ``existing``,
    ``reused_from`` naming the earlier one, empty isolation) to ``manifest_uri``. Production is not touched.

    XCom: ``{"uri", "digest", "savepoint_path", "reused_from", "record_count", "production_plan"}`` —
    ``savepoint_path`` in the same key as the quiesce step's result, ``production_plan`` (from the manifest)
    for the replay's identity preflight.

    :param existing_manifest: URI of the earlier run's manifest (templated).
    :param manifest_uri: where this run's manifest goes (templated).
    :param existing_savepoint: if given (templated), the savepoint the earlier manifest must link.
    :param check_savepoint: refuse when the savepoint's ``_metadata`` is gone (``file://`` paths).
    :param expected_topic: refuse a manifest of another capture topic (e.g. another spec's).
    :param expected_job_name: refuse a manifest of another production job.
    :param kafka_config_id: with it, refuse when the capture topic no longer holds the window's first
        records (retention deleted them: Flink would silently start at the earliest record left).
    :param manifest_sources: URI prefixes the earlier manifest may be loaded from (templated); anything
        else — an ``http://`` URL, another folder, a ``file://`` URL naming a host, ``..``, ``%``-escapes, a
        symlink out of the folder — is refused before it is read. None: the folder that holds
        this run's folder (``manifest_uri``'s grandparent, i.e. ``runs_uri/<dag id>`` in the DAG, which
        passes the spec's ``manifest_sources`` or ``runs_uri``).
    :param signing_conn_id: Airflow connection whose password is the HMAC key: the earlier manifest must carry
        a matching signature, and the new one is signed.
    """

    template_fields: Sequence[str] = (
        "existing_manifest", "existing_savepoint", "manifest_uri", "run_id", "expected_topic", "expected_job_name",
        "manifest_sources",
    )

    def __init__(
        self,
        *,
        existing_manifest: str,
        manifest_uri: str,
        existing_savepoint: str | None = None,
        check_savepoint: bool = True,
        run_id: str | None = None,
        expected_topic: str | None = None,
        expected_job_name: str | None = None,
        kafka_config_id: str | None = None,
        manifest_sources: Sequence[str] | None = None,
        signing_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.manifest_sources = manifest_sources
        self.signing_conn_id = signing_conn_id
        self.existing_manifest = existing_manifest
        self.existing_savepoint = existing_savepoint
        self.expected_topic = expected_topic
        self.expected_job_name = expected_job_name
        self.kafka_config_id = kafka_config_id
        self.manifest_uri = manifest_uri
        self.check_savepoint = check_savepoint
        self.run_id = run_id

    @cached_property
    def hook(self) -> KafkaOffsetsHook:
        """The Kafka offsets/admin hook (closing it only drops its reading consumer)."""
        return KafkaOffsetsHook(kafka_config_id=self.kafka_config_id or "kafka_default")

    def execute(self, context: Any) -> dict[str, Any]:
        """Load, check, re-issue the manifest for this run.

        Every refusal is about what was given, which a retry does not change: it fails at once.
        """
        earlier, key = self._load_earlier()
        problems = reuse_problems(earlier, self.existing_savepoint, self.expected_topic, self.expected_job_name,
                                  check_savepoint=self.check_savepoint)  # fmt: skip
        if self.kafka_config_id and not problems:
            problems += self._window_problems(earlier)
        if problems:
            raise AirflowFailException(f"existing_manifest {self.existing_manifest}: " + "; ".join(problems))
        run_id = self.run_id or str(context.get("run_id") or "manual")
        sealed = save_manifest(earlier.for_reuse(run_id), run_storage.location(str(self.manifest_uri)), signing_key=key)
        self.log.info("replaying %s again: %s\n%s", self.existing_manifest, self.manifest_uri, sealed.summary())
        return {
            "uri": self.manifest_uri,
            "digest": sealed.digest,
            "savepoint_path": sealed.production.savepoint.path,
            "reused_from": sealed.reused_from,
            "record_count": sealed.capture.record_count,
            "production_plan": sealed.production.production_plan(),
        }

    def _load_earlier(self) -> tuple[ReplayManifest, str | None]:
        """The earlier run's manifest, read from exactly the allowed place that was checked (not as fsspec would
        read the text given) and verified (digest, and signature with ``signing_conn_id``); and the signing key.

        :raises AirflowFailException: no ``existing_manifest``, a place not allowed, a manifest that does not verify.
        """
        if not self.existing_manifest:
            raise AirflowFailException(
                "quiesce_mode=existing needs existing_manifest: the manifest URI of the earlier run whose savepoint "
                "and window to replay (its run_record.json names it)"
            )
        try:
            source = checked_manifest_source(self.existing_manifest, self.allowed_sources())
        except ManifestError as err:
            raise AirflowFailException("; ".join(err.problems)) from None
        key = signing_key(self.signing_conn_id)
        try:
            return load_manifest(run_storage.location(source), signing_key=key), key
        except ManifestError as err:
            raise AirflowFailException(f"existing_manifest {self.existing_manifest}: {err}") from err

    def allowed_sources(self) -> list[str]:
        """``manifest_sources``, or (None) the folder holding this run's folder: ``manifest_uri``'s grandparent."""
        if self.manifest_sources is not None:
            return [str(s) for s in self.manifest_sources]
        import posixpath

        return [posixpath.dirname(posixpath.dirname(str(self.manifest_uri).rstrip("/")))]

    def _window_problems(self, manifest: ReplayManifest) -> list[str]:
        """The window's records must still be on the broker (only the low watermark is checked: tansu's
        high watermark is not reliable for batched writes)."""
        topic = manifest.capture.topic
        hook = self.hook
        try:
            if not hook.topic_exists(topic):
                return [f"capture.topic {topic!r} no longer exists. Fix: take a new savepoint (drain or stop)"]
            first = hook.begin_offsets(topic)
        finally:
            hook.close()
        problems = []
        for window in manifest.capture.partitions:
            if window.record_count and first.get(window.partition, 0) > window.start_offset:
                problems.append(
                    f"capture.partitions[{window.partition}]: records from offset {window.start_offset} were deleted "
                    f"(the topic now starts at {first[window.partition]}). Fix: raise retention.ms on {topic}, or "
                    "take a new savepoint"
                )
        return problems

