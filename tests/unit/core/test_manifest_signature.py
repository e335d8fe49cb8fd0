"""Manifest integrity beyond the digest: the keyed signature (HMAC-SHA256) and where an earlier manifest may
be loaded from. A digest anyone can recompute is no defence against a deliberate edit; the signature is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_flink_replay.core.manifest import ManifestError, ManifestTamperedError, ReplayManifest
from airflow_flink_replay.core.manifest_io import (
    is_within,
    load_manifest,
    manifest_source_problems,
    record_isolation,
    save_manifest,
)
from tests.unit.core.test_manifest import _data

KEY = "manifest-hmac-key-0123456789"
GOLDEN = Path(__file__).parents[1] / "data" / "manifest_before_racing_records.json"


def _tamper_and_reseal(path: Path) -> None:
    """What someone with write access to the runs folder does: edit the window, recompute the sha256."""
    doc = json.loads(path.read_text())
    doc["capture"]["partitions"][0]["end_offset"] += 100
    edited = ReplayManifest.model_validate({**doc, "digest": None})
    doc["digest"] = edited.compute_digest()
    path.write_text(json.dumps(doc))


def test_a_signed_manifest_verifies_with_its_key_only(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    signed = save_manifest(ReplayManifest.parse(_data(), verify=False), path, signing_key=KEY)
    assert signed.signature and signed.signature.startswith("hmac-sha256:") and KEY not in path.read_text()
    assert load_manifest(path, signing_key=KEY) == signed
    assert load_manifest(path) == signed  # without a key the digest alone is checked
    with pytest.raises(ManifestTamperedError, match="signature: mismatch"):
        load_manifest(path, signing_key="another-key")
    with pytest.raises(ManifestError, match="key is empty"):
        signed.compute_signature("")


def test_a_digest_recomputed_after_an_edit_passes_the_digest_but_not_the_signature(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    save_manifest(ReplayManifest.parse(_data(), verify=False), path, signing_key=KEY)
    _tamper_and_reseal(path)
    assert load_manifest(path).capture.partitions[0].end_offset == 106  # the digest no longer notices
    with pytest.raises(ManifestTamperedError) as err:
        load_manifest(path, signing_key=KEY)
    assert "signature: mismatch" in str(err.value) and "Fix:" in str(err.value)


def test_stripping_the_signature_does_not_get_past_a_configured_key(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    save_manifest(ReplayManifest.parse(_data(), verify=False), path, signing_key=KEY)
    doc = json.loads(path.read_text())
    doc["signature"] = None
    path.write_text(json.dumps(doc))
    load_manifest(path)  # the digest does not cover the signature: unsigned, and fine without a key
    with pytest.raises(ManifestTamperedError, match="signature: missing"):
        load_manifest(path, signing_key=KEY)


def test_unsigned_and_old_manifests_still_load_without_a_key(tmp_path: Path) -> None:
    unsigned = save_manifest(ReplayManifest.parse(_data(), verify=False), tmp_path / "u.json")
    assert unsigned.signature is None and load_manifest(tmp_path / "u.json") == unsigned
    old = load_manifest(GOLDEN)  # sealed before signatures existed: its digest is unchanged
    assert old.signature is None and old.digest == json.loads(GOLDEN.read_text())["digest"]
    with pytest.raises(ManifestTamperedError, match="signature: missing"):
        load_manifest(GOLDEN, signing_key=KEY)


def test_the_isolation_recorded_later_keeps_the_signature_valid(tmp_path: Path) -> None:
    """The action-state step records its topics and re-seals without the key: the signature does not cover
    the isolation section, everything a replay reads stays covered."""
    path = tmp_path / "m.json"
    signed = save_manifest(ReplayManifest.parse(_data(), verify=False), path, signing_key=KEY)
    updated = record_isolation(path, production_action_state_topic="prod-as", action_state_topics={"baseline": "t1"})
    assert updated.digest != signed.digest and updated.signature == signed.signature
    assert load_manifest(path, signing_key=KEY).isolation.action_state_topics == {"baseline": "t1"}


def test_a_reused_manifest_is_signed_afresh() -> None:
    earlier = ReplayManifest.parse(_data(), verify=False).signed(KEY)
    reused = earlier.for_reuse("later")
    assert reused.signature is None and reused.digest is None
    again = reused.signed(KEY)
    again.verify_signature(KEY)
    assert again.signature != earlier.signature


@pytest.mark.parametrize(
    ("location", "inside"),
    [
        ("file:///runs/gate/t1/manifest.json", True),
        ("/runs/gate/t1/manifest.json", True),
        ("file:/runs/gate/t1/manifest.json", True),
        ("http://attacker.example/runs/manifest.json", False),
        ("https://attacker.example/runs/gate/t1/manifest.json", False),
        ("file:///elsewhere/manifest.json", False),
        ("file:///runs-other/manifest.json", False),  # a prefix of the name is not the folder
        ("file:///runs/../etc/manifest.json", False),
        ("s3://bucket/runs/manifest.json", False),
    ],
)
def test_where_an_earlier_manifest_may_come_from(location: str, inside: bool) -> None:
    assert is_within(location, "file:///runs") is inside
    problems = manifest_source_problems(location, ["file:///runs"])
    assert (problems == []) is inside
    if not inside:
        assert "manifest_sources" in problems[0] and "Fix:" in problems[0]


def test_object_store_prefixes_compare_bucket_and_path() -> None:
    assert is_within("s3://bucket/runs/gate/m.json", "s3://bucket/runs/")
    assert not is_within("s3://other/runs/gate/m.json", "s3://bucket/runs")
    assert not is_within("memory://bucket/runs/m.json", "s3://bucket/runs")
    assert manifest_source_problems("s3://b/x/m.json", ["file:///runs", "s3://b/x"]) == []
