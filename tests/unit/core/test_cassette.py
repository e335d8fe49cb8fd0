"""Cassettes: production's recorded calls served to a replay's matching calls, each once, in production's order."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from airflow_flink_replay.core.audit import args_digest, key_hashes
from airflow_flink_replay.core.cassette import (
    Cassette,
    CassetteEntry,
    CassetteRecording,
    CassetteSource,
    CassetteWindow,
    encode_result,
)

pytestmark = pytest.mark.unit


def call(key: str, seq: int, result: object, *args: object, **kwargs: object) -> CassetteEntry:
    """Production's ``seq``-th call of the ``lookup_order`` tool for ``key``, with these arguments."""
    return CassetteEntry.recorded(
        resource_type="tool", resource_name="lookup_order", method="call", key=key,
        args_digest=args_digest(args, kwargs), seq=seq, result=result, source=CassetteSource(partition=0, offset=seq),
    )


def test_the_same_call_twice_gets_productions_results_in_order_then_none() -> None:
    cassette = Cassette([call("c-1", 1, {"status": "shipped"}, "o-1"), call("c-1", 0, {"status": "paid"}, "o-1")])
    digest = args_digest(("o-1",), {})
    assert cassette.take("lookup_order", "call", "c-1", digest).result == {"status": "paid"}
    assert cassette.take("lookup_order", "call", "c-1", digest).result == {"status": "shipped"}
    assert cassette.take("lookup_order", "call", "c-1", digest) is None
    assert (cassette.served, cassette.unmatched, cassette.remaining()) == (2, 1, 0)


def test_other_arguments_key_resource_or_method_are_unmatched() -> None:
    cassette = Cassette([call("c-1", 0, "paid", "o-1")])
    digest = args_digest(("o-1",), {})
    assert cassette.take("lookup_order", "call", "c-1", args_digest(("o-2",), {})) is None
    assert cassette.take("lookup_order", "call", "c-2", digest) is None
    assert cassette.take("notify_support", "call", "c-1", digest) is None
    assert cassette.take("lookup_order", "query", "c-1", digest) is None
    assert (cassette.unmatched, cassette.remaining()) == (4, 1)
    assert cassette.take("lookup_order", "call", "c-1", digest).result == "paid"


def test_a_key_one_side_knew_only_by_its_hash_matches_the_recorded_key() -> None:
    """An action restored in flight from the savepoint may run before its task learnt its key's text: its calls
    carry the key's hash, in production's recording or in the replay; they still match the key's calls."""
    digest = args_digest(("o-1",), {})
    hashed = str(key_hashes("c-1")[-1])  # the runtime's hash of a pickled text key
    replay_hash = Cassette([call("c-1", 0, "paid", "o-1"), call("c-2", 0, "open", "o-1")])
    assert replay_hash.take("lookup_order", "call", hashed, digest).result == "paid"
    assert replay_hash.take("lookup_order", "call", hashed, digest) is None
    production_hash = Cassette([call(hashed, 0, "paid", "o-1")])
    assert production_hash.take("lookup_order", "call", "c-2", digest) is None
    assert production_hash.take("lookup_order", "call", "c-1", digest).result == "paid"


def test_keyword_arguments_match_whatever_their_order() -> None:
    cassette = Cassette([call("c-1", 0, 3, order="o-1", depth=2)])
    assert cassette.take("lookup_order", "call", "c-1", args_digest((), {"depth": 2, "order": "o-1"})).result == 3


def test_a_result_too_large_or_not_json_is_kept_without_its_value_and_replays_unmatched() -> None:
    big = CassetteEntry.recorded(resource_type="tool", resource_name="t", method="call", key="k", args_digest="d",
                                 seq=0, result="x" * 100, max_result_bytes=50)
    odd = CassetteEntry.recorded(resource_type="tool", resource_name="t", method="call", key="k", args_digest="d",
                                 seq=1, result={1, 2})
    assert big.result is None and "102 bytes is over the cassette's limit of 50" in big.result_dropped
    assert odd.result is None and odd.result_dropped.startswith("result is not JSON (TypeError")
    cassette = Cassette([big, odd])
    assert cassette.take("t", "call", "k", "d") is None and cassette.take("t", "call", "k", "d") is None
    assert (cassette.served, cassette.unmatched) == (0, 2)


def test_a_call_that_raised_in_production_is_never_served() -> None:
    failed = call("c-1", 0, None, "o-1").model_copy(update={"error": "TimeoutError: upstream"})
    cassette = Cassette([failed])
    assert cassette.take("lookup_order", "call", "c-1", args_digest(("o-1",), {})) is None
    assert cassette.unmatched == 1


def test_json_lines_round_trip_and_a_bad_line_is_named() -> None:
    entries = [call("c-1", 0, {"a": [1, 2]}, "o-1"), call("c-2", 0, None, "o-9")]
    lines = list(Cassette.to_jsonl(entries))
    again = Cassette.from_jsonl(["", *lines, "  "])
    assert again.size == 2
    assert again.take("lookup_order", "call", "c-1", args_digest(("o-1",), {})) == entries[0]
    with pytest.raises(ValueError, match="cassette line 2 is not a cassette entry"):
        Cassette.from_jsonl([lines[0], '{"resource_name": "t"}'])


def test_production_records_what_it_opted_into() -> None:
    recording = CassetteRecording(bootstrap="b", topic="t", record=("tool", "kb.search", "vector_store.read"))
    assert recording.records("tool", "lookup_order", "call")
    assert recording.records("vector_store", "kb", "search")
    assert recording.records("vector_store", "memory", "query")  # a read method, vector_store.read selected
    assert not recording.records("vector_store", "memory", "add")
    assert not recording.records("chat_model", "llm", "chat")
    assert CassetteRecording(bootstrap="b", topic="t", record=("llm",)).records("chat_model", "llm", "chat")


def test_the_window_reads_from_the_savepoint_offsets_to_the_end() -> None:
    window = CassetteWindow(topic="cassette", start_offsets={0: 5, 1: 7}, end_offsets={0: 9, 1: 7, 2: 3})
    assert window.ranges() == {0: (5, 9), 2: (0, 3)}
    assert window.size == 7


def test_results_travel_as_json_and_come_back_as_their_type() -> None:
    from airflow_flink_replay.core.cassette import ResultRefused, declared_result_types, decode_result

    value, codec = encode_result(CassetteSource(partition=1, offset=2))
    assert codec == "pydantic:airflow_flink_replay.core.cassette:CassetteSource"
    declared = declared_result_types(CassetteSource)
    assert decode_result(value, codec, declared) == CassetteSource(partition=1, offset=2)
    values, codec = encode_result([CassetteSource(partition=0, offset=1), CassetteSource(partition=0, offset=2)])
    assert codec.startswith("pydantic-list:") and decode_result(values, codec, declared)[1].offset == 2
    assert encode_result({"status": "paid"}) == ({"status": "paid"}, "json")
    with pytest.raises(ResultRefused, match="unknown cassette codec"):
        decode_result(1, "pickle:x:y", declared)


PLANTED_MODULE = "afr_planted_codec"


def _plant_module(folder: Path, marker: Path) -> None:
    """A module on ``sys.path`` whose import is visible: it writes ``marker``."""
    (folder / f"{PLANTED_MODULE}.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n"
        "from pydantic import BaseModel\n\nclass Reply(BaseModel):\n    text: str = ''\n"
    )


def test_a_record_naming_an_undeclared_module_is_refused_without_importing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_flink_replay.core.cassette import ResultRefused, declared_result_types, decode_result

    marker = tmp_path / "imported.txt"
    _plant_module(tmp_path, marker)
    monkeypatch.syspath_prepend(str(tmp_path))
    forged = CassetteEntry.model_validate_json(
        '{"resource_type": "tool", "resource_name": "lookup_order", "method": "call", "key": "c-1",'
        f' "args_digest": "d", "seq": 1, "result": {{"text": "hi"}}, "codec": "pydantic:{PLANTED_MODULE}:Reply"}}'
    )
    declared = declared_result_types(CassetteSource | None)
    with pytest.raises(ResultRefused, match=f"codec names '{PLANTED_MODULE}:Reply', not a declared result type"):
        decode_result(forged.result, forged.codec, declared)
    assert not marker.exists() and PLANTED_MODULE not in sys.modules
    # a declared type still decodes; a value that is not one is refused too (not a crash)
    value, codec = encode_result(CassetteSource(partition=1, offset=2))
    assert decode_result(value, codec, declared) == CassetteSource(partition=1, offset=2)
    with pytest.raises(ResultRefused, match="not a valid"):
        decode_result({"partition": -1}, codec, declared)
    with pytest.raises(ResultRefused, match="a list"):
        decode_result({"partition": 1}, f"pydantic-list:{codec.split(':', 1)[1]}", declared)


def test_declared_result_types_follow_the_annotation_and_the_build_s_module_name() -> None:
    from pydantic import BaseModel, create_model

    from airflow_flink_replay.core.cassette import declared_result_types, decode_result

    assert set(declared_result_types(list[CassetteSource] | dict[str, CassetteWindow] | None)) == {
        "airflow_flink_replay.core.cassette:CassetteSource", "airflow_flink_replay.core.cassette:CassetteWindow"}
    assert declared_result_types(BaseModel) == {} and declared_result_types(object) == {}
    # production's build and the replay's have content-hashed module names of their own: the class is the same
    replays = create_model("Reply", __module__="afr_build_bbbbbbbbbbbbbbbb.tools", text=(str, ""))
    produced = "pydantic-list:afr_build_aaaaaaaaaaaaaaaa.tools:Reply"
    assert decode_result([{"text": "t-1"}], produced, declared_result_types(list[replays])) == [replays(text="t-1")]
