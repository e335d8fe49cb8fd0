"""The unmediated-call guard in a fresh interpreter (an audit hook cannot be removed): a real local HTTP
server, real sockets, real files. The Flink Agents runtime context is a stand-in object carrying the plan
configuration (what ``ctx.config.get_str`` reads); the guard on a real TaskManager is exercised by
``tests/integration/test_unmediated_replay.py``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SCRIPT = textwrap.dedent(
    """
    import http.server, json, os, sys, tempfile, threading, urllib.request
    from pathlib import Path
    from airflow_flink_replay.flink import unmediated
    from airflow_flink_replay.flink.audit_context import set_current_key
    from airflow_flink_replay.exceptions import ReplayPolicyBlocked

    audit_dir, outside = sys.argv[1], sys.argv[2]
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        def log_message(self, *a):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"

    class Config:
        def __init__(self, entries): self.entries = entries
        def get_str(self, key, default=None): return self.entries.get(key, default)

    class Ctx:
        def __init__(self, entries): self.config = Config(entries)

    def replay(decision):
        return Ctx({unmediated.GUARD_CONFIG_KEY: unmediated.guard_entry(f"v-{decision}", audit_dir, decision)})

    def get(path):
        try:
            return urllib.request.urlopen(url + path, timeout=5).read().decode()
        except ReplayPolicyBlocked as exc:
            return "BLOCKED: " + str(exc)

    unmediated.install()
    out = {}
    set_current_key("cust-1")
    unmediated.arm(replay("block"))
    out["blocked"] = get("/blocked")
    unmediated.arm(Ctx({}))  # the next action on this thread is production's
    out["production"] = get("/production")
    unmediated.arm(replay("record"))
    out["recorded"] = get("/recorded")
    with unmediated.mediated():
        out["mediated"] = get("/mediated")
    result = {}
    other = threading.Thread(target=lambda: result.update(other=get("/other-thread")))
    other.start(); other.join()
    out.update(result)
    Path(outside).write_text("x")
    with open(os.devnull, "w") as fh:  # nowhere
        fh.write("discarded")
    mod = Path(tempfile.mkdtemp()) / "afr_guard_importtime.py"  # a module whose import writes a file
    mod.write_text(f"from pathlib import Path; Path({outside + '.import'!r}).write_text('import-time')")
    sys.path.insert(0, str(mod.parent))
    import afr_guard_importtime  # noqa: F401
    with open(Path(tempfile.gettempdir()) / "afr-guard-scratch.txt", "w") as fh:
        fh.write("temp is fine")
    Path(outside).read_text()
    unmediated.disarm()
    Path(outside + ".2").write_text("not armed")
    out["seen"] = seen
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("guard", numbered=True)
    outside = Path.home() / f".afr-guard-test-{tmp.name}"  # a path outside the temp folder
    try:
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(tmp / "audit"), str(outside)],
            capture_output=True, text=True, timeout=60,
        )
    finally:
        for p in (outside, Path(f"{outside}.2"), Path(f"{outside}.import")):
            p.unlink(missing_ok=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    files = sorted((tmp / "audit").glob("*.jsonl"))
    out["audit"] = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    out["outside"] = str(outside)
    return out


def test_block_aborts_before_the_request_leaves(run: dict) -> None:
    assert run["blocked"].startswith("BLOCKED: replay policy blocks an unmediated dns call")
    assert "/blocked" not in run["seen"]
    [rec] = [r for r in run["audit"] if r["variant"] == "v-block"]
    assert (rec["resource_type"], rec["resource_name"], rec["decision"], rec["outcome"], rec["key"]) == (
        "unmediated", "dns", "block", "blocked", "cust-1")
    assert "127.0.0.1" in rec["args_preview"]


def test_record_lets_it_happen_and_audits_dns_and_connect(run: dict) -> None:
    assert run["recorded"] == "ok" and "/recorded" in run["seen"]
    rec = [r for r in run["audit"] if r["variant"] == "v-record" and r["resource_name"] in ("dns", "socket")]
    assert [(r["resource_name"], r["method"], r["decision"]) for r in rec] == [
        ("dns", "socket.getaddrinfo", "record"), ("socket", "socket.connect", "record")]


def test_other_jobs_threads_and_mediated_calls_are_untouched(run: dict) -> None:
    assert run["production"] == run["mediated"] == run["other"] == "ok"
    assert {"/production", "/mediated", "/other-thread"} <= set(run["seen"])
    assert len([r for r in run["audit"] if r["resource_name"] in ("dns", "socket")]) == 3  # 1 blocked + 2 recorded


def test_file_writes_outside_temp_are_audited_reads_temp_devnull_and_imports_are_not(run: dict) -> None:
    files = [r for r in run["audit"] if r["resource_name"] == "file"]
    assert [(r["method"], json.loads(r["args_preview"])["args"]) for r in files] == [("open", [run["outside"]])]
