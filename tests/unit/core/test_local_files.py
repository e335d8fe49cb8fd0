"""Writing a local file without following what someone planted at its name (``core/local_files.py``): a fresh
temporary file renamed over the name, so a link planted there is replaced (its target untouched) and a failed
write leaves the old file as it was."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_flink_replay.core.local_files import replacing, write_replacing


def leftovers(folder: Path) -> list[str]:
    """Temporary files a write left in ``folder``."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_new_file_gets_the_text_and_the_mode_a_new_file_gets(tmp_path: Path, umask_022: None) -> None:
    target = tmp_path / "report.html"
    write_replacing(target, "<p>verdict: PASS ✓</p>\n")
    assert target.read_bytes() == "<p>verdict: PASS ✓</p>\n".encode()
    assert target.stat().st_mode & 0o777 == 0o644
    assert leftovers(tmp_path) == []


def test_an_existing_file_is_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    target.write_text("x" * 1000)
    write_replacing(target, "{}")
    assert target.read_text() == "{}"


def test_a_symlink_planted_at_the_name_is_replaced_and_its_target_left_as_it_was(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file")
    target = tmp_path / "report.html"
    target.symlink_to(victim)
    write_replacing(target, "the report")
    assert not target.is_symlink() and target.read_text() == "the report"
    assert victim.read_text() == "someone else's file"


def test_a_dangling_symlink_at_the_name_does_not_create_its_target(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.symlink_to(tmp_path / "created-through-the-link")
    write_replacing(target, "the report")
    assert target.read_text() == "the report" and not (tmp_path / "created-through-the-link").exists()


def test_a_hard_link_at_the_name_is_replaced_and_the_other_name_keeps_its_content(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file")
    target = tmp_path / "record.json"
    os.link(victim, target)
    write_replacing(target, "the record")
    assert target.read_text() == "the record" and victim.read_text() == "someone else's file"
    assert not os.path.samefile(target, victim)


def test_an_error_inside_the_block_leaves_the_old_file_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "outputs.jsonl"
    target.write_text("old line\n")
    with pytest.raises(RuntimeError, match="failed half way"), replacing(target) as fh:
        fh.write("new line 1\n")
        raise RuntimeError("failed half way")
    assert target.read_text() == "old line\n"
    assert leftovers(tmp_path) == []


def test_the_file_appears_only_when_the_block_ends(tmp_path: Path) -> None:
    target = tmp_path / "outputs.jsonl"
    with replacing(target) as fh:
        fh.write("line\n")
        fh.flush()
        assert not target.exists()
        assert len(leftovers(tmp_path)) == 1 and leftovers(tmp_path)[0].startswith(".outputs.jsonl.")
    assert target.read_text() == "line\n" and leftovers(tmp_path) == []


def test_text_utf8_cannot_hold_is_refused_by_default_and_written_escaped_when_asked(tmp_path: Path) -> None:
    target = tmp_path / "report.txt"
    target.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        write_replacing(target, "lone \ud800 surrogate")
    assert target.read_text() == "old" and leftovers(tmp_path) == []
    write_replacing(target, "lone \ud800 surrogate", errors="backslashreplace")
    assert target.read_text() == "lone \\ud800 surrogate"


def test_a_folder_at_the_name_is_not_replaced(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.mkdir()
    (target / "inside").write_text("kept")
    with pytest.raises(OSError):
        write_replacing(target, "the report")
    assert (target / "inside").read_text() == "kept" and leftovers(tmp_path) == []


def test_a_missing_folder_is_an_error_not_a_new_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_replacing(tmp_path / "no-such-folder" / "report.html", "x")
    assert not (tmp_path / "no-such-folder").exists()
