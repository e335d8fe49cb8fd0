"""The comparison's verdicts on many runs of the noisy review agent, simulated without Flink (seeded).

The agent's steps (:mod:`examples.review_agent.common.offline`) with the noisy demo's model and spec settings:
v1 against itself must PASS and v2 must FAIL in every one of 40 windows of 100 reviews. Before the
comparison counted a number within either noise band as noise and corrected for several noisy fields, a few
such A/A/A windows in every hundred FAILed (docs/comparison.md).
"""

from __future__ import annotations

import json
from collections import Counter
from io import StringIO

from airflow_flink_replay.core.compare import CompareConfig, compare_runs
from airflow_flink_replay.local.demo import NOISY_DEMO
from examples.review_agent.common.generator import generate_reviews
from examples.review_agent.common.job import NOISY_MODEL
from examples.review_agent.common.offline import run_offline
from examples.review_agent.v1.prompts import SYSTEM_PROMPT as V1
from examples.review_agent.v2.prompts import SYSTEM_PROMPT as V2

WINDOWS, RECORDS = 40, 100


def _run(reviews: list, prompt: str, session: str) -> StringIO:
    rows = run_offline(reviews, prompt, session, temperature=NOISY_MODEL["StandInReviewModel.temperature"],
                       seed=NOISY_MODEL["StandInReviewModel.seed"])
    return StringIO("".join(json.dumps(r) + "\n" for r in rows))


def test_v1_against_itself_passes_and_v2_fails_in_every_noisy_window() -> None:
    config = CompareConfig(min_aligned=20, **NOISY_DEMO.compare)
    verdicts: dict[str, Counter[str]] = {"v1": Counter(), "v2": Counter()}
    noisy = 0
    for i in range(WINDOWS):
        reviews = generate_reviews(RECORDS, seed=9000 + i)
        for label, prompt in (("v1", V1), ("v2", V2)):
            base, base_2 = _run(reviews, V1, f"a-{i}"), _run(reviews, V1, f"a2-{i}")
            result = compare_runs(base, _run(reviews, prompt, f"b-{i}"), base_2, key="$.id", config=config)
            verdicts[label][result.verdict] += 1
            noisy += bool(result.noisiest())
    assert verdicts == {"v1": Counter(PASS=WINDOWS), "v2": Counter(FAIL=WINDOWS)}
    assert noisy == 2 * WINDOWS  # the baselines differ in every window: the noise is real, not zero
