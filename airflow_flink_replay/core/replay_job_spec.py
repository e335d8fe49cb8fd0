"""Everything the replay job entry point (:mod:`airflow_flink_replay.flink.replay_job`) takes.

The Airflow-side submitter builds a :class:`ReplayJobSpec`, turns it into program arguments with
:meth:`ReplayJobSpec.to_argv` (``--spec-json <json>``) or writes it to a file (``--spec-file <path>``), and
submits ``airflow_flink_replay/flink/replay_job.py`` with them. The job parses them back with
:meth:`ReplayJobSpec.from_argv`. Pure (pydantic only).

The replay window is either a manifest (path or ``file://`` URI of a JSON document, see
:func:`load_window_from_manifest`) or an explicit ``capture_topic`` + ``start_offsets`` + ``end_offsets``.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from airflow_flink_replay.core.policy import ReplayPolicy

__all__ = ["ReplayJobSpec", "ReplayWindow", "load_window_from_manifest"]

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


class ReplayWindow(BaseModel):
    """Capture topic and, per partition, the first offset to replay and the offset to stop before."""

    topic: str
    start_offsets: dict[int, int]
    end_offsets: dict[int, int]

    @model_validator(mode="after")
    def _consistent(self) -> ReplayWindow:
        if set(self.start_offsets) != set(self.end_offsets):
            raise ValueError(
                f"start_offsets partitions {sorted(self.start_offsets)} differ from end_offsets partitions "
                f"{sorted(self.end_offsets)}; give both for the same partitions"
            )
        for p, start in self.start_offsets.items():
            end = self.end_offsets[p]
            if start < 0 or end < start:
                raise ValueError(f"partition {p}: need 0 <= start ({start}) <= end ({end})")
        return self

    @property
    def record_count(self) -> int:
        """Records in the window (end - start summed over partitions)."""
        return sum(self.end_offsets[p] - s for p, s in self.start_offsets.items())


def _offsets(raw: Any, field: str) -> dict[int, int]:
    if isinstance(raw, dict):
        return {int(k): int(v) for k, v in raw.items()}
    raise ValueError(f"manifest field {field!r} must be an object partition -> offset")


def load_window_from_manifest(location: str) -> ReplayWindow:
    """Read the replay window from a manifest JSON file (a path or ``file://`` URI).

    Accepted layouts (the first that matches wins):

    - ``{"capture": {"topic": ..., "partitions": [{"partition": 0, "start_offset": 5, "end_offset": 9}, ...]}}``
      (``start``/``end`` also accepted as key names);
    - ``{"capture_topic": ..., "start_offsets": {"0": 5}, "end_offsets": {"0": 9}}`` (also nested under
      ``"capture"`` or ``"window"``).
    """
    path = location[len("file://") :] if location.startswith("file://") else location
    if "://" in path:
        raise ValueError(
            f"manifest {location!r}: the replay job reads local files only; stage the manifest to a local "
            "path or pass capture_topic/start_offsets/end_offsets explicitly"
        )
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ValueError(f"manifest {location!r} not found") from exc
    for section in (doc.get("capture"), doc.get("window"), doc):
        if not isinstance(section, dict):
            continue
        topic = section.get("topic") or section.get("capture_topic") or doc.get("capture_topic")
        parts = section.get("partitions")
        if topic and isinstance(parts, list):
            start = {int(p["partition"]): int(p.get("start_offset", p.get("start"))) for p in parts}
            end = {int(p["partition"]): int(p.get("end_offset", p.get("end"))) for p in parts}
            return ReplayWindow(topic=topic, start_offsets=start, end_offsets=end)
        if topic and "start_offsets" in section and "end_offsets" in section:
            return ReplayWindow(
                topic=topic,
                start_offsets=_offsets(section["start_offsets"], "start_offsets"),
                end_offsets=_offsets(section["end_offsets"], "end_offsets"),
            )
    raise ValueError(
        f"manifest {location!r} has no capture window: expected capture.topic + capture.partitions[] or "
        "capture_topic + start_offsets + end_offsets"
    )


class ReplayJobSpec(BaseModel):
    """Arguments of one replay job (one variant)."""

    model_config = ConfigDict(extra="forbid")

    variant: str = Field(description="Variant name written into every output line (baseline, candidate, ...).")
    agent_factory: str = Field(description='"module:attr" of a callable returning the Agent (kwargs: mem0_config).')
    job_identifier: str = Field(description="Flink Agents job-identifier = the Mem0 fork namespace.")
    action_state_topic: str = Field(description="Isolated, fresh Kafka action-state topic (never production's).")
    output_dir: str = Field(description="Directory for the output JSONL part files (local path).")
    audit_dir: str = Field(description="Directory for the audit JSONL files (local path).")
    kafka_bootstrap: str

    manifest: str | None = Field(default=None, description="Manifest path / file:// URI with the capture window.")
    capture_topic: str | None = None
    start_offsets: dict[int, int] | None = None
    end_offsets: dict[int, int] | None = None

    policy: ReplayPolicy = Field(default_factory=ReplayPolicy)
    agent_uid: str | None = Field(default=None, description="setUid on the agent operator (jobs built with a uid).")
    agent_uid_hash: str | None = Field(default=None, description="setUidHash: production's 32-hex agent vertex id.")
    max_parallelism: int | None = Field(default=None, description="Pinned max parallelism of the agent operator.")
    parallelism: int = 1
    action_state_partitions: int | None = Field(default=None, description="Partitions of the action-state topic.")
    mem0_config: dict[str, Any] | None = Field(default=None, description="mem0 config dict for the agent's memory.")
    agent_options: dict[str, Any] = Field(default_factory=dict, description="Extra kwargs for the agent factory.")
    isolate_agent_build: bool = Field(
        default=True,
        description="Import the factory's package under a unique, content-hashed module name (TaskManagers "
        "share one Python interpreter; this keeps baseline and candidate code apart).",
    )
    mediate_resources: bool = Field(
        default=True,
        description="Wrap the agent's resources in policy proxies (off only to reproduce production's exact "
        "action identity, e.g. to demonstrate the action-state hazard).",
    )
    agent_config: dict[str, str | int | bool] = Field(
        default_factory=dict, description="Extra Flink Agents config entries for the agent operator."
    )
    key_field: str = Field(default="customer", description="JSON field of the input that is the agent key.")
    watermark: str = Field(
        default="monotonous", description='Production watermark strategy: "none", "monotonous" or "bounded:<ms>".'
    )
    checkpoint_interval_ms: int = 1000
    connector_jars: list[str] = Field(default_factory=list, description="Kafka connector + kafka-clients jars.")
    job_name: str | None = None

    @field_validator("agent_factory")
    @classmethod
    def _factory_shape(cls, value: str) -> str:
        if not _FACTORY.match(value):
            raise ValueError(f'agent_factory {value!r} must look like "package.module:attribute"')
        return value

    @field_validator("agent_uid_hash")
    @classmethod
    def _hex32(cls, value: str | None) -> str | None:
        if value is not None and not _HEX32.match(value.lower()):
            raise ValueError(f"agent_uid_hash {value!r} must be a 32-hex Flink vertex id (JobVertexID)")
        return value.lower() if value else value

    @field_validator("watermark")
    @classmethod
    def _watermark_shape(cls, value: str) -> str:
        if value in ("none", "monotonous") or re.match(r"^bounded:\d+$", value):
            return value
        raise ValueError(f'watermark {value!r} must be "none", "monotonous" or "bounded:<ms>"')

    @model_validator(mode="after")
    def _window_given(self) -> ReplayJobSpec:
        explicit = [self.capture_topic, self.start_offsets, self.end_offsets]
        if self.manifest is None and any(v is None for v in explicit):
            raise ValueError("give either manifest or all of capture_topic, start_offsets, end_offsets")
        if self.agent_uid and self.agent_uid_hash:
            raise ValueError("give agent_uid or agent_uid_hash, not both")
        return self

    def window(self) -> ReplayWindow:
        """The replay window (explicit offsets win over the manifest)."""
        if self.capture_topic and self.start_offsets is not None and self.end_offsets is not None:
            return ReplayWindow(
                topic=self.capture_topic, start_offsets=self.start_offsets, end_offsets=self.end_offsets
            )
        assert self.manifest is not None
        return load_window_from_manifest(self.manifest)

    def to_argv(self) -> list[str]:
        """Program arguments for the replay job: ``["--spec-json", <json>]``."""
        return ["--spec-json", self.model_dump_json()]

    def write(self, path: str | Path) -> list[str]:
        """Write the spec to ``path`` and return ``["--spec-file", path]``."""
        Path(path).write_text(self.model_dump_json(indent=2), encoding="utf-8")
        return ["--spec-file", str(path)]

    @classmethod
    def from_argv(cls, argv: list[str]) -> ReplayJobSpec:
        """Parse ``--spec-json <json>`` or ``--spec-file <path>``."""
        parser = argparse.ArgumentParser(prog="replay_job", description="Bounded Flink Agents replay job")
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--spec-json")
        group.add_argument("--spec-file")
        ns, _unknown = parser.parse_known_args(argv)
        if ns.spec_file:
            return cls.model_validate_json(Path(ns.spec_file).read_text(encoding="utf-8"))
        return cls.model_validate_json(ns.spec_json)
