"""Load a job definition or an agent factory (``"module:attr"``), optionally under a unique, content-hashed
module name (:func:`load_job_definition`, :func:`load_agent_factory`; both through :func:`import_isolated`).

All jobs on a TaskManager share ONE embedded Python interpreter (and its ``sys.modules``): a changed agent
module with the same name is not re-imported until the TaskManager restarts, so a candidate submitted after a
baseline could silently run the baseline's code. With ``isolate=True`` the named module's *package* is copied
into ``<build_root>/afr_build_<sha256 of its files and the module's name>/`` and the definition (or factory)
imported from there: different code gets a different module name, identical code the same one (sharing it is
then harmless). The job ships ``build_root`` with ``env.add_python_file``. Only that package is isolated: the
modules it imports absolutely (shared helpers) must be the same in both builds; relative imports inside the
package follow the copy.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib
import importlib.util
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_flink_replay.flink.agent_job import AgentJob, as_agent_job, resolve_attr


@dataclass(frozen=True)
class AgentBuild:
    """A loaded agent factory and where its code comes from."""

    factory: Callable[..., Any]
    module: str
    build_root: Path | None


def _package_digest(pkg_dir: Path, leaf: str = "") -> str:
    h = hashlib.sha256(leaf.encode() + b"\0")
    for f in sorted(pkg_dir.rglob("*.py")):
        if "__pycache__" in f.parts:
            continue
        h.update(str(f.relative_to(pkg_dir)).encode())
        h.update(b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()


def import_isolated(
    module_name: str, *, isolate: bool = True, build_root: str | Path | None = None
) -> tuple[Any, Path | None]:
    """Import ``module_name``; with ``isolate`` from a content-hashed copy of its package (see the module doc).

    Returns the module and the folder to ship with ``env.add_python_file`` (None without isolation). Without
    ``build_root`` the copy goes into a private fresh folder (:func:`build_folder`), removed when the program
    exits.
    """
    if not isolate:
        return importlib.import_module(module_name), None
    if "." not in module_name:
        raise ValueError(f"module {module_name!r} must live in a package to be isolated")
    package, leaf = module_name.rsplit(".", 1)
    pkg_spec = importlib.util.find_spec(package)
    if pkg_spec is None or not pkg_spec.submodule_search_locations:
        raise ValueError(f"package {package!r} is not importable here")
    pkg_dir = Path(next(iter(pkg_spec.submodule_search_locations)))
    # The module's name is part of the hash: two definitions of one package (my_pkg.v1, my_pkg.v2) get copies of
    # their own. Shared, a TaskManager that imported the package for one resolves the other's module through the
    # first job's folder, which Flink removes when that job ends ("No module named afr_build_....v2").
    unique = f"afr_build_{_package_digest(pkg_dir, leaf)[:16]}"
    # No folder given: a private fresh one (0700), never a predictable shared path — anyone who can write the
    # temp folder could plant a build under the content-hashed name before this import, and it would run.
    root = Path(build_root) if build_root is not None else build_folder("afr-agent-build-")
    dest = root / unique
    if not dest.exists():
        tmp = root / f".{unique}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(pkg_dir, tmp, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        if not (tmp / "__init__.py").exists():
            (tmp / "__init__.py").write_text('"""Isolated agent build."""\n')
        tmp.rename(dest)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module(f"{unique}.{leaf}"), root


def load_agent_factory(factory: str, *, isolate: bool = True, build_root: str | Path | None = None) -> AgentBuild:
    """Resolve ``"package.module:attr"``; with ``isolate`` import it from a content-hashed package copy."""
    if ":" not in factory:
        raise ValueError(f'agent factory {factory!r} must look like "package.module:attribute"')
    module_name, attr = factory.split(":", 1)
    module, root = import_isolated(module_name, isolate=isolate, build_root=build_root)
    return AgentBuild(factory=_attr(module, attr, factory), module=module.__name__, build_root=root)


@dataclass(frozen=True)
class JobBuild:
    """A loaded job definition and where its code comes from."""

    job: AgentJob
    module: str
    build_root: Path | None


def load_job_definition(ref: str, *, isolate: bool = True, build_root: str | Path | None = None) -> JobBuild:
    """Resolve ``"package.module:attr"`` to an :class:`~airflow_flink_replay.flink.agent_job.AgentJob`; with
    ``isolate`` the module is imported from a content-hashed copy of its package, so the definition and the
    agent it names (imported relatively inside the package) get a module name of their own content."""
    if ":" not in ref:
        raise ValueError(f'job definition {ref!r} must look like "package.module:attribute"')
    module_name, attr = ref.split(":", 1)
    module, root = import_isolated(module_name, isolate=isolate, build_root=build_root)
    job = as_agent_job(resolve_attr(module, attr, f"job definition {ref}"), ref)
    return JobBuild(job=job, module=module.__name__, build_root=root)


def _attr(module: Any, attr: str, factory: str) -> Callable[..., Any]:
    obj = resolve_attr(module, attr, f"agent factory {factory}")
    if not callable(obj):
        raise ValueError(f"agent factory {factory!r} is not callable")
    return obj


#: Modules of this package the TaskManager's embedded interpreter imports (policy proxies, audit hook).
_RUNTIME_FILES = (
    "__init__.py",
    "exceptions.py",
    "core/__init__.py",
    "core/policy.py",
    "core/audit.py",
    "core/call_match.py",
    "core/cassette.py",
    "core/flushed_producer.py",
    "core/kafka_security.py",
    "core/results.py",
    "core/secrets.py",
    "flink/__init__.py",
    "flink/audit_context.py",
    "flink/audit_sink.py",
    "flink/cassette_io.py",
    "flink/proxies.py",
    "flink/unmediated.py",
)


def build_folder(prefix: str) -> Path:
    """A fresh folder for a job's shipped Python files, removed when the submitting program exits.

    Flink uploads the files given with ``env.add_python_file`` to its blob server when the job is submitted;
    the TaskManagers (also after a restart) read them from there, so the folder is needed only until the
    program has submitted its jobs — and every submission left one behind in the JobManager host's temp
    folder before."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    if not _BUILD_FOLDERS:
        atexit.register(remove_build_folders)
    _BUILD_FOLDERS.append(root)
    return root


_BUILD_FOLDERS: list[Path] = []


def remove_build_folders() -> None:
    """Remove the folders :func:`build_folder` made (at exit, or by a program that ends with ``os._exit``)."""
    while _BUILD_FOLDERS:
        shutil.rmtree(_BUILD_FOLDERS.pop(), ignore_errors=True)


def isolate_runtime(build_root: str | Path) -> str:
    """Copy the modules the TaskManager imports from this package under a content-hashed package name.

    The embedded interpreter keeps the first version of ``airflow_flink_replay.flink.proxies`` it imported
    until the TaskManager restarts; a newer airflow-flink-replay would otherwise run stale proxy code. The
    copy ``afr_rt_<sha256>_<build>`` (imports rewritten to it; one per build, see below) is what the
    rewritten plan refers to. Returns the package name; ``build_root`` must be shipped with
    ``env.add_python_file``.
    """
    src = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for rel in _RUNTIME_FILES:
        h.update(rel.encode() + b"\0" + (src / rel).read_bytes())
    root = Path(build_root)
    # Content-hashed AND unique to this build: every job on a TaskManager shares one interpreter, and a
    # package it imported from an earlier job's (since deleted) python files keeps that dead folder as its
    # __path__ — a submodule the earlier job never imported (proxies: imported at the first resource call)
    # then fails with "No module named ...". Seen on the shared replay cluster after replays ended early.
    token = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:8]
    name = f"afr_rt_{h.hexdigest()[:16]}_{token}"
    dest = root / name
    if not dest.exists():
        tmp = root / f".{name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        for rel in _RUNTIME_FILES:
            text = (src / rel).read_text(encoding="utf-8")
            text = (
                text.replace("airflow_flink_replay.core", f"{name}.core")
                .replace("airflow_flink_replay.flink", f"{name}.flink")
                .replace("airflow_flink_replay.exceptions", f"{name}.exceptions")
            )
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(text, encoding="utf-8")
        tmp.rename(dest)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    return name
