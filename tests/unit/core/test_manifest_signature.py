"""Manifest integrity beyond the digest: the keyed signature (HMAC-SHA256) and where an earlier manifest may
be loaded from. A digest anyone can recompute is no defence against a deliberate edit; the signature is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_flink_replay.core.manifest import ManifestError, ManifestTamperedError, ReplayManifest
from airflow_flink_replay.core.manifest_io import (
    checked_manifest_source,
    is_within,
    load_manifest,
    manifest_source_problems,
    record_isolation,
    save_manifest,
)
from tests.unit.core.test_manifest import _data

KEY = "manifest-hmac-key-0123456789"
GOLDEN = Path(__file__).parents[1] / "data" / "manifest_before_racing_records.json"
LEGACY_SIGNED = Path(__file__).parents[1] / "data" / "manifest_signed_before_isolation_coverage.json"


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


def _edit_isolation_and_redigest(path: Path) -> None:
    """An edit of the isolation section by someone who can write the runs folder but holds no key."""
    doc = json.loads(path.read_text())
    doc["isolation"]["action_state_topics"] = {"baseline": "forged-action-state"}
    doc["digest"] = ReplayManifest.model_validate({**doc, "digest": None}).compute_digest()
    path.write_text(json.dumps(doc))


def test_the_signature_covers_the_isolation_section(tmp_path: Path) -> None:
    """Issue 42 §11: an edit of the isolation section, re-digested, used to keep the signature valid."""
    path = tmp_path / "m.json"
    save_manifest(ReplayManifest.parse(_data(), verify=False), path, signing_key=KEY)
    record_isolation(path, signing_key=KEY, production_action_state_topic="prod-as",
                     action_state_topics={"baseline": "t1"})
    _edit_isolation_and_redigest(path)
    assert load_manifest(path).isolation.action_state_topics == {"baseline": "forged-action-state"}  # digest only
    with pytest.raises(ManifestTamperedError, match="signature: mismatch"):
        load_manifest(path, signing_key=KEY)


def test_recording_the_isolation_re_signs_with_the_key(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    signed = save_manifest(ReplayManifest.parse(_data(), verify=False), path, signing_key=KEY)
    updated = record_isolation(
        path, signing_key=KEY, production_action_state_topic="prod-as", action_state_topics={"baseline": "t1"}
    )
    assert updated.digest != signed.digest and updated.signature != signed.signature
    loaded = load_manifest(path, signing_key=KEY)
    assert loaded.isolation.action_state_topics == {"baseline": "t1"} and loaded.signature_covers_isolation
    assert KEY not in path.read_text()


def test_recording_the_isolation_verifies_the_signature_before_re_signing(tmp_path: Path) -> None:
    """The step that re-signs must not launder an edit made since the manifest was written."""
    path = tmp_path / "m.json"
    save_manifest(ReplayManifest.parse(_data(), verify=False), path, signing_key=KEY)
    _tamper_and_reseal(path)
    before = path.read_text()
    with pytest.raises(ManifestTamperedError, match="signature: mismatch"):
        record_isolation(path, signing_key=KEY, action_state_topics={"baseline": "t1"})
    assert path.read_text() == before


def test_recording_the_isolation_of_a_signed_manifest_without_the_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    save_manifest(ReplayManifest.parse(_data(), verify=False), path, signing_key=KEY)
    before = path.read_text()
    with pytest.raises(ManifestError) as err:
        record_isolation(path, action_state_topics={"baseline": "t1"})
    assert "signing key" in str(err.value) and "Fix:" in str(err.value) and "signing_conn_id" in str(err.value)
    assert path.read_text() == before
    unsigned = tmp_path / "u.json"  # an unsigned manifest is recorded into without a key, as before
    save_manifest(ReplayManifest.parse(_data(), verify=False), unsigned)
    assert record_isolation(unsigned, action_state_topics={"baseline": "t1"}).signature is None


def test_a_manifest_signed_before_the_isolation_was_covered_verifies_as_before_and_says_so(tmp_path: Path) -> None:
    """data/manifest_signed_before_isolation_coverage.json was signed (key ``KEY``) and had its isolation recorded
    by the code before issue 42: its signature leaves the isolation section out. It still verifies with the key,
    and the manifest says that its isolation section is not covered."""
    legacy = load_manifest(LEGACY_SIGNED, signing_key=KEY)
    assert legacy.signature_covers_isolation is False
    assert "isolation not covered" in legacy.summary()
    path = tmp_path / "m.json"
    path.write_text(LEGACY_SIGNED.read_text())
    _edit_isolation_and_redigest(path)
    assert load_manifest(path, signing_key=KEY).isolation.action_state_topics == {"baseline": "forged-action-state"}
    _tamper_and_reseal(path)  # everything else stays covered
    with pytest.raises(ManifestTamperedError, match="signature: mismatch"):
        load_manifest(path, signing_key=KEY)
    path.write_text(LEGACY_SIGNED.read_text())  # recording the isolation with the key signs it the new way
    assert record_isolation(path, signing_key=KEY, memory_namespaces={"baseline": "ns"}).signature_covers_isolation
    _edit_isolation_and_redigest(path)
    with pytest.raises(ManifestTamperedError, match="signature: mismatch"):
        load_manifest(path, signing_key=KEY)


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
        assert problems[0].startswith("existing_manifest ") and "Fix:" in problems[0]


def test_object_store_prefixes_compare_bucket_and_path() -> None:
    assert is_within("s3://bucket/runs/gate/m.json", "s3://bucket/runs/")
    assert not is_within("s3://other/runs/gate/m.json", "s3://bucket/runs")
    assert not is_within("memory://bucket/runs/m.json", "s3://bucket/runs")
    assert manifest_source_problems("s3://b/x/m.json", ["file:///runs", "s3://b/x"]) == []


@pytest.mark.parametrize(
    ("location", "why"),
    [
        ("file://somehost/runs/gate/t1/manifest.json", "host"),  # fsspec reads <cwd>/somehost/runs/...
        ("file://runs/gate/t1/manifest.json", "host"),
        ("file://user@localhost/runs/gate/t1/manifest.json", "host"),
        ("file://localhost.attacker.example/runs/gate/t1/manifest.json", "host"),
        ("file:///runs/gate/../../etc/manifest.json", "'..'"),
        ("file:///runs/gate/../t1/manifest.json", "'..'"),  # even one that stays inside
        ("/runs/gate/t1/../../../etc/manifest.json", "'..'"),
        ("file:///run%73/gate/manifest.json", "percent-encoded"),  # fsspec does not decode: /run%73/...
        ("file:///runs/gate#/../../../tmp/m.json", "'?' or '#'"),
        ("file:///runs/gate/m.json?x=1", "'?' or '#'"),
        ("file:///runs/x::http://attacker.example/m.json", "'::'"),
        ("file:///runs-evil/gate/manifest.json", "outside manifest_sources"),
        ("s3://bucket-evil/runs/manifest.json", "outside manifest_sources"),
    ],
)
def test_a_manifest_location_read_elsewhere_than_it_reads_is_refused(location: str, why: str) -> None:
    """Issue 42 §1: the host of a file URL was ignored by the check while fsspec read a relative path."""
    problems = manifest_source_problems(location, ["file:///runs", "s3://bucket/runs"])
    assert len(problems) == 1
    assert problems[0].startswith("existing_manifest ") and why in problems[0] and "Fix:" in problems[0]
    with pytest.raises(ManifestError, match="existing_manifest"):
        checked_manifest_source(location, ["file:///runs", "s3://bucket/runs"])


def test_a_checked_location_is_read_where_it_was_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``file://localhost/<path>`` is allowed, and read from ``<path>``, not from ``<cwd>/localhost/<path>``."""
    runs = tmp_path / "runs"
    genuine = save_manifest(ReplayManifest.parse(_data(), verify=False), runs / "gate" / "t1" / "manifest.json")
    cwd = tmp_path / "cwd"
    forged = cwd / "localhost" / str(runs / "gate" / "t1" / "manifest.json").lstrip("/")
    doc = _data()
    doc["production"]["savepoint"]["path"] = "file:///tmp/forged-savepoint"
    save_manifest(ReplayManifest.parse(doc, verify=False), forged)
    monkeypatch.chdir(cwd)
    source = checked_manifest_source(f"file://localhost{runs}/gate/t1/manifest.json", [f"file://{runs}"])
    assert source == str(runs / "gate" / "t1" / "manifest.json")
    assert load_manifest(source) == genuine
    assert checked_manifest_source("s3://bucket/runs/gate/m.json", ["s3://bucket/runs"]) == "s3://bucket/runs/gate/m.json"


def test_a_symlink_out_of_the_allowed_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "runs" / "gate").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    save_manifest(ReplayManifest.parse(_data(), verify=False), tmp_path / "elsewhere" / "manifest.json")
    (tmp_path / "runs" / "gate" / "t1").symlink_to(tmp_path / "elsewhere")
    problems = manifest_source_problems(f"{tmp_path}/runs/gate/t1/manifest.json", [f"file://{tmp_path}/runs"])
    assert problems and "outside manifest_sources" in problems[0]
