"""Manifests saved and loaded through URIs (file://, fsspec, Airflow's ObjectStoragePath), verified on load;
the savepoint existence check; isolation recorded into a stored manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_flink_replay.core.manifest import ManifestError, ManifestTamperedError, ReplayManifest
from airflow_flink_replay.core.manifest_io import load_manifest, save_manifest, savepoint_problems
from tests.unit.core.test_manifest import _data


def test_round_trip_through_a_file_uri(tmp_path: Path) -> None:
    manifest = ReplayManifest.parse(_data(), verify=False)
    uri = f"file://{tmp_path}/runs/r1/manifest.json"
    sealed = save_manifest(manifest, uri)
    assert sealed.digest and sealed.digest.startswith("sha256:")
    loaded = load_manifest(uri)
    assert loaded == sealed
    assert loaded.capture.record_count == 7
    assert [w.partition for w in loaded.capture.partitions] == [0, 1]  # canonical order
    assert loaded.capture.start_offsets() == {0: 3, 1: 5}
    assert loaded.capture.end_offsets() == {0: 6, 1: 9}
    assert loaded.capture.key_serializer.format == "string"
    # plain paths and Path objects work too
    save_manifest(manifest, tmp_path / "p.json")
    assert load_manifest(str(tmp_path / "p.json")) == sealed


def test_round_trip_through_an_fsspec_uri_and_an_object_storage_path(tmp_path: Path) -> None:
    """Object stores go through fsspec URIs or Airflow's ObjectStoragePath; fsspec's in-memory filesystem
    stands in for s3:// here (a real object store does not run on this machine)."""
    from airflow.sdk import ObjectStoragePath

    manifest = ReplayManifest.parse(_data(), verify=False)
    sealed = save_manifest(manifest, "memory://replay-runs/r1/manifest.json")
    assert load_manifest("memory://replay-runs/r1/manifest.json") == sealed
    path = ObjectStoragePath(f"file://{tmp_path}/r2/manifest.json")  # the object-storage code path
    assert save_manifest(manifest, path) == sealed
    assert json.loads(path.read_text())["digest"] == sealed.digest
    assert load_manifest(path) == sealed
    with pytest.raises(ManifestError, match="not found"):
        load_manifest("memory://replay-runs/missing/manifest.json")


def test_tampered_file_fails_validation(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    save_manifest(ReplayManifest.parse(_data(), verify=False), path)
    doc = json.loads(path.read_text())
    doc["capture"]["partitions"][0]["record_count"] = 2
    path.write_text(json.dumps(doc))
    with pytest.raises(ManifestTamperedError, match=r"digest: mismatch .* \(tampered or edited by hand\)"):
        load_manifest(path)
    assert load_manifest(path, verify=False).capture.partitions[0].record_count == 2


def test_savepoint_existence_check(tmp_path: Path) -> None:
    data = _data()
    data["production"]["savepoint"]["path"] = f"file://{tmp_path}/sp"
    m = ReplayManifest.parse(data, verify=False)
    assert "missing savepoint" in savepoint_problems(m)[0]
    (tmp_path / "sp").mkdir()
    (tmp_path / "sp" / "_metadata").write_bytes(b"x")
    assert savepoint_problems(m) == []
    flink_style = m.model_copy(
        update={
            "production": m.production.model_copy(
                update={"savepoint": m.production.savepoint.model_copy(update={"path": f"file:{tmp_path}/sp"})}
            )
        }
    )
    assert savepoint_problems(flink_style) == []  # Flink reports savepoints as file:/path


def test_record_isolation_merges_and_reseals(tmp_path: Path) -> None:
    from airflow_flink_replay.core.manifest_io import record_isolation

    path = tmp_path / "m.json"
    first = save_manifest(ReplayManifest.parse(_data(), verify=False), path)
    record_isolation(path, production_action_state_topic="prod-as", action_state_topics={"baseline": "rp-b"})
    after = record_isolation(path, action_state_topics={"candidate": "rp-c"}, memory_namespaces={"candidate": "ns"})
    loaded = load_manifest(path)
    assert loaded == after and loaded.digest != first.digest
    assert loaded.isolation.action_state_topics == {"baseline": "rp-b", "candidate": "rp-c"}
    assert loaded.isolation.memory_namespaces == {"candidate": "ns"}
    with pytest.raises(ManifestError, match="would use production's action-state topic"):
        record_isolation(path, action_state_topics={"candidate": "prod-as"})
    assert load_manifest(path) == after  # a refused update leaves the file as it was
