"""The offline hashing embedder (memory/offline.py): deterministic, normalised, and meaningful enough."""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest

from airflow_flink_replay.memory.offline import hashing_embed


def test_hashing_embedder_is_deterministic_normalised_and_meaningful() -> None:
    a, b = hashing_embed("customer likes green tea"), hashing_embed("customer likes green tea")
    assert a == b and len(a) == 64 and math.isclose(sum(v * v for v in a), 1.0)
    tea, tea2, bike = hashing_embed("green tea"), hashing_embed("likes green tea a lot"), hashing_embed("red bicycle")

    def cos(x: list[float], y: list[float]) -> float:
        return sum(p * q for p, q in zip(x, y, strict=True))

    assert cos(tea, tea2) > cos(tea, bike) + 0.2
    assert hashing_embed("", 8) == [1.0] + [0.0] * 7
    with pytest.raises(ValueError):
        hashing_embed("x", 1)


# ----------------------------------------------------- issue 42: a resolved secret never reaches an error or a log
def _everything_shown(err: BaseException) -> str:
    import traceback

    return "\n".join([str(err), repr(err), "".join(traceback.format_exception(err))])


@pytest.mark.parametrize(
    "config",
    [
        {"llm": {"provider": "no-such-llm", "config": {"api_key": "${env:AFR_TEST_LLM_KEY}"}}},
        {"vector_store": {"provider": "qdrant", "config": {"api_key": "${env:AFR_TEST_LLM_KEY}", "bogus": 1,
                                                              "path": "/tmp/afr-test-qdrant"}}},
    ],
    ids=["unknown-llm-provider", "extra-vector-store-field"],
)  # fmt: skip
def test_a_config_mem0_refuses_is_reported_without_the_resolved_secret(
    config: dict, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Real mem0 config validation (its pydantic errors echo ``input_value={'api_key': ...}``, shortened in the
    middle when long): the error re-raised names the reference, never the value nor a piece of it, and mem0's
    own log line of the refusal is not written."""
    from airflow_flink_replay.exceptions import SecretScrubbedError
    from airflow_flink_replay.memory.offline import build_offline_memory

    value = "sk-afr-" + uuid.uuid4().hex + uuid.uuid4().hex  # long: pydantic shows its two ends
    monkeypatch.setenv("AFR_TEST_LLM_KEY", value)
    with pytest.raises(SecretScrubbedError) as info:
        build_offline_memory(config, mem0_dir=tmp_path)
    shown = _everything_shown(info.value)
    assert "${env:AFR_TEST_LLM_KEY}" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__
    printed = "".join(capfd.readouterr()) + caplog.text
    for piece in (value, value[:12], value[-12:]):
        assert piece not in shown and piece not in printed, piece


def test_an_error_of_the_offline_config_is_scrubbed_and_a_harmless_one_passes_unchanged(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_flink_replay.exceptions import SecretScrubbedError
    from airflow_flink_replay.memory.offline import offline_memory_config

    value = "afr-dims-" + uuid.uuid4().hex
    monkeypatch.setenv("AFR_TEST_DIMS", value)
    config = {"vector_store": {"provider": "qdrant", "config": {"embedding_model_dims": "${env:AFR_TEST_DIMS}"}}}
    with pytest.raises(SecretScrubbedError) as info:  # int('<value>') fails, echoing its input
        offline_memory_config(config, mem0_dir=tmp_path)
    assert value not in _everything_shown(info.value) and "${env:AFR_TEST_DIMS}" in str(info.value)
    with pytest.raises(ValueError, match="embedder: expected") as plain:  # no resolved value in it: unchanged
        offline_memory_config({"llm": {"config": {"api_key": "${env:AFR_TEST_DIMS}"}}}, embedder="x", mem0_dir=tmp_path)  # type: ignore[arg-type]
    assert not isinstance(plain.value, SecretScrubbedError)
