"""v2 of the review agent is v1 plus what changed: the two ``agent.py`` declare the same agent (they differ
in docstrings only; the shared behaviour is ``common/triage.py``), and the prompts differ by the late-delivery
rule. Read from the source: Flink Agents is not installed on the Airflow side.

(Both versions' outputs before and after the move to ``common/triage.py`` were compared on 40 generated
reviews with Flink Agents' local runner: identical.)
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3] / "examples" / "review_agent"


def _without_docstrings(path: Path) -> str:
    """The module's syntax tree without its own docstring and ``build_agent``'s (they name the version); the
    tool's docstring stays: it is the tool description the model sees."""
    tree = ast.parse(path.read_text())
    factory = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "build_agent")
    for node in (tree, factory):
        assert isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
        node.body = node.body[1:]
    return ast.dump(tree)


def test_v2_agent_declares_what_v1_declares() -> None:
    assert _without_docstrings(ROOT / "v1" / "agent.py") == _without_docstrings(ROOT / "v2" / "agent.py")


def test_the_versions_differ_by_their_prompt() -> None:
    v1 = (ROOT / "v1" / "prompts.py").read_text().splitlines()
    v2 = (ROOT / "v2" / "prompts.py").read_text().splitlines()
    assert [line for line in v2[1:] if line not in v1] == ["Reviews mentioning 'late delivery' are negative."]
    assert all(line in v2 for line in v1[1:])
