"""Your own job on the local stack: what ``flink-replay deploy``, ``produce`` and ``run-dag`` share.

- :func:`running_stack`: the stack that is up, or an error that says how to start it;
- :func:`check_reference` / :func:`link_python_path`: a ``"module:attr"`` the Flink side can import. The
  stack's Flink-side Python imports this checkout through a ``.pth`` file; your package is linked the same
  way (one more ``.pth`` line per folder), so production and every replay job find it;
- :func:`check_definition`: the agent check of production's job definition in the stack's Flink-side Python,
  before ``deploy`` submits anything (a module Flink's Python worker cannot import is refused there);
- :func:`production_runs`: after the submission, wait (bounded) until production runs every task and completed
  a checkpoint, or say why not with the Python error of the failing task;
- :func:`production_state`: whether production runs, for ``produce``;
- :func:`produce_jsonl` / :class:`JsonlFeeder`: sample input from a JSONL file, each line's bytes unchanged,
  at once or in the background while a DAG runs (the capture window fills only after production resumed).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from airflow_flink_replay.exceptions import FlinkJobFailedError, FlinkRestError, OwnJobError
from airflow_flink_replay.local.demo import AgentRef, PacedFeeder
from airflow_flink_replay.local.stack import LocalStack, StackConfig, StackInfo

if TYPE_CHECKING:
    from airflow_flink_replay.core.agent_check import AgentCheckReport
    from airflow_flink_replay.core.flink_models import CheckpointedJob
    from airflow_flink_replay.core.replay_spec import ReplaySpec

#: The Flink-side ``.pth`` file listing the folders of your packages (one per line).
USER_PATHS_PTH = "flink_replay_user_paths.pth"
_REFERENCE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")  # fullmatch: ``$`` accepts a trailing newline


def running_stack() -> StackInfo:
    """The local stack, if it is up."""
    local = LocalStack(StackConfig())
    info = local.info()
    if info is None or not local.status().get("up"):
        raise OwnJobError(
            f"the local stack is not up (stack folder {local.workdir}).\nFix: `flink-replay stack up` "
            "(or `make stack-up`), then run this command again"
        )
    return info


def check_reference(option: str, reference: str, python_path: list[Path], checkout: Path) -> None:
    """Refuse a reference that is not ``"module:attr"`` or whose top-level package is in none of the folders
    the Flink side imports from (``python_path`` and the checkout)."""
    if not _REFERENCE.fullmatch(reference):
        raise OwnJobError(
            f'{option} {reference!r} is not a reference.\nFix: give "package.module:attribute", e.g. '
            '"my_agents.review.job:job"'
        )
    top = reference.split(":", 1)[0].split(".", 1)[0]
    folders = [*python_path, checkout]
    if not any((f / top).is_dir() or (f / f"{top}.py").is_file() for f in folders):
        raise OwnJobError(
            f"{option} {reference!r}: the package {top!r} is in none of {', '.join(str(f) for f in folders)}.\n"
            f"Fix: --python-path <the folder that holds {top}/> (the local stack's Flink side imports it from there)"
        )


class LinkedPaths(NamedTuple):
    """What :func:`link_python_path` did: the ``.pth`` file it wrote, and the packages another linked folder also
    holds (``"<package> in <folder>"``), which the Flink side no longer imports from there."""

    pth: Path
    shadowed: list[str]


def link_python_path(stack: StackInfo, folders: list[Path]) -> LinkedPaths:
    """Put ``folders`` first in the stack's Flink-side Python (a ``.pth`` file in its venv).

    Python workers start afresh for every job, so production and replays started afterwards import from them.
    The latest deploy wins: its folders come before those linked earlier, which stay (other productions on the
    stack may import from them) unless they no longer exist. A package that an earlier folder holds too is
    imported from the new folder from now on, also by a production deployed from the earlier one when it
    restarts: those are returned in ``shadowed``."""
    from airflow_flink_replay.local.components import venv_site_packages

    pth = venv_site_packages(Path(stack.flink_python).parent.parent) / USER_PATHS_PTH
    new = list(dict.fromkeys(str(f.resolve()) for f in folders))
    for folder in new:  # a .pth holds one path a line, and runs a line that starts with "import"
        if "\n" in folder or "\r" in folder or not folder.isprintable() or not _encodable(folder):
            raise OwnJobError(f"--python-path {folder!r}: the Flink side cannot import from a folder whose path has "
                              "a line break, a control character or bytes that are not UTF-8.\nFix: move your "
                              "package to a folder with a plain name")
    lines = pth.read_text().splitlines() if pth.exists() else []
    kept = [line for line in lines if line and line not in new and Path(line).is_dir()]
    if new + kept != lines:
        pth.write_text("\n".join(new + kept) + "\n")
    ours = {name: folder for folder in new for name in _packages(Path(folder))}
    shadowed = [f"{name} in {folder} (now imported from {ours[name]})"
                for folder in kept for name in _packages(Path(folder)) if name in ours]
    return LinkedPaths(pth, shadowed)


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _packages(folder: Path) -> set[str]:
    """The top-level packages and modules importable from ``folder``."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return set()
    return {e.name for e in entries if e.is_dir() and (e / "__init__.py").exists()} | {
        e.stem for e in entries if e.suffix == ".py" and e.is_file()}


#: How long ``deploy``'s agent check may take in the Flink-side Python (imports Flink Agents, plans the agent, imports
#: the worker-side code in a second Python).
CHECK_TIMEOUT_S = 300.0


def check_definition(stack: StackInfo, agent: AgentRef) -> AgentCheckReport:
    """The agent check of production's job definition (:mod:`airflow_flink_replay.flink.agent_check`), run by the
    stack's Flink-side Python with the arguments production gets: import, build, the worker-side code imported as
    Flink's Python worker imports it, the plan. No record is read (production has none yet). Judged with the
    default replay policy; raises :class:`OwnJobError` when the program cannot report."""
    from airflow_flink_replay.core.agent_check import decode_facts, judge
    from airflow_flink_replay.core.policy import ReplayPolicy

    cmd = [stack.flink_python, "-m", "airflow_flink_replay.flink.agent_check", "--production", agent.reference,
           "--production-form", "job" if agent.kind == "agent_job" else "factory", "--samples", "0",
           "--sample-runs", "0", "--mem0-config", json.dumps(stack.mem0_config()), "--emit", "stdout",
           *(["--key-field", agent.key_field] if agent.key_field else [])]  # fmt: skip
    env = {**os.environ, **({"JAVA_HOME": stack.java_home} if stack.java_home else {})}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=CHECK_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as err:
        raise OwnJobError(f"the agent check of {agent.reference} took more than {CHECK_TIMEOUT_S:g} s in "
                          f"{stack.flink_python}.\nFix: look for work done at import time in its modules") from err
    except OSError as err:
        raise OwnJobError(f"the stack's Flink-side Python cannot run the agent check: {err}.\nFix: "
                          "`flink-replay stack up` (it installs the Flink side)") from err
    facts = decode_facts(done.stdout)
    if facts is None:
        output = (done.stderr or done.stdout).strip().splitlines()[-30:]
        raise OwnJobError(f"the agent check of {agent.reference} could not run in the stack's Flink-side Python "
                          f"(exit {done.returncode}):\n" + "\n".join(output) + "\nFix: the error above; is this "
                          "checkout installed there (`flink-replay stack up` links it)?")  # fmt: skip
    return judge(facts, ReplayPolicy())


def production_runs(stack: StackInfo, job_id: str, *, submitted: bool, timeout: float) -> CheckpointedJob:
    """Wait until production's job runs every task and completed a checkpoint after its newest failure (at most
    ``timeout`` seconds). A job that fails, keeps restarting or does not get there raises :class:`OwnJobError`
    with the Python error of the failing task and the fix; one this deploy ``submitted`` and that still runs
    (restarting) is cancelled then, so that nothing is left failing in a loop."""
    from airflow_flink_replay.core.agent_check import python_error_fix
    from airflow_flink_replay.core.flink_models import TERMINAL_STATES
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

    hook = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url))
    try:
        return hook.wait_until_checkpointed(job_id, timeout=timeout)
    except FlinkRestError as err:
        failed = isinstance(err, FlinkJobFailedError)
        state = hook.get_job(job_id).state
        if failed and submitted and state not in TERMINAL_STATES:
            hook.cancel_job(job_id)
            state, left = "CANCELED", "deploy cancelled the job (it had started it).\n"
        elif state in TERMINAL_STATES or submitted:
            left = ""
        else:
            left = "It was running before this deploy: cancel it in the Flink UI before you deploy again.\n"
        fix = python_error_fix(str(err)) or (
            "correct the error above in your job definition, then deploy again" if failed else
            "look at the job in the Flink UI; if it is only slow to start, deploy again with a longer --wait"
        )
        page = hook.job_ui_url(job_id, state).removesuffix("/overview") + "/exceptions"
        raise OwnJobError(f"production does not run: {err}\n{left}Fix: {fix}. The job's exceptions: {page}") from err


def production_state(stack: StackInfo, job_name: str) -> tuple[str, str]:
    """The state of the newest Flink job called ``job_name`` on the stack's production cluster (``NONE``: no such
    job) and, when it is not running, the root cause of its newest failure (``""`` if none)."""
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

    hook = FlinkRestHook(settings=FlinkRestSettings(base_url=stack.flink_rest_url))
    jobs = hook.list_jobs().by_name(job_name)
    if not jobs:
        return "NONE", ""
    newest = jobs[0]
    return newest.state, ("" if newest.state == "RUNNING" else hook.job_failure_cause(newest.jid, limit=1))


def load_spec(path: Path) -> ReplaySpec:
    """Your ReplaySpec YAML; an error names the file and each wrong field."""
    import yaml

    from airflow_flink_replay.core.replay_spec import ReplaySpec
    from airflow_flink_replay.exceptions import SpecError

    if not path.exists():
        raise OwnJobError(f"--spec {path}: no such file.\nFix: give your ReplaySpec YAML "
                          "(`flink-replay deploy ... --spec-out <file>` writes one for a production it deploys)")
    try:
        return ReplaySpec.from_yaml(path)
    except (SpecError, yaml.YAMLError) as err:
        if str(err).startswith(f"spec {path}"):  # a file that cannot be read as YAML says its own fix
            raise OwnJobError(f"--{err}") from None
        raise OwnJobError(f"{err}\nFix: correct the field(s) above in {path} (docs/operators.md: the spec)") from None


def read_jsonl(path: Path, key_field: str | None) -> list[tuple[bytes | None, bytes]]:
    """The records of a JSONL file as ``(key, value)``: the value is the line's bytes unchanged; the key is
    the ``key_field`` of its JSON object (as text), or None. Every line is checked before anything is sent."""
    if not path.is_file():
        what = "not a regular file (a folder or a device)" if path.exists() else "no such file"
        raise OwnJobError(f"--file {path}: {what}.\nFix: give a JSONL file (one JSON object per line)")
    records = []
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except ValueError as err:
            raise OwnJobError(f"{path} line {number}: not JSON ({err}).\nFix: one JSON object per line") from err
        except RecursionError:
            raise OwnJobError(f"{path} line {number}: nested too deeply.\nFix: one JSON object per line, a few "
                              "levels deep") from None
        if not isinstance(value, dict):
            raise OwnJobError(f"{path} line {number}: a JSON {type(value).__name__}, not an object.\n"
                              "Fix: one JSON object per line")
        if key_field is not None and key_field not in value:
            raise OwnJobError(f"{path} line {number}: no field {key_field!r} (--key-field).\n"
                              f"Fix: add it to every line, or pass the field your records are keyed by")
        try:
            key = None if key_field is None else str(value[key_field]).encode()
        except UnicodeEncodeError:
            raise OwnJobError(f"{path} line {number}: the {key_field!r} value is not Unicode text (a lone "
                              "surrogate).\nFix: a key of valid text") from None
        records.append((key, raw.strip()))
    if not records:
        raise OwnJobError(f"{path}: no records.\nFix: one JSON object per line")
    return records


def produce_jsonl(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]], rate: float = 0.0) -> int:
    """Produce ``records`` to ``topic`` in order (``rate`` per second, 0 = as fast as possible); returns the count.

    One record per batch: tansu, the stack's broker, counts multi-record batches wrongly."""
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for key, value in records:
        producer.produce(topic, key=key, value=value,
                         on_delivery=lambda err, _msg: errors.append(str(err)) if err else None)
        producer.flush(10)
        if rate:
            time.sleep(1.0 / rate)
    if errors:
        raise OwnJobError(f"{len(errors)} record(s) were not delivered to {topic}: {errors[0]}")
    return len(records)


class JsonlFeeder(PacedFeeder):
    """Produces ``records`` in the background, ``rate`` per second, once through, until done or stopped.

    A replay DAG captures its window from what production reads *after* it resumed: feeding while the DAG
    runs is what fills it (``flink-replay run-dag --feed``)."""

    def __init__(self, bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]], rate: float) -> None:
        super().__init__(rate, "jsonl-feeder")
        self.bootstrap, self.topic, self.records = bootstrap, topic, records
        self.sent = 0

    def send_one(self) -> bool:
        """Produce the next record; False once every record was sent."""
        if self.sent >= len(self.records):
            return False
        self.sent += produce_jsonl(self.bootstrap, self.topic, [self.records[self.sent]])
        return True
