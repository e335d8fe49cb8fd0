"""Clear errors from `stack up` before anything starts: a taken port is named with the flag that moves it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from airflow_flink_replay.local.airflow_server import free_port
from airflow_flink_replay.local.components import StackSetupError
from airflow_flink_replay.local.stack import LocalStack, StackConfig


def test_a_taken_port_is_named_with_the_fix(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        stack = LocalStack(StackConfig(workdir=tmp_path / "s", kafka_port=port, flink_rest_port=free_port(),
                                       flink_rpc_port=free_port(), chroma_port=free_port()))
        with pytest.raises(StackSetupError, match=rf"kafka_port={port}.*--kafka-port"):
            stack.up()
    assert not (tmp_path / "s" / "stack.json").exists()


def test_stack_changes_hold_a_lock_other_processes_wait_for(tmp_path) -> None:
    """up/down/restart hold the stack's lock (re-entrant here): another process looking at the stack in the
    middle of a recycle would otherwise see the old pids dead and tear the whole stack down."""
    import subprocess
    import sys

    from airflow_flink_replay.local.stack import LocalStack, StackConfig

    stack = LocalStack(StackConfig(workdir=tmp_path))
    probe = (
        "import fcntl, sys\n"
        f"h = open({str(tmp_path / 'stack.lock')!r}, 'a+')\n"
        "try:\n    fcntl.flock(h.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(3)\n"
    )
    with stack._changing(), stack._changing():  # re-entrant: down() inside up() does not deadlock
        held = subprocess.run([sys.executable, "-c", probe], check=False).returncode
    free = subprocess.run([sys.executable, "-c", probe], check=False).returncode
    assert (held, free) == (3, 0)


def test_kafka_clients_load_once_per_jvm_and_replay_jobs_restart_at_once(tmp_path: Path) -> None:
    """Both clusters read kafka-clients from lib/ (``org.apache.kafka.`` parent-first: Flink Agents' 100 ms
    topic check at operator start then runs on warm classes); only that jar is copied there; a replay job
    restarts at once, production's after a pause."""
    import yaml

    from airflow_flink_replay.local.stack import _kafka_clients_in_lib

    home = tmp_path / "pyflink"
    (home / "conf").mkdir(parents=True)
    (home / "lib").mkdir()
    (home / "opt").mkdir()
    (home / "conf" / "config.yaml").write_text("env:\n  java:\n    opts:\n      all: -Dx=1\n")
    jars = []
    for name in ("flink-connector-kafka-4.0.1-2.0.jar", "kafka-clients-3.9.1.jar"):
        (tmp_path / name).write_bytes(name.encode())
        jars.append(tmp_path / name)
    _kafka_clients_in_lib(home, jars)
    assert sorted(p.name for p in (home / "lib").iterdir()) == ["kafka-clients-3.9.1.jar"]

    stack = LocalStack(StackConfig(workdir=tmp_path / "s"))
    confs = {}
    for cluster in stack.config.clusters():
        conf_dir = stack._write_flink_conf(home, tmp_path / "python", tmp_path / "java", cluster)
        confs[cluster.name] = yaml.safe_load((conf_dir / "config.yaml").read_text())
    assert set(confs) == {"production", "replay"}
    for conf in confs.values():
        assert {"pemja.", "org.apache.kafka.", "org.apache.flink.agents."} <= set(
            conf["classloader.parent-first-patterns.additional"])
    assert confs["production"]["restart-strategy.fixed-delay.delay"] == "2 s"
    assert confs["replay"]["restart-strategy.type"] == "exponential-delay"
    assert confs["replay"]["restart-strategy.exponential-delay.initial-backoff"] == "200 ms"
    assert confs["replay"]["restart-strategy.exponential-delay.attempts-before-reset-backoff"] == 8


def test_the_flink_agents_jar_for_this_flink_goes_to_lib_after_kafka_clients_and_log4j(tmp_path: Path) -> None:
    """The dist jar for the Flink in lib/ (2.2 here, not the other versions the wheel carries) is copied under a
    name that sorts after kafka-clients and log4j — Flink's classpath is lib/ in name order — replaced when
    the wheel's copy changes, and removed when the wheel's version does."""
    from airflow_flink_replay.local.components import venv_site_packages
    from airflow_flink_replay.local.stack import _agents_jar_in_lib

    home, venv = tmp_path / "pyflink", tmp_path / "venv"
    (home / "lib").mkdir(parents=True)
    for name in ("flink-dist-2.2.1.jar", "kafka-clients-3.9.1.jar", "log4j-slf4j-impl-2.24.3.jar"):
        (home / "lib" / name).write_bytes(b"x")
    agents_lib = venv_site_packages(venv) / "flink_agents" / "lib"
    for version in ("2.1", "2.2"):
        (agents_lib / f"flink-{version}").mkdir(parents=True)
        (agents_lib / f"flink-{version}" / f"flink-agents-dist-flink-{version}-0.2.0.jar").write_bytes(b"v1")
    _agents_jar_in_lib(home, venv)
    names = sorted(p.name for p in (home / "lib").iterdir())
    assert names[-1] == "zz-flink-agents-dist-flink-2.2-0.2.0.jar" and len(names) == 4, names
    (agents_lib / "flink-2.2" / "flink-agents-dist-flink-2.2-0.2.0.jar").write_bytes(b"v2-longer")
    _agents_jar_in_lib(home, venv)
    assert (home / "lib" / names[-1]).read_bytes() == b"v2-longer"
    # an upgrade: the older version's copy leaves lib/ (two Flink Agents jars on one classpath would mix)
    (agents_lib / "flink-2.2" / "flink-agents-dist-flink-2.2-0.2.0.jar").rename(
        agents_lib / "flink-2.2" / "flink-agents-dist-flink-2.2-0.3.0.jar")
    _agents_jar_in_lib(home, venv)
    assert sorted(p.name for p in (home / "lib").glob("zz-*")) == ["zz-flink-agents-dist-flink-2.2-0.3.0.jar"]


@pytest.mark.parametrize(
    "content", [b"{not json", b'{"flink_rest_url": 1}', b"\xff\xfe", b"[]", None], ids=["json", "schema", "utf8",
                                                                                        "list", "folder"]
)
def test_a_corrupt_stack_file_is_named_with_the_fix(tmp_path: Path, content: bytes | None) -> None:
    stack = LocalStack(StackConfig(workdir=tmp_path))
    if content is None:
        stack.stack_file.mkdir()
    else:
        stack.stack_file.write_bytes(content)
    with pytest.raises(StackSetupError, match=r"stack\.json.*Fix:") as err:
        stack.info()
    assert str(stack.stack_file) in str(err.value)
