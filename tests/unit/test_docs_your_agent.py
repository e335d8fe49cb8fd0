"""docs/your-agent.md: every code block is a file of the test package or a shell block the quickstart's
integration tests run (tests/integration/test_quickstart_agent.py, test_pipeline_agents.py); a block that drifts
fails here."""

from __future__ import annotations

import pytest

from airflow_flink_replay.cli import build_parser
from tests.doc_blocks import ROOT, fenced_blocks, shell_commands

PAGE = ROOT / "docs" / "your-agent.md"


def test_every_block_is_marked_with_how_it_is_tested() -> None:
    blocks = fenced_blocks(PAGE)  # raises on an unmarked block
    assert [(b.kind, b.lang) for b in blocks if b.kind == "file"] == [("file", "python")] * 3
    assert [(b.target, b.lang) for b in blocks if b.kind == "run"] == [
        ("deploy", "bash"), ("gate", "bash"), ("pipeline-deploy", "bash"), ("pipeline-gate", "bash")
    ]


@pytest.mark.parametrize("block", [b for b in fenced_blocks(PAGE) if b.kind == "file"], ids=lambda b: b.target)
def test_a_file_block_is_the_whole_file(block) -> None:
    path = ROOT / block.target
    assert path.is_file(), f"docs/your-agent.md:{block.line} shows {block.target}, which does not exist"
    assert block.text == path.read_text(encoding="utf-8"), (
        f"docs/your-agent.md:{block.line} differs from {block.target}: copy the file into the block"
    )


@pytest.mark.parametrize("block", [b for b in fenced_blocks(PAGE) if b.kind == "run"], ids=lambda b: b.target)
def test_the_cli_accepts_every_command_of_a_run_block(block) -> None:
    """The integration test runs these blocks on the stack; this catches a renamed command or option at once."""
    commands = [c for c in shell_commands(block.text) if c[0].endswith("flink-replay")]
    assert commands, block.text
    parser = build_parser()
    for words in commands:
        try:
            parser.parse_args(words[1:])
        except SystemExit:
            pytest.fail(f"docs/your-agent.md:{block.line}: flink-replay refuses {' '.join(words)!r}")


def test_the_index_links_the_page() -> None:
    assert "(your-agent.md)" in (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
