"""Resource fingerprints (:mod:`airflow_flink_replay.flink.fingerprint`): what the agent check compares to tell
which resources a candidate changed. A tool's code digests alike under any module name (a replay imports a
candidate's package under a content-hashed one) and whatever its comments, docstring or line numbers; a changed
body, default, same-module helper or constant digests otherwise; a prompt by its text; a descriptor resource by
its class's code and its arguments, never by a memory address. The providers are stand-ins with the attributes
Flink Agents' providers have (tests/integration/test_agent_check.py fingerprints real plans)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from airflow_flink_replay.flink.fingerprint import (
    DIGEST_CHARS,
    class_fingerprint,
    function_fingerprint,
    provider_fingerprint,
)

TOOLS = '''
"""A tool module."""

RATE = 0.2
KINDS = frozenset({"label", "parcel", "letter", "box"})


def shipping_cost(weight: float) -> float:
    return round(weight * RATE, 2)


class Agent:
    @staticmethod
    def shipping_label(order: str, weight: float = 1.0) -> str:
        """Print a shipping label for an order."""
        kind = "parcel" if weight > 0.5 else "letter"
        assert kind in KINDS
        return f"label {order} ({kind}, {shipping_cost(weight)})"


class Model:
    """A resource class: its methods are its code."""

    def chat(self, text: str) -> str:
        return text.upper()
'''


@pytest.fixture
def load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Write ``source`` as module ``name`` of a package of its own and import it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded: list[str] = []

    def _load(name: str, source: str) -> ModuleType:
        package, module = name.split(".")
        folder = tmp_path / package
        folder.mkdir(exist_ok=True)
        (folder / "__init__.py").touch()
        (folder / f"{module}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()
        loaded.append(name)
        return importlib.import_module(name)

    yield _load
    for name in loaded:
        sys.modules.pop(name, None)
        sys.modules.pop(name.split(".")[0], None)


def _tool(module: ModuleType) -> str:
    return function_fingerprint(module.Agent.shipping_label)


def test_the_same_tool_under_two_module_names_digests_alike(load: Any) -> None:
    production = load("prod_pkg.tools", TOOLS)
    isolated = load("afr_build_0123456789abcdef.tools", TOOLS)  # what a replay's content-hashed import does
    assert _tool(production) == _tool(isolated)
    assert len(_tool(production)) == DIGEST_CHARS
    assert class_fingerprint(production.Model) == class_fingerprint(isolated.Model)


def test_comments_line_numbers_and_the_docstring_do_not_count(load: Any) -> None:
    production = load("prod_pkg.tools", TOOLS)
    comment = '\n\n        # parcels above half a kilo\n        kind = "parcel"'
    commented = TOOLS.replace('        kind = "parcel"', comment)
    commented = commented.replace("Print a shipping label for an order.", "Prints the label (the model reads this).")
    assert commented != TOOLS
    assert _tool(load("cand_pkg.tools", commented)) == _tool(production)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('return f"label {order}', 'return f"LABEL {order}'),  # the body returns another string
        ("weight > 0.5", "weight >= 0.5"),  # another comparison
        ("weight: float = 1.0", "weight: float = 2.0"),  # a default
        ("weight * RATE, 2", "weight * RATE, 3"),  # a same-module helper the tool calls
        ("RATE = 0.2", "RATE = 0.25"),  # a same-module constant the helper reads
        ('"letter", "box"', '"letter", "crate"'),  # a same-module set it tests against
    ],
)
def test_a_change_to_the_tool_or_what_it_reaches_in_its_module_changes_the_digest(
    load: Any, old: str, new: str
) -> None:
    assert old in TOOLS
    assert _tool(load("cand_pkg.tools", TOOLS.replace(old, new))) != _tool(load("prod_pkg.tools", TOOLS))


def test_a_set_constant_digests_alike_in_every_interpreter() -> None:
    """A frozenset's order follows string hashing, which differs per process: its items are sorted."""
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from airflow_flink_replay.flink.fingerprint import function_fingerprint\n"
        "def tool(kind):\n    return kind in {'label', 'parcel', 'letter', 'box', 'crate', 'pallet'}\n"
        "print(function_fingerprint(tool))"
    )
    root = str(Path(__file__).resolve().parents[3])
    runs = [
        subprocess.run([sys.executable, "-c", script, root], env={"PYTHONHASHSEED": seed}, check=True,
                       capture_output=True, text=True)
        for seed in ("1", "2", "3")
    ]  # fmt: skip
    digests = {run.stdout for run in runs}
    assert len(digests) == 1


def _function_tool(module: str, qualname: str) -> Any:
    """A ``PythonSerializableResourceProvider`` of a ``FunctionTool``, as Flink Agents serialises one."""
    func = {"func_type": "PythonFunction", "module": module, "qualname": qualname}
    return SimpleNamespace(name="shipping_label", module="flink_agents.plan.tools.function_tool", clazz="FunctionTool",
                           serialized={"metadata": {"name": "shipping_label"}, "func": func})  # fmt: skip


def test_a_function_tool_provider_digests_its_function_s_code(load: Any) -> None:
    load("prod_pkg.tools", TOOLS)
    load("cand_pkg.tools", TOOLS.replace('f"label', 'f"Label'))
    load("same_pkg.tools", TOOLS)
    production = provider_fingerprint(_function_tool("prod_pkg.tools", "Agent.shipping_label"))
    assert production == provider_fingerprint(_function_tool("same_pkg.tools", "Agent.shipping_label"))
    assert production != provider_fingerprint(_function_tool("cand_pkg.tools", "Agent.shipping_label"))


def _prompt(system: str) -> Any:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "{input}"}]
    return SimpleNamespace(module="flink_agents.api.prompts.prompt", clazz="LocalPrompt",
                           serialized={"template": messages})  # fmt: skip


def test_a_prompt_digests_its_text() -> None:
    one_to_five = provider_fingerprint(_prompt("a satisfaction score (1-5)"))
    assert one_to_five == provider_fingerprint(_prompt("a satisfaction score (1-5)"))
    assert one_to_five != provider_fingerprint(_prompt("a satisfaction score (1-10)"))


class _Config:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def get_config_data_by_prefix(self, prefix: str) -> dict[str, Any]:
        return dict(self.data.get(prefix, {}))


class _Opaque:
    """An argument whose repr holds its address."""


def _descriptor(module: str, clazz: str, **arguments: Any) -> Any:
    descriptor = SimpleNamespace(target_module=module, target_clazz=clazz, arguments=arguments)
    return SimpleNamespace(name="review_model", descriptor=descriptor)


def test_a_descriptor_resource_digests_its_class_code_and_arguments_but_no_address(load: Any) -> None:
    load("prod_pkg.tools", TOOLS)
    load("afr_build_0123456789abcdef.tools", TOOLS)
    load("cand_pkg.tools", TOOLS.replace("text.upper()", "text.lower()"))
    base = provider_fingerprint(_descriptor("prod_pkg.tools", "Model", model="qwen3:8b", extra=_Opaque()))
    assert base == provider_fingerprint(
        _descriptor("afr_build_0123456789abcdef.tools", "Model", model="qwen3:8b", extra=_Opaque())
    )
    assert base != provider_fingerprint(_descriptor("prod_pkg.tools", "Model", model="qwen3:14b", extra=_Opaque()))
    assert base != provider_fingerprint(_descriptor("cand_pkg.tools", "Model", model="qwen3:8b", extra=_Opaque()))
    # the agent configuration's entries for the class are arguments too
    configured = provider_fingerprint(_descriptor("prod_pkg.tools", "Model", extra=_Opaque()),
                                      _Config({"Model": {"model": "qwen3:8b"}}))  # fmt: skip
    assert configured == base


def test_a_class_that_cannot_be_imported_digests_its_name_and_arguments() -> None:
    java = _descriptor("org.example.chat", "JavaChatModel", java_clazz="org.example.Chat")
    assert provider_fingerprint(java) == provider_fingerprint(
        _descriptor("org.example.chat", "JavaChatModel", java_clazz="org.example.Chat")
    )
    assert provider_fingerprint(java) != provider_fingerprint(
        _descriptor("org.example.chat", "JavaChatModel", java_clazz="org.example.Other")
    )


def test_an_unknown_provider_has_no_fingerprint() -> None:
    assert provider_fingerprint(SimpleNamespace(name="x")) is None
