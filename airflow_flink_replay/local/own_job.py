"""Your own job on the local stack: what ``flink-replay deploy``, ``produce`` and ``run-dag`` share.

- :func:`running_stack`: the stack that is up, or an error that says how to start it;
- :func:`check_reference` / :func:`link_python_path`: a ``"module:attr"`` the Flink side can import. The
  stack's Flink-side Python imports this checkout through a ``.pth`` file; your package is linked the same
  way (one more ``.pth`` line per folder), so production and every replay job find it;
- :func:`produce_jsonl` / :class:`JsonlFeeder`: sample input from a JSONL file, each line's bytes unchanged,
  at once or in the background while a DAG runs (the capture window fills only after production resumed).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_flink_replay.exceptions import OwnJobError
from airflow_flink_replay.local.demo import PacedFeeder
from airflow_flink_replay.local.stack import LocalStack, StackConfig, StackInfo

if TYPE_CHECKING:
    from airflow_flink_replay.core.replay_spec import ReplaySpec

#: The Flink-side ``.pth`` file listing the folders of your packages (one per line).
USER_PATHS_PTH = "flink_replay_user_paths.pth"
_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


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
    if not _REFERENCE.match(reference):
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


def link_python_path(stack: StackInfo, folders: list[Path]) -> Path:
    """Add ``folders`` to the stack's Flink-side Python (a ``.pth`` file in its venv; lines already there stay).

    Python workers start afresh for every job, so production and replays started afterwards import from them."""
    from airflow_flink_replay.local.components import venv_site_packages

    pth = venv_site_packages(Path(stack.flink_python).parent.parent) / USER_PATHS_PTH
    lines = pth.read_text().splitlines() if pth.exists() else []
    wanted = lines + [str(f.resolve()) for f in folders if str(f.resolve()) not in lines]
    if wanted != lines:
        pth.write_text("\n".join(wanted) + "\n")
    return pth


def load_spec(path: Path) -> ReplaySpec:
    """Your ReplaySpec YAML; an error names the file and each wrong field."""
    import yaml

    from airflow_flink_replay.core.replay_spec import ReplaySpec
    from airflow_flink_replay.exceptions import SpecError

    if not path.is_file():
        raise OwnJobError(f"--spec {path}: no such file.\nFix: give your ReplaySpec YAML "
                          "(`flink-replay deploy ... --spec-out <file>` writes one for a production it deploys)")
    try:
        return ReplaySpec.from_yaml(path)
    except (SpecError, yaml.YAMLError) as err:
        raise OwnJobError(f"{err}\nFix: correct the field(s) above in {path} (docs/operators.md: the spec)") from None


def read_jsonl(path: Path, key_field: str | None) -> list[tuple[bytes | None, bytes]]:
    """The records of a JSONL file as ``(key, value)``: the value is the line's bytes unchanged; the key is
    the ``key_field`` of its JSON object (as text), or None. Every line is checked before anything is sent."""
    if not path.is_file():
        raise OwnJobError(f"--file {path}: no such file.\nFix: give a JSONL file (one JSON object per line)")
    records = []
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except ValueError as err:
            raise OwnJobError(f"{path} line {number}: not JSON ({err}).\nFix: one JSON object per line") from err
        if not isinstance(value, dict):
            raise OwnJobError(f"{path} line {number}: a JSON {type(value).__name__}, not an object.\n"
                              "Fix: one JSON object per line")
        if key_field is not None and key_field not in value:
            raise OwnJobError(f"{path} line {number}: no field {key_field!r} (--key-field).\n"
                              f"Fix: add it to every line, or pass the field your records are keyed by")
        key = None if key_field is None else str(value[key_field]).encode()
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
