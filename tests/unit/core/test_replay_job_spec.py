"""ReplayJobSpec: argv round trip, sealed-manifest windows and timing, tamper refusal, clear errors; the replay
job names (unique per run and variant, matchable by the run's prefix, also for long ids)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from airflow_flink_replay.core.manifest import EventTime, ManifestError, ManifestTamperedError, ReplayManifest
from airflow_flink_replay.core.manifest_io import save_manifest
from airflow_flink_replay.core.policy import ReplayPolicy
from airflow_flink_replay.core.replay_job_spec import (
    JOB_NAME_MAX,
    ReplayJobSpec,
    ReplayTiming,
    load_window_from_manifest,
    replay_job_name,
    replay_job_name_prefix,
    timing_from_capture,
)

BASE = {
    "variant": "candidate",
    "agent_factory": "examples.review_agent.v2.agent:build_agent",
    "job_identifier": "replay-1",
    "action_state_topic": "as-replay-1",
    "output_dir": "/tmp/o",
    "audit_dir": "/tmp/a",
    "kafka_bootstrap": "127.0.0.1:9092",
}


def _manifest(event_time: dict[str, Any] | None = None, watermark: dict[str, Any] | None = None) -> ReplayManifest:
    capture: dict[str, Any] = {
        "kafka_conn_id": "kafka_default",
        "topic": "cap",
        "partitions": [
            {
                "partition": 0,
                "start_offset": 1,
                "end_offset": 4,
                "record_count": 3,
                "first_timestamp_ms": 1_000,
                "last_timestamp_ms": 3_000,
            },
            {"partition": 1, "start_offset": 0, "end_offset": 0, "record_count": 0},
        ],
    }
    if event_time is not None:
        capture["event_time"] = event_time
    if watermark is not None:
        capture["watermark"] = watermark
    return ReplayManifest.model_validate(
        {
            "run_id": "run-1",
            "production": {
                "job_id": "4" * 32,
                "job_name": "prod",
                "savepoint": {"path": "file:///tmp/sp-1", "quiesce_mode": "drain"},
                "agent": {"vertex_id": "a" * 32, "parallelism": 1, "max_parallelism": 64},
            },
            "capture": capture,
        }
    ).sealed()


def _saved(tmp_path: Path, **kwargs: Any) -> Path:
    path = tmp_path / "manifest.json"
    save_manifest(_manifest(**kwargs), path)
    return path


def test_argv_and_file_round_trip(tmp_path: Path) -> None:
    spec = ReplayJobSpec(
        **BASE,
        capture_topic="cap",
        start_offsets={0: 3, 1: 0},
        end_offsets={0: 9, 1: 2},
        policy=ReplayPolicy(by_name={"notify_support": "block"}),
        agent_uid_hash="A" * 32,
        max_parallelism=128,
        mem0_config={"vector_store": {"provider": "chroma"}},
        event_time=EventTime(source="field", field="$.ts"),
        watermark="bounded:5",
        watermark_idleness_ms=0,
    )
    assert ReplayJobSpec.from_argv(spec.to_argv()) == spec
    assert ReplayJobSpec.from_argv(spec.write(tmp_path / "spec.json")) == spec
    # one program, several variants: every spec in order, inline or from a file
    other = spec.model_copy(update={"variant": "candidate"})
    argv = [*spec.to_argv(), *other.write(tmp_path / "other.json")]
    assert ReplayJobSpec.all_from_argv(argv) == [spec, other]
    with pytest.raises(ValueError, match="--spec-json"):
        ReplayJobSpec.all_from_argv(["--verbose"])
    assert spec.agent_uid_hash == "a" * 32
    assert spec.window().record_count == 8


def test_window_from_a_sealed_manifest_plain_path_and_file_uri(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    for location in (str(path), f"file://{path}", path.as_uri()):
        w = load_window_from_manifest(location)
        assert (w.topic, w.start_offsets, w.end_offsets) == ("cap", {0: 1, 1: 0}, {0: 4, 1: 0})
    spec = ReplayJobSpec(**BASE, manifest=str(path))
    assert spec.window().record_count == 3
    assert spec.replay_input().manifest_digest == json.loads(path.read_text())["digest"]


# ---------------------------------------------------------------------------------------------- timing
@pytest.mark.parametrize(
    ("event_time", "watermark", "expected"),
    [
        (
            None,
            None,
            {
                "event_time": {"source": "kafka_timestamp", "field": None, "unit": "ms"},
                "watermark": "monotonous",
                "idleness_ms": None,
            },
        ),
        (
            {"source": "field", "field": "$.event.ts", "unit": "s"},
            {"max_out_of_orderness_ms": 2500, "idleness_ms": 30000},
            {
                "event_time": {"source": "field", "field": "$.event.ts", "unit": "s"},
                "watermark": "bounded:2500",
                "idleness_ms": 30000,
            },
        ),
        (
            {"source": "kafka_timestamp"},
            {"max_out_of_orderness_ms": 0, "idleness_ms": 5000},
            {
                "event_time": {"source": "kafka_timestamp", "field": None, "unit": "ms"},
                "watermark": "monotonous",
                "idleness_ms": 5000,
            },
        ),
    ],
)
def test_timing_maps_the_manifest_event_time_and_watermark(event_time, watermark, expected) -> None:
    timing = timing_from_capture(_manifest(event_time, watermark).capture)
    got = timing.model_dump(mode="json")
    assert {k: got[k] for k in expected} == expected
    assert set(timing.origin.values()) == {"manifest"}


def test_a_replay_spec_built_from_a_manifest_takes_its_timing(tmp_path: Path) -> None:
    path = _saved(
        tmp_path,
        event_time={"source": "field", "field": "$.ts"},
        watermark={"max_out_of_orderness_ms": 3_600_000, "idleness_ms": 30_000},
    )
    timing = ReplayJobSpec(**BASE, manifest=f"file://{path}").timing()
    assert (timing.event_time.field, timing.watermark, timing.idleness_ms) == ("$.ts", "bounded:3600000", 30_000)
    assert timing.max_out_of_orderness_ms == 3_600_000
    # explicit offsets override the manifest's window, not its timing
    spec = ReplayJobSpec(**BASE, manifest=str(path), capture_topic="other", start_offsets={0: 0}, end_offsets={0: 1})
    assert spec.window().topic == "other" and spec.timing().watermark == "bounded:3600000"


def test_explicit_spec_values_override_the_manifest(tmp_path: Path) -> None:
    path = _saved(
        tmp_path,
        event_time={"source": "field", "field": "$.ts"},
        watermark={"max_out_of_orderness_ms": 2000, "idleness_ms": 30_000},
    )
    spec = ReplayJobSpec(**BASE, manifest=str(path), watermark="none", watermark_idleness_ms=0, event_time=EventTime())
    timing = spec.timing()
    assert (timing.event_time.source, timing.watermark, timing.idleness_ms) == ("kafka_timestamp", "none", None)
    assert timing.origin == {"event_time": "spec", "watermark": "spec", "idleness_ms": "spec"}
    only_bound = ReplayJobSpec(**BASE, manifest=str(path), watermark="bounded:10").timing()
    assert (only_bound.watermark, only_bound.idleness_ms, only_bound.event_time.field) == ("bounded:10", 30_000, "$.ts")
    assert only_bound.origin == {"event_time": "manifest", "watermark": "spec", "idleness_ms": "manifest"}


def test_without_a_manifest_the_timing_is_the_record_timestamp_and_monotonous() -> None:
    spec = ReplayJobSpec(**BASE, capture_topic="c", start_offsets={0: 0}, end_offsets={0: 2})
    assert spec.timing() == ReplayTiming()
    assert spec.timing().watermark == "monotonous" and spec.timing().event_time.source == "kafka_timestamp"
    assert (
        ReplayJobSpec(**BASE, capture_topic="c", start_offsets={0: 0}, end_offsets={0: 2}, watermark="bounded:7")
        .timing()
        .max_out_of_orderness_ms
        == 7
    )


# --------------------------------------------------------------------------------------------- tamper
def test_the_job_side_loader_refuses_a_hand_edited_manifest(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    doc = json.loads(path.read_text())
    doc["capture"]["partitions"][0]["end_offset"] = 9  # widen the window by hand
    doc["capture"]["partitions"][0]["record_count"] = 8
    path.write_text(json.dumps(doc, indent=2))
    spec = ReplayJobSpec(**BASE, manifest=f"file://{path}")
    with pytest.raises(ManifestTamperedError) as err:
        spec.window()
    message = str(err.value)
    assert f"refuses manifest file://{path}" in message and "tampered" in message
    assert "digest: mismatch" in message and "never edit it by hand" in message
    with pytest.raises(ManifestTamperedError, match="tampered"):
        spec.timing()
    with pytest.raises(ManifestTamperedError):
        load_window_from_manifest(str(path))


def test_the_job_side_loader_refuses_an_unsealed_or_invalid_manifest(tmp_path: Path) -> None:
    unsealed = tmp_path / "unsealed.json"
    unsealed.write_text(_manifest().model_copy(update={"digest": None}).to_json())
    with pytest.raises(ManifestTamperedError, match="digest: missing"):
        load_window_from_manifest(str(unsealed))
    legacy = tmp_path / "legacy.json"  # the old hand-written layout is not a manifest
    legacy.write_text(json.dumps({"capture_topic": "cap", "start_offsets": {"0": 2}, "end_offsets": {"0": 5}}))
    with pytest.raises(ManifestError, match=rf"cannot use manifest {legacy}") as err:
        load_window_from_manifest(str(legacy))
    assert "production: missing" in str(err.value) and "capture: missing" in str(err.value)


def test_the_submitting_side_carries_the_manifest_and_the_job_reads_no_file(tmp_path: Path) -> None:
    """The submission carries the sealed manifest's text: the job verifies it and never opens the location,
    which may be a folder only Airflow sees (it only names the manifest in messages)."""
    path = _saved(tmp_path)
    sealed = json.loads(path.read_text())["digest"]
    carried = ReplayJobSpec(**BASE, manifest=f"file://{path}").with_manifest_carried()
    assert carried.manifest_text and ReplayManifest.parse(carried.manifest_text).digest == sealed
    assert carried.with_manifest_carried() is carried  # already carried: unchanged
    path.unlink()  # the Flink side cannot see the file
    job_side = ReplayJobSpec.from_argv(carried.to_argv())
    assert job_side.replay_input().window.record_count == 3
    assert job_side.replay_input().manifest_digest == sealed
    # a carried text edited on the way (window widened) is refused like an edited file, naming the location
    doc = json.loads(carried.manifest_text)
    doc["capture"]["partitions"][0]["end_offset"] = 9
    edited = carried.model_copy(update={"manifest_text": json.dumps(doc)})
    with pytest.raises(ManifestTamperedError, match=rf"refuses manifest file://{path}: digest check failed"):
        edited.replay_input()
    # a spec without a manifest has nothing to carry; a location that cannot be read is named with its fix
    explicit = ReplayJobSpec(**BASE, capture_topic="c", start_offsets={0: 0}, end_offsets={0: 1})
    assert explicit.with_manifest_carried() is explicit
    with pytest.raises(ManifestError, match=rf"cannot read manifest file://{path} to submit the replay") as err:
        ReplayJobSpec(**BASE, manifest=f"file://{path}").with_manifest_carried()
    assert "not found" in str(err.value)


def test_the_manifest_is_opened_through_the_submitting_side_s_opener(tmp_path: Path) -> None:
    """The Airflow side passes its opener (a URI naming a connection, ``s3://<conn>@bucket/...``, is opened with
    that connection): the location the spec names goes through it, and what it opens is what is carried."""
    path = _saved(tmp_path)
    asked: list[str] = []

    def opener(location: str) -> Path:
        asked.append(location)
        return path

    carried = ReplayJobSpec(**BASE, manifest="s3://runs_conn@bucket/runs/m.json").with_manifest_carried(opener)
    assert asked == ["s3://runs_conn@bucket/runs/m.json"]
    assert carried.manifest_text and ReplayManifest.parse(carried.manifest_text).digest == json.loads(
        path.read_text())["digest"]


def test_a_manifest_edited_before_submission_is_refused_on_the_submitting_side(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    doc = json.loads(path.read_text())
    doc["capture"]["partitions"][0]["end_offset"] = 9
    path.write_text(json.dumps(doc))
    with pytest.raises(ManifestTamperedError, match="refusing to submit a replay of manifest"):
        ReplayJobSpec(**BASE, manifest=str(path)).with_manifest_carried()


# ------------------------------------------------------------------------------------- signed manifest
KEY = "job-side-hmac-key-42"


def _signed(tmp_path: Path) -> Path:
    path = tmp_path / "signed.json"
    save_manifest(_manifest().model_copy(update={"digest": None}), path, signing_key=KEY)
    return path


def test_the_job_checks_the_signature_with_a_key_it_resolves_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _signed(tmp_path)
    monkeypatch.setenv("AFR_TEST_MANIFEST_KEY", KEY)
    spec = ReplayJobSpec(**BASE, manifest=str(path), manifest_key_ref="${env:AFR_TEST_MANIFEST_KEY}")
    assert spec.replay_input().window.record_count == 3
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    by_file = spec.model_copy(update={"manifest_key_ref": f"${{file:{key_file}}}"})
    assert by_file.window().record_count == 3
    # the key never travels: neither in the program arguments nor in the spec file
    argv = spec.to_argv()
    assert "${env:AFR_TEST_MANIFEST_KEY}" in argv[1] and KEY not in " ".join(argv)
    assert KEY not in Path(spec.write(tmp_path / "spec.json")[1]).read_text()
    assert ReplayJobSpec.from_argv(argv).window().record_count == 3


def test_the_job_refuses_a_tampered_manifest_whose_digest_was_recomputed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _signed(tmp_path)
    doc = json.loads(path.read_text())
    doc["capture"]["partitions"][0]["end_offset"] = 9
    doc["capture"]["partitions"][0]["record_count"] = 8
    doc["digest"] = ReplayManifest.model_validate({**doc, "digest": None}).compute_digest()
    path.write_text(json.dumps(doc))
    assert ReplayJobSpec(**BASE, manifest=str(path)).window().record_count == 8  # digest only: not noticed
    monkeypatch.setenv("AFR_TEST_MANIFEST_KEY", KEY)
    signed_spec = ReplayJobSpec(**BASE, manifest=str(path), manifest_key_ref="${env:AFR_TEST_MANIFEST_KEY}")
    with pytest.raises(ManifestTamperedError) as err:
        signed_spec.replay_input()
    assert "signature check failed (tampered)" in str(err.value) and "signature: mismatch" in str(err.value)
    assert KEY not in str(err.value)
    # carried in the submission, the signature is checked on the job side all the same
    carried = ReplayJobSpec(**BASE, manifest=str(path)).with_manifest_carried()
    keyed = carried.model_copy(update={"manifest_key_ref": "${env:AFR_TEST_MANIFEST_KEY}"})
    with pytest.raises(ManifestTamperedError, match="signature: mismatch"):
        keyed.replay_input()
    genuine = ReplayJobSpec(**BASE, manifest=str(_signed(tmp_path)),
                            manifest_key_ref="${env:AFR_TEST_MANIFEST_KEY}").with_manifest_carried()
    assert genuine.manifest_text and KEY not in genuine.manifest_text
    assert genuine.replay_input().window.record_count == 3


def test_with_a_key_the_job_refuses_an_unsigned_manifest_and_says_when_the_key_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unsigned = _saved(tmp_path)
    spec = ReplayJobSpec(**BASE, manifest=str(unsigned), manifest_key_ref="${env:AFR_TEST_MANIFEST_KEY}")
    monkeypatch.delenv("AFR_TEST_MANIFEST_KEY", raising=False)
    with pytest.raises(ManifestError, match=r"AFR_TEST_MANIFEST_KEY.*not set.*Fix: export"):
        spec.window()
    monkeypatch.setenv("AFR_TEST_MANIFEST_KEY", KEY)
    with pytest.raises(ManifestTamperedError, match="signature: missing"):
        spec.window()
    assert ReplayJobSpec(**BASE, manifest=str(unsigned)).window().record_count == 3  # no key: unsigned is fine


def test_the_key_itself_is_refused_in_the_spec() -> None:
    with pytest.raises(ValidationError) as err:
        ReplayJobSpec(**BASE, manifest="m.json", manifest_key_ref=KEY)
    assert "must be a reference" in str(err.value) and KEY not in str(err.value)
    with pytest.raises(ValidationError, match="no manifest to check"):
        ReplayJobSpec(
            **BASE, capture_topic="c", start_offsets={0: 0}, end_offsets={0: 1}, manifest_key_ref="${env:K}"
        )


# ----------------------------------------------------------------------------------- production guards
def test_a_spec_naming_productions_topic_or_identifier_is_refused_where_it_is_built() -> None:
    guarded = {**BASE, "manifest": "m.json", "production_action_state_topic": "prod-as",
               "production_job_identifier": "prod-id"}  # fmt: skip
    ReplayJobSpec(**guarded)  # the replay's own topic and fork namespace: fine
    with pytest.raises(ValidationError) as err:
        ReplayJobSpec(**{**guarded, "action_state_topic": "prod-as"})
    message = str(err.value)
    assert "action_state_topic 'prod-as' is production's action-state topic" in message
    assert "Fix: give the replay a fresh, empty topic" in message
    with pytest.raises(ValidationError, match=r"job_identifier 'prod-id' is production's job identifier.*Fix:"):
        ReplayJobSpec(**{**guarded, "job_identifier": "prod-id"})
    both = ReplayJobSpec.model_construct(**{**guarded, "action_state_topic": "prod-as", "job_identifier": "prod-id"})
    assert len(both.production_clashes()) == 2
    # specs written before the fields existed still load (the DAG always sets them)
    assert ReplayJobSpec(**BASE, manifest="m.json").production_clashes() == []


def test_the_replay_job_refuses_to_start_on_productions_state() -> None:
    from airflow_flink_replay.exceptions import FlinkReplayError
    from airflow_flink_replay.flink.replay_job import build_replay, refuse_production_targets

    guarded = {**BASE, "manifest": "m.json", "production_action_state_topic": "prod-as",
               "production_job_identifier": "prod-id"}  # fmt: skip
    refuse_production_targets(ReplayJobSpec(**guarded))
    # a spec that skipped validation (model_construct, model_copy(update=...)) is stopped before anything is built
    bad = ReplayJobSpec(**guarded).model_copy(update={"job_identifier": "prod-id"})
    with pytest.raises(FlinkReplayError, match="replay job refuses to start: job_identifier 'prod-id'"):
        build_replay(object(), bad)


def test_errors_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="give either manifest or all of capture_topic"):
        ReplayJobSpec(**BASE)
    with pytest.raises(ValidationError, match="agent_factory"):
        ReplayJobSpec(**{**BASE, "agent_factory": "no_colon"}, manifest="m.json")
    with pytest.raises(ValidationError, match="32-hex"):
        ReplayJobSpec(**BASE, manifest="m.json", agent_uid_hash="xyz")
    with pytest.raises(ValidationError, match="not both"):
        ReplayJobSpec(**BASE, manifest="m.json", agent_uid="u", agent_uid_hash="0" * 32)
    with pytest.raises(ValidationError, match="watermark"):
        ReplayJobSpec(**BASE, manifest="m.json", watermark="late")
    with pytest.raises(ValidationError, match="JSONPath"):
        ReplayJobSpec(**BASE, manifest="m.json", event_time={"source": "field", "field": "ts"})
    with pytest.raises(ValueError, match=r"start \(5\) <= end \(2\)"):
        ReplayJobSpec(**BASE, capture_topic="c", start_offsets={0: 5}, end_offsets={0: 2}).window()
    with pytest.raises(ManifestError, match="not found"):
        load_window_from_manifest(str(tmp_path / "missing.json"))


def test_replay_program_is_a_module_unless_a_path_is_given() -> None:
    """The default needs the package in the cluster's Python, not a path shared with the Airflow worker."""
    import importlib.util

    from airflow_flink_replay.operators.replay import REPLAY_JOB_MODULE, SubmitReplayJobOperator

    spec = ReplayJobSpec(**BASE, job_name="afr-replay-x", manifest="/runs/m.json")
    default = SubmitReplayJobOperator(task_id="r", spec=spec, savepoint_path=None)._program(spec)
    assert default.driver_args()[:2] == ["-pym", REPLAY_JOB_MODULE]
    assert importlib.util.find_spec(REPLAY_JOB_MODULE) is not None
    path = SubmitReplayJobOperator(task_id="r2", spec=spec, savepoint_path=None, replay_program="/opt/rj.py")
    assert path._program(spec).driver_args()[:2] == ["-py", "/opt/rj.py"]
    assert default.driver_args()[-2:] == spec.to_argv()[-2:]


VARIANTS = ("baseline", "baseline_2", "candidate")


def test_replay_job_names_are_readable_for_ordinary_ids() -> None:
    run_id = "manual__2026-01-01T00:00:00+00:00"
    assert replay_job_name_prefix("gate", run_id) == f"afr-replay-gate-{run_id}-"
    assert replay_job_name("gate", run_id, "baseline_2") == f"afr-replay-gate-{run_id}-baseline_2"


def test_long_dag_and_run_ids_keep_the_variants_apart_and_the_prefix_matching() -> None:
    """Issue 13 §4: cut at 200 characters, all three variants used to get one name and cleanup matched none."""
    dag_id, run_id = "release_gate_" + "d" * 180, "manual__" + "r" * 242
    assert len(run_id) == 250
    prefix = replay_job_name_prefix(dag_id, run_id)
    names = [replay_job_name(dag_id, run_id, v) for v in VARIANTS]
    assert len(set(names)) == 3
    assert all(n.startswith(prefix) and n.endswith(v) for n, v in zip(names, VARIANTS, strict=True))
    assert max(map(len, names)) <= JOB_NAME_MAX
    assert prefix.startswith("afr-replay-release_gate_ddd") and prefix.endswith("-")
    # another run (or DAG) that shares the first 130 characters gets another prefix, so cleanup leaves it alone
    other = replay_job_name_prefix(dag_id, run_id[:-1] + "x")
    assert other != prefix and not any(n.startswith(other) for n in names)
    assert replay_job_name_prefix(dag_id, run_id) == prefix  # deterministic: a retry finds its job


def test_a_too_long_variant_is_shortened_with_a_digest() -> None:
    names = {replay_job_name("gate", "r1", "v" * 300 + tail) for tail in ("a", "b")}
    assert len(names) == 2 and all(len(n) <= JOB_NAME_MAX and n.startswith("afr-replay-gate-r1-") for n in names)


def test_the_candidate_s_changed_resources_travel_with_its_spec() -> None:
    spec = ReplayJobSpec(**BASE, capture_topic="cap", start_offsets={0: 0}, end_offsets={0: 1})
    assert spec.changed_resources == () and spec.with_changed_resources([]) is spec
    changed = spec.with_changed_resources(["ship_label", "review_prompt"]).with_changed_resources(["ship_label"])
    assert changed.changed_resources == ("review_prompt", "ship_label")
    assert ReplayJobSpec.from_argv(changed.to_argv()) == changed


@pytest.mark.parametrize("field", ["production_action_state_topic", "production_job_identifier", "action_state_topic",
                                   "job_identifier"])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_name_the_guard_needs_is_refused_not_a_guard_turned_off(field: str, value: str) -> None:
    """``production_action_state_topic: ""`` used to read as "not known": the guard was silently off."""
    guarded = {**BASE, "manifest": "m.json", "production_action_state_topic": "prod-as",
               "production_job_identifier": "prod-id"}  # fmt: skip
    with pytest.raises(ValidationError, match=rf"{field} is empty.*Fix:"):
        ReplayJobSpec(**{**guarded, field: value})
    # the job re-checks what skipped validation
    assert any(f"{field} is empty" in p for p in ReplayJobSpec(**guarded).model_copy(
        update={field: value}).production_clashes())


@pytest.mark.parametrize(
    ("field", "value"),
    [("agent_factory", "examples.review_agent.v2.agent:build_agent\n"), ("agent_uid_hash", "0" * 32 + "\n"),
     ("watermark", "monotonous\n")],
)
def test_a_trailing_newline_does_not_pass_a_shape_check(field: str, value: str) -> None:
    with pytest.raises(ValidationError, match=field):
        ReplayJobSpec(**{**BASE, "manifest": "m.json", field: value})


@pytest.mark.parametrize("key", ["kafkaActionStateTopic", "job-identifier", "JOB-IDENTIFIER", "kafkaBootstrapServers",
                                 "actionStateStoreBackend", "kafkaActionStateTopicNumPartitions"])  # fmt: skip
def test_agent_options_may_not_name_the_store_or_the_identity(key: str) -> None:
    """The replay's action-state topic and Mem0 namespace come from its own fields, checked against production's:
    an agent option naming them (production's, say) is refused, the field and the fix named."""
    with pytest.raises(ValidationError, match=r"agent_config sets .*Fix: leave these keys out of agent_config"):
        ReplayJobSpec(**BASE, **WINDOW, agent_config={"num-async-threads": 4, key: "prod-as"})
    kept = ReplayJobSpec(**BASE, **WINDOW, agent_config={"num-async-threads": 4})
    assert kept.agent_config == {"num-async-threads": 4}


WINDOW = {"capture_topic": "in", "start_offsets": {0: 0}, "end_offsets": {0: 1}}
