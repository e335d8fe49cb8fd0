"""The policy proxies' call path (:func:`~airflow_flink_replay.flink.proxies.guarded_call`) with production's
cassette, for a resource the candidate changed: production's recorded answer matches the call, yet a changed
pure tool runs, a changed side-effecting tool is recorded, and every such call is audited as ``changed``; an
unchanged tool is still served the recording.

The proxies import Flink Agents, which only the Flink-side venv has (``.stack/flink-venv``, written by
``flink-replay stack up``): the script runs there in a subprocess — no stack, no Flink job (the proxies inside
real jobs: tests/integration/test_flink_side_proxies.py, test_cassette_replay.py). Skipped without that venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
FLINK_PYTHON = Path(os.environ.get("FLINK_REPLAY_STACK_DIR") or ROOT / ".stack") / "flink-venv" / "bin" / "python"

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from airflow_flink_replay.core.audit import args_digest, read_audit
    from airflow_flink_replay.core.cassette import Cassette, CassetteEntry
    from airflow_flink_replay.core.policy import ReplayPolicy
    from airflow_flink_replay.flink.proxies import guarded_call

    audit_dir = sys.argv[1]
    ran = []

    def tool(name):
        def call(order):
            ran.append(name)
            return f"{name}: the candidate's answer for {order}"
        return call

    def cassette():  # production answered every tool once for order o-1, key k-1
        return Cassette(
            CassetteEntry.recorded(resource_type="tool", resource_name=name, method="call", key="k-1",
                                   args_digest=args_digest((), {"order": "o-1"}), seq=1,
                                   result=f"{name}: production's recorded answer")
            for name in ("lookup_rate", "ship_label", "track_parcel")
        )

    policy = ReplayPolicy(pure_tools=["lookup_rate"]).with_changed(["lookup_rate", "ship_label"])
    out = {}
    served = cassette()
    for name in ("lookup_rate", "ship_label", "track_parcel"):
        out[name] = guarded_call(policy=policy, variant="candidate", audit_dir=audit_dir, resource_type="tool",
                                 resource_name=name, method="call", key="k-1", call=tool(name), args=(),
                                 kwargs={"order": "o-1"}, cassette=served,
                                 stage="analysis" if name == "track_parcel" else "")
    out["ran"] = ran
    out["left_in_cassette"] = served.remaining()
    out["audit"] = {r.resource_name: [r.decision, r.outcome, r.changed, r.fallback, r.stage]
                    for r in read_audit(audit_dir)}
    print(json.dumps(out))
    """
)


def _run_on_the_flink_side(script: str, audit_dir: Path) -> dict[str, Any]:
    """Run ``script`` in the Flink-side Python with ``audit_dir`` as its argument; what it printed last (JSON)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([str(FLINK_PYTHON), "-c", script, str(audit_dir)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.skipif(not FLINK_PYTHON.exists(), reason="no Flink-side venv (flink-replay stack up writes it)")
def test_a_changed_tool_is_never_served_production_s_recording(tmp_path: Path) -> None:
    out = _run_on_the_flink_side(SCRIPT, tmp_path / "audit")
    # the changed pure tool ran its own code although production's answer matched the call
    assert out["lookup_rate"] == "lookup_rate: the candidate's answer for o-1"
    # the changed side-effecting tool was not executed and not replayed: its stand-in
    assert out["ship_label"] == "[replay: tool 'ship_label' recorded, not executed]"
    # the unchanged tool: production's recorded answer, as before
    assert out["track_parcel"] == "track_parcel: production's recorded answer"
    assert out["ran"] == ["lookup_rate"] and out["left_in_cassette"] == 2
    assert out["audit"] == {  # a pipeline's call names its stage; a job of one agent's has none
        "lookup_rate": ["allow", "ok", True, None, None],
        "ship_label": ["record", "recorded", True, None, None],
        "track_parcel": ["replay", "replayed", False, None, "analysis"],
    }


REWORDED_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from airflow_flink_replay.core.audit import read_audit
    from airflow_flink_replay.core.call_match import CallArguments
    from airflow_flink_replay.core.cassette import Cassette, CassetteEntry
    from airflow_flink_replay.core.policy import ReplayPolicy
    from airflow_flink_replay.flink.proxies import guarded_call

    audit_dir = sys.argv[1]

    def recorded(review, reason, result, seq):
        arguments = CallArguments.of((), {"review_id": review, "customer": "c-1", "reason": reason})
        return CassetteEntry.recorded(resource_type="tool", resource_name="notify_support", method="call", key="c-1",
                                      args_digest=arguments.digest, seq=seq, result=result, arguments=arguments)

    def never(**kwargs):
        raise AssertionError("a replay never calls notify_support")

    out = {}
    for variant, policy in (("baseline", ReplayPolicy()),
                            ("candidate", ReplayPolicy(call_match={"notify_support": {"free_text": ["reason"],
                                                                                       "min_similarity": 0.99}}))):
        cassette = Cassette([recorded("r-1", "negative (1/5): the blender arrived broken, lid missing", "t-1", 1),
                             recorded("r-2", "negative (2/5): the kettle leaks from the bottom", "t-2", 2)])
        out[variant] = [
            guarded_call(policy=policy, variant=variant, audit_dir=audit_dir, resource_type="tool",
                         resource_name="notify_support", method="call", key="c-1", call=never, args=(),
                         kwargs={"review_id": review, "customer": "c-1", "reason": reason}, cassette=cassette)
            for review, reason in (("r-1", "negative, 1/5: the blender arrived broken"),
                                   ("r-2", "negative (2/5): the kettle leaks from the bottom"),
                                   ("r-3", "negative (1/5): the blender arrived broken, lid missing"))
        ]
    out["audit"] = [[r.variant, r.outcome, r.matched, r.similarity, r.identity_digest]
                    for r in read_audit(audit_dir)]  # one file per variant, in call order
    print(json.dumps(out))
    """
)


@pytest.mark.skipif(not FLINK_PYTHON.exists(), reason="no Flink-side venv (flink-replay stack up writes it)")
def test_a_reworded_reason_is_served_production_s_result_and_the_audit_says_how(tmp_path: Path) -> None:
    out = _run_on_the_flink_side(REWORDED_SCRIPT, tmp_path / "audit")
    stand_in = "[replay: tool 'notify_support' recorded, not executed]"
    # the reworded reason of review r-1 is served by its ids; r-2 exactly; r-3 was never recorded
    assert out["baseline"] == ["t-1", "t-2", stand_in]
    # the spec asks reasons to read nearly alike: the reworded one is unmatched
    assert out["candidate"] == [stand_in, "t-2", stand_in]
    audit = out["audit"]
    assert [row[:3] for row in audit] == [
        ["baseline", "replayed", "arguments"], ["baseline", "replayed", "exact"], ["baseline", "recorded", None],
        ["candidate", "recorded", None], ["candidate", "replayed", "exact"], ["candidate", "recorded", None],
    ]
    assert 0.5 < audit[0][3] < 1.0 and audit[1][3] is None
    # the identifying arguments digest alike in both variants, whatever the reason's wording
    assert audit[0][4] == audit[3][4] and audit[0][4] != audit[1][4] and all(row[4] for row in audit)


CODEC_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    folder = Path(sys.argv[2])
    sys.path.insert(0, str(folder))
    from flink_agents.api.chat_message import ChatMessage, MessageRole
    from flink_agents.plan.tools.function_tool import from_callable

    from airflow_flink_replay.core.audit import read_audit
    from airflow_flink_replay.core.call_match import CallArguments
    from airflow_flink_replay.core.cassette import Cassette, CassetteEntry, encode_result
    from airflow_flink_replay.core.policy import ReplayPolicy
    from airflow_flink_replay.flink import proxies
    import afr_codec_tools

    audit_dir = sys.argv[1]

    def entry(resource_type, name, seq, order, value, codec):  # a cassette topic record, as read from Kafka
        arguments = CallArguments.of((), {"order": order})
        return json.dumps({"resource_type": resource_type, "resource_name": name, "method": "call", "key": "",
                           "args_digest": arguments.digest, "seq": seq, "result": value, "codec": codec,
                           "arg_digests": dict(arguments.digests), "arg_texts": dict(arguments.texts)})

    quote, codec = encode_result(afr_codec_tools.Quote(price=7))
    lines = [entry("tool", "quote", 1, "o-1", {"text": "forged"}, "pydantic:afr_planted_codec:Reply"),
             entry("tool", "quote", 2, "o-2", quote, codec)]
    cassette = Cassette.from_jsonl(lines)
    proxies.load_cassette = lambda window_json: cassette  # the cassette topic's reader (Kafka) stands aside
    tool = from_callable(afr_codec_tools.quote)
    proxy = proxies.ToolPolicyProxy(func=tool.func, metadata=tool.metadata, afr_resource_name="quote",
                                    afr_variant="candidate", afr_audit_dir=audit_dir, afr_cassette="{}",
                                    afr_policy=ReplayPolicy().model_dump_json())
    out = {"forged": repr(proxy.call(order="o-1")), "declared": repr(proxy.call(order="o-2"))}
    message, codec = encode_result(ChatMessage(role=MessageRole.ASSISTANT, content="production's answer"))
    chat = Cassette.from_jsonl([entry("chat_model", "llm", 1, "o-1", message, codec)])
    served = proxies.guarded_call(policy=ReplayPolicy(by_name={"llm": "replay"}), variant="candidate",
                                  audit_dir=audit_dir, resource_type="chat_model", resource_name="llm", method="call",
                                  key="", call=None, args=(), kwargs={"order": "o-1"}, cassette=chat)
    out["chat"] = [type(served).__name__, served.content]
    out["counts"] = [cassette.served, cassette.unmatched]
    out["audit"] = [[r.resource_name, r.outcome, r.fallback, r.error] for r in read_audit(audit_dir)]
    out["imported"] = "afr_planted_codec" in sys.modules
    print(json.dumps(out))
    """
)


@pytest.mark.skipif(not FLINK_PYTHON.exists(), reason="no Flink-side venv (flink-replay stack up writes it)")
def test_a_record_s_codec_never_chooses_what_the_job_side_imports(tmp_path: Path) -> None:
    """A cassette record naming a module the job does not declare as a result type (one whose import writes a
    marker) is refused as unmatched, and the audit says why; the tool's declared return type and Flink Agents'
    chat message still decode."""
    marker = tmp_path / "imported.txt"
    (tmp_path / "afr_planted_codec.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n"
        "from pydantic import BaseModel\n\nclass Reply(BaseModel):\n    text: str = ''\n"
    )
    (tmp_path / "afr_codec_tools.py").write_text(
        "from pydantic import BaseModel\n\nclass Quote(BaseModel):\n    price: int = 0\n\n"
        'def quote(order: str) -> Quote:\n    """Quote an order."""\n    raise AssertionError("never called")\n'
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([str(FLINK_PYTHON), "-c", CODEC_SCRIPT, str(tmp_path / "audit"), str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not marker.exists() and out["imported"] is False
    assert out["forged"] == repr("[replay: tool 'quote' recorded, not executed]")  # unmatched: the tool's fallback
    assert out["declared"] == "Quote(price=7)"
    assert out["chat"] == ["ChatMessage", "production's answer"]
    assert out["counts"] == [1, 1]
    forged, declared, chat = out["audit"]
    assert forged[:3] == ["quote", "recorded", "record"]
    assert forged[3] == "result_refused: codec names 'afr_planted_codec:Reply', not a declared result type"
    assert declared == ["quote", "replayed", None, None] and chat == ["llm", "replayed", None, None]
