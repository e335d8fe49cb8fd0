"""The manifest operators' integrity rules: the create step signs with the key of an Airflow connection
(read from a real ``AIRFLOW_CONN_*`` connection), the reuse step loads an earlier manifest only from
``manifest_sources`` (refused before anything is fetched) and checks its signature.

The Kafka side of the create step is a stand-in answering ``scan`` (its counting is the hook's own test);
everything else — the manifest, its file, the connection — is real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_flink_replay.core.manifest import ReplayManifest
from airflow_flink_replay.core.manifest_io import load_manifest, save_manifest
from airflow_flink_replay.hooks.kafka_offsets import PartitionScan
from airflow_flink_replay.operators.manifest import (
    CaptureFormat,
    CreateReplayManifestOperator,
    ProductionFacts,
    ReuseManifestOperator,
    WindowScan,
    signing_key,
)
from tests.unit.core.test_manifest import AGENT, JOB, _data

KEY = "op-side-hmac-key-7"


@pytest.fixture
def signing_conn(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_AFR_MANIFEST_SIGNING", json.dumps({"conn_type": "generic", "password": KEY}))
    return "afr_manifest_signing"


class _Offsets:
    """The capture topic as the create step reads it: partition 0 holds offsets 3..5."""

    def scan(self, topic: str, start: dict[int, int], end: dict[int, int], **_: Any) -> dict[int, PartitionScan]:
        return {
            p: PartitionScan(p, start[p], end[p], end[p] - start[p], 1_000, 2_000, start[p], end[p] - 1) for p in start
        }

    def bootstrap_servers(self) -> str:
        return "127.0.0.1:9092"

    def close(self) -> None:
        pass


def _quiesce_result() -> dict[str, Any]:
    return {
        "job_id": JOB,
        "job_name": "support-agent",
        "mode": "drain",
        "savepoint_path": "file:///tmp/savepoints/sp-1",
        "plan": {
            "agent_vertex_id": AGENT,
            "vertices": [{"id": AGENT, "name": "action-execute-operator", "parallelism": 1, "max_parallelism": 128}],
        },
    }


def test_the_create_step_signs_with_the_connections_password(tmp_path: Path, signing_conn: str) -> None:
    uri = f"file://{tmp_path}/runs/gate/t1/manifest.json"
    op = CreateReplayManifestOperator(
        task_id="manifest",
        manifest_uri=uri,
        window={"topic": "cap", "start_offsets": {"0": 3}, "end_offsets": {"0": 6}},
        production=_quiesce_result(),
        signing_conn_id=signing_conn,
    )
    op.__dict__["hook"] = _Offsets()
    result = op.execute({"run_id": "t1"})
    assert KEY not in json.dumps(result) and KEY not in (tmp_path / "runs/gate/t1/manifest.json").read_text()
    signed = load_manifest(uri, signing_key=KEY)
    assert signed.signature and signed.digest == result["digest"]
    unsigned = CreateReplayManifestOperator(
        task_id="manifest", manifest_uri=f"file://{tmp_path}/u.json", window=op.window, production=op.production
    )
    unsigned.__dict__["hook"] = _Offsets()
    unsigned.execute({"run_id": "t1"})
    assert load_manifest(tmp_path / "u.json").signature is None


def test_the_create_steps_settings_are_rendered_and_reach_the_manifest(tmp_path: Path) -> None:
    """The capture format, production's facts and the window scan travel as NamedTuples: Airflow renders the
    templated members (a new tuple of the same class), and each lands where the separate arguments used to."""
    op = CreateReplayManifestOperator(
        task_id="manifest",
        manifest_uri=f"file://{tmp_path}/m.json",
        window={"topic": "cap", "start_offsets": {"0": 3}, "end_offsets": {"0": 6}},
        production=_quiesce_result(),
        capture_format=CaptureFormat(value_serializer="string", watermark={"idleness_ms": 1_000}),
        production_facts=ProductionFacts(
            flink_version="{{ params.flink }}", agent_uid="agent-1", checkpoint_id="{{ params.checkpoint }}"
        ),
        scan=WindowScan(expected_records="{{ params.records }}"),
    )
    op.render_template_fields({"params": {"flink": "2.2.1", "checkpoint": "7", "records": "3"}})
    assert type(op.production_facts) is ProductionFacts and type(op.scan) is WindowScan
    assert op.production_facts == ProductionFacts(flink_version="2.2.1", agent_uid="agent-1", checkpoint_id="7")
    op.__dict__["hook"] = _Offsets()
    assert op.execute({"run_id": "t1"})["record_count"] == 3
    manifest = load_manifest(tmp_path / "m.json")
    assert (manifest.production.flink_version, manifest.production.savepoint.checkpoint_id) == ("2.2.1", 7)
    assert manifest.production.agent.uid == "agent-1"
    assert (manifest.capture.value_serializer.format, manifest.capture.watermark.idleness_ms) == ("string", 1_000)
    op.scan = WindowScan(expected_records=4)
    with pytest.raises(AirflowException, match="holds 3 records, expected 4"):
        op.execute({"run_id": "t1"})


def test_a_signing_connection_without_a_password_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_AFR_NO_KEY", json.dumps({"conn_type": "generic"}))
    with pytest.raises(AirflowException, match=r"'afr_no_key' has no password.*Fix:"):
        signing_key("afr_no_key")
    assert signing_key(None) is None


def _reuse(tmp_path: Path, existing: str, **kwargs: Any) -> ReuseManifestOperator:
    return ReuseManifestOperator(
        task_id="reuse_manifest",
        existing_manifest=existing,
        manifest_uri=f"file://{tmp_path}/runs/gate/t2/manifest.json",
        check_savepoint=False,
        **kwargs,
    )


@pytest.mark.parametrize(
    "existing",
    [
        "http://127.0.0.1:9/runs/gate/t1/manifest.json",  # port 9 (discard): nothing is fetched anyway
        "https://example.invalid/manifest.json",
        "{tmp}/elsewhere/manifest.json",
        "file://{tmp}/runs/../elsewhere/manifest.json",
    ],
)
def test_reuse_refuses_a_manifest_from_outside_manifest_sources(tmp_path: Path, existing: str) -> None:
    (tmp_path / "elsewhere").mkdir()
    save_manifest(ReplayManifest.parse(_data(), verify=False), tmp_path / "elsewhere" / "manifest.json")
    op = _reuse(tmp_path, existing.format(tmp=tmp_path), manifest_sources=[f"file://{tmp_path}/runs"])
    with pytest.raises(AirflowFailException) as err:  # a retry cannot change it: no retry
        op.execute({"run_id": "t2"})
    message = str(err.value)
    assert message.startswith("existing_manifest ") and "Fix:" in message
    assert ("outside manifest_sources" in message and "runs_uri" in message) or "'..' segment" in message
    assert not (tmp_path / "runs" / "gate" / "t2" / "manifest.json").exists()


def test_reuse_from_the_runs_location_signs_the_new_manifest(tmp_path: Path, signing_conn: str) -> None:
    earlier = tmp_path / "runs" / "gate" / "t1" / "manifest.json"
    save_manifest(ReplayManifest.parse(_data(), verify=False), earlier, signing_key=KEY)
    result = _reuse(tmp_path, f"file://{earlier}", signing_conn_id=signing_conn).execute({"run_id": "t2"})
    again = load_manifest(result["uri"], signing_key=KEY)
    assert again.reused_from is not None and again.signature and KEY not in json.dumps(result)
    # default sources (no list given): the folder holding this run's folder, i.e. runs/gate
    assert _reuse(tmp_path, str(earlier)).allowed_sources() == [f"file://{tmp_path}/runs/gate"]


def test_reuse_with_a_key_refuses_an_unsigned_or_re_digested_manifest(tmp_path: Path, signing_conn: str) -> None:
    earlier = tmp_path / "runs" / "gate" / "t1" / "manifest.json"
    save_manifest(ReplayManifest.parse(_data(), verify=False), earlier)
    with pytest.raises(AirflowFailException, match="signature: missing"):
        _reuse(tmp_path, str(earlier), signing_conn_id=signing_conn).execute({"run_id": "t2"})
    save_manifest(ReplayManifest.parse(_data(), verify=False), earlier, signing_key=KEY)
    doc = json.loads(earlier.read_text())
    doc["production"]["savepoint"]["path"] = "file:///tmp/savepoints/another"
    doc["digest"] = ReplayManifest.model_validate({**doc, "digest": None}).compute_digest()
    earlier.write_text(json.dumps(doc))
    with pytest.raises(AirflowException, match="signature: mismatch"):
        _reuse(tmp_path, str(earlier), signing_conn_id=signing_conn).execute({"run_id": "t2"})
    # without a key the same (re-digested) file passes the digest check: the signature is the defence
    assert _reuse(tmp_path, str(earlier)).execute({"run_id": "t2"})["savepoint_path"].endswith("another")


def _forged_under(cwd: Path, host: str, genuine: Path) -> None:
    """A forged manifest where fsspec reads ``file://<host><genuine>`` from: ``<cwd>/<host>/<genuine>``."""
    doc = _data()
    doc["production"]["savepoint"]["path"] = "file:///tmp/savepoints/forged"
    save_manifest(ReplayManifest.parse(doc, verify=False), cwd / host / str(genuine).lstrip("/"))


def test_reuse_refuses_a_file_url_naming_a_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 42 §1: ``file://somehost/<runs>/…`` passed the check and a forged manifest under the working
    directory was loaded."""
    genuine = tmp_path / "runs" / "gate" / "t1" / "manifest.json"
    save_manifest(ReplayManifest.parse(_data(), verify=False), genuine)
    cwd = tmp_path / "cwd"
    _forged_under(cwd, "somehost", genuine)
    monkeypatch.chdir(cwd)
    op = _reuse(tmp_path, f"file://somehost{genuine}", manifest_sources=[f"file://{tmp_path}/runs"])
    with pytest.raises(AirflowFailException) as err:
        op.execute({"run_id": "t2"})
    message = str(err.value)
    assert message.startswith("existing_manifest ") and "host 'somehost'" in message and "Fix:" in message
    assert not (tmp_path / "runs" / "gate" / "t2" / "manifest.json").exists()


def test_reuse_reads_a_localhost_file_url_from_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    genuine = tmp_path / "runs" / "gate" / "t1" / "manifest.json"
    save_manifest(ReplayManifest.parse(_data(), verify=False), genuine)
    cwd = tmp_path / "cwd"
    _forged_under(cwd, "localhost", genuine)
    monkeypatch.chdir(cwd)
    result = _reuse(tmp_path, f"file://localhost{genuine}").execute({"run_id": "t2"})
    assert result["savepoint_path"] == _data()["production"]["savepoint"]["path"]
