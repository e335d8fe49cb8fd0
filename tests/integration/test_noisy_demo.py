"""The README's second command, ``flink-replay demo --noisy``, as a user runs it: the stand-in chat model
samples like an LLM (labels flip now and then, summaries are paraphrased, and the ``notify_support`` tool's
``reason`` argument is written by the model, so every variant words it differently). It must end as the
README says: v2 FAIL, v1 PASS, exit 0.

What makes v1 pass although the tool's arguments differ in every variant: production's cassette serves a call
by its identifying arguments (``review_id``, ``customer``) and its position, the model-written ``reason`` scored
by similarity (docs/policy.md, "Calls whose arguments a model wrote"); a served call and one that fell back to
``record`` are not an outcome change. The run records say how each served call matched.

Cost: one production deploy, a raw stop and restore, two gate runs over a 100-record window (~3 min).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.dag_testing import stop_production

pytestmark = pytest.mark.timeout(1500)
ROOT = Path(__file__).resolve().parents[2]


def test_the_noisy_demo_stops_v2_and_passes_v1(stack: Any) -> None:
    from airflow_flink_replay.local.demo import NOISY_DEMO

    production = {"job_name": NOISY_DEMO.job_name, "topics": NOISY_DEMO.topics,
                  "identifier": NOISY_DEMO.job_identifier,
                  "spec_path": Path(stack.workdir) / "noisy-demo" / "replay_spec.yaml"}
    try:
        done = subprocess.run([str(Path(sys.executable).parent / "flink-replay"), "demo", "--noisy"], cwd=ROOT,
                              capture_output=True, text=True, timeout=1200, stdin=subprocess.DEVNULL, check=False)
        out = done.stdout + done.stderr
        assert done.returncode == 0, out[-5000:]
        assert "demo OK: v2 is stopped at the gate, v1 passes" in out, out[-5000:]
        blocks = re.split(r"\n(?=flink_agents_release_gate with candidate)", out)[1:]
        verdicts = [re.search(r"^  => (\w+)", b, re.M) for b in blocks]
        assert [v.group(1) if v else None for v in verdicts] == ["FAIL", "PASS"], out[-5000:]
        v1 = json.loads(Path(re.search(r"run record: (\S+)", blocks[1]).group(1)).read_text())  # type: ignore[union-attr]
        # the A/A noise is real (the model samples), and every variant was served production's recorded calls
        # although the model reworded their reasons: matched by the identifying arguments (calls production never
        # made, e.g. a label that flipped to negative in the replays only, stay unmatched: no bound on those)
        assert v1["noise"], v1["noise"]
        calls = [variant["cassette_calls"] or {} for variant in v1["variants"]]
        assert all(found.get("replayed", 0) and found.get("by_arguments", 0) for found in calls), calls
    finally:
        stop_production(stack, production)
