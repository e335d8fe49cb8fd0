"""agent_build: every submitted agent build gets a module name of its own content, so two builds cannot mix.

A TaskManager runs all jobs in one Python interpreter: a module imported by the baseline stays in
``sys.modules`` and a candidate whose package has the SAME name would silently run the baseline's code.
These tests load two builds of one package name with different content, in one interpreter.
"""

from __future__ import annotations

import importlib
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_flink_replay.flink.agent_build import isolate_runtime, load_agent_factory

AGENT = '''
from .prompts import PROMPT


def build_agent(**options):
    """The agent's behaviour: its prompt (relative import inside the package)."""
    return {"prompt": PROMPT, "module": __name__}
'''


def _write_build(root: Path, package: str, prompt: str) -> Path:
    pkg = root / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "agent.py").write_text(AGENT)
    (pkg / "prompts.py").write_text(f"PROMPT = {prompt!r}\n")
    return root


@pytest.fixture
def package() -> Iterator[str]:
    """A fresh package name; sys.path and sys.modules are restored afterwards."""
    name = f"afr_test_agent_{uuid.uuid4().hex[:8]}"
    path, modules = list(sys.path), set(sys.modules)
    yield name
    sys.path[:] = path
    for mod in set(sys.modules) - modules:
        del sys.modules[mod]
    importlib.invalidate_caches()


def _load(src_root: Path, package: str, build_root: Path, *, isolate: bool = True):
    """Load ``package.agent:build_agent`` with ``src_root`` (and only it) providing ``package``."""
    sys.path[:] = [p for p in sys.path if not p.startswith(str(src_root.parent))]
    sys.path.insert(0, str(src_root))
    importlib.invalidate_caches()
    return load_agent_factory(f"{package}.agent:build_agent", isolate=isolate, build_root=build_root)


def test_same_content_gets_the_same_module_name(tmp_path: Path, package: str) -> None:
    a = _load(_write_build(tmp_path / "src-a", package, "v1 prompt"), package, tmp_path / "builds")
    b = _load(_write_build(tmp_path / "src-b", package, "v1 prompt"), package, tmp_path / "builds")
    assert a.module == b.module and a.module.startswith("afr_build_") and a.module.endswith(".agent")
    assert a.factory is b.factory
    assert a.build_root == tmp_path / "builds" and (a.build_root / a.module.split(".")[0] / "agent.py").is_file()


def test_edited_content_gets_a_different_module_name(tmp_path: Path, package: str) -> None:
    a = _load(_write_build(tmp_path / "src-a", package, "v1 prompt"), package, tmp_path / "builds")
    b = _load(_write_build(tmp_path / "src-b", package, "v2 prompt"), package, tmp_path / "builds")
    assert a.module != b.module
    assert {a.module.split(".")[0], b.module.split(".")[0]} <= {p.name for p in (tmp_path / "builds").iterdir()}


def test_two_builds_of_one_package_name_run_side_by_side(tmp_path: Path, package: str) -> None:
    a = _load(_write_build(tmp_path / "src-a", package, "v1 prompt"), package, tmp_path / "builds")
    b = _load(_write_build(tmp_path / "src-b", package, "v2 prompt"), package, tmp_path / "builds")
    # both stay loaded in this one interpreter, each with its own code (relative imports follow the copy)
    assert a.module in sys.modules and b.module in sys.modules
    assert a.factory() == {"prompt": "v1 prompt", "module": a.module}
    assert b.factory() == {"prompt": "v2 prompt", "module": b.module}
    # ... and importing them again by name (what the TaskManager does from the plan) gives the same
    assert importlib.import_module(a.module).build_agent()["prompt"] == "v1 prompt"
    assert importlib.import_module(b.module).build_agent()["prompt"] == "v2 prompt"


def test_without_isolation_the_second_build_silently_runs_the_first(tmp_path: Path, package: str) -> None:
    """The hazard the isolation prevents: one interpreter keeps the first module of a name."""
    a = _load(_write_build(tmp_path / "src-a", package, "v1 prompt"), package, tmp_path / "builds", isolate=False)
    b = _load(_write_build(tmp_path / "src-b", package, "v2 prompt"), package, tmp_path / "builds", isolate=False)
    assert a.module == b.module == f"{package}.agent"
    assert b.factory()["prompt"] == "v1 prompt", "the candidate's v2 code never ran"


def test_factory_errors_name_the_problem(tmp_path: Path, package: str) -> None:
    _write_build(tmp_path / "src", package, "p")
    sys.path.insert(0, str(tmp_path / "src"))
    with pytest.raises(ValueError, match="must look like"):
        load_agent_factory("no_colon", build_root=tmp_path / "b")
    with pytest.raises(ValueError, match="must live in a package"):
        load_agent_factory("toplevel:attr", build_root=tmp_path / "b")
    with pytest.raises(ValueError, match="is not importable here"):
        load_agent_factory("afr_no_such_pkg_x.agent:build_agent", build_root=tmp_path / "b")
    with pytest.raises(ValueError, match="has no attribute 'missing'"):
        load_agent_factory(f"{package}.agent:missing", build_root=tmp_path / "b")


def test_runtime_copy_is_content_named_and_self_contained(tmp_path: Path) -> None:
    name = isolate_runtime(tmp_path)
    assert name.startswith("afr_rt_") and isolate_runtime(tmp_path) == name
    # another build of the same code gets its own package: a TaskManager's interpreter never resolves one
    # job's submodule through a package another (ended, deleted) job's files were imported from
    other = isolate_runtime(tmp_path / "other-build")
    assert other != name and other.split("_")[2] == name.split("_")[2]  # same content hash
    proxies = (tmp_path / name / "flink" / "proxies.py").read_text()
    assert f"from {name}.core.policy import" in proxies and "airflow_flink_replay" not in proxies
    assert f"from {name}.exceptions import ReplayPolicyBlocked" in proxies  # the errors module is copied too


def test_a_build_folder_lives_until_the_submitting_program_exits(tmp_path: Path) -> None:
    """The folder of shipped Python files is there while the program runs (it submits from it) and gone
    after it exits: every replay submission used to leave one in the JobManager host's temp folder."""
    import subprocess

    program = (
        "import sys\n"
        "from airflow_flink_replay.flink.agent_build import build_folder, isolate_runtime\n"
        "root = build_folder('afr-build-test-')\n"
        "isolate_runtime(root)\n"
        "assert any(root.iterdir())\n"
        "print(root)\n"
    )
    env = {"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True)
    root = Path(out.stdout.strip())
    assert root.parent == tmp_path and root.name.startswith("afr-build-test-")
    assert not root.exists()
    assert list(tmp_path.iterdir()) == []


def test_without_a_build_folder_a_planted_build_in_the_shared_temp_folder_is_never_imported(
    tmp_path: Path, package: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The content-hashed name is predictable: someone who can write the temp folder plants a build under it
    before the job imports; the import comes from a private fresh folder all the same."""
    import tempfile

    from airflow_flink_replay.flink.agent_build import _package_digest, import_isolated

    src = _write_build(tmp_path / "src", package, "genuine prompt")
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    unique = f"afr_build_{_package_digest(src / package, 'agent')[:16]}"
    planted = shared / "afr-agent-builds" / unique / unique
    planted.mkdir(parents=True)
    marker = tmp_path / "planted-ran.txt"
    (planted / "__init__.py").write_text("")
    (planted / "agent.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n")
    sys.path.insert(0, str(src))
    importlib.invalidate_caches()
    module, root = import_isolated(f"{package}.agent")
    assert not marker.exists()
    assert module.build_agent()["prompt"] == "genuine prompt"
    assert root is not None and root.stat().st_mode & 0o777 == 0o700
    assert root.parent == shared and not (root / unique).is_symlink()
