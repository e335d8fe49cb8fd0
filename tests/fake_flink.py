"""A scripted Flink REST endpoint for unit tests: a real local HTTP server playing Flink.

The server (``http.server`` in a thread) answers scripted responses per path, so 503s, slow answers and
Flink-shaped errors can be injected; everything else (requests, aiohttp, tenacity, pydantic) is real.
Use the ``fake`` fixture (``from tests.fake_flink import fake as fake``) for a served ``FakeFlink`` and its
URL, ``make_hook`` for a ``FlinkRestHook`` on it with short backoffs. ``JOB``, ``JAVA_ERROR`` and
``PYTHON_WORKER_ERROR`` are the Flink-shaped job details, Java error text and Python worker failure the tests
script answers with.

Tests stay independent of the machine's speed: an answer scripted ``HELD`` is never sent while the test
runs (the fixture lets it go at teardown), so a client timeout always fires whatever the timeout and the
load; and ``FakeFlink.settle()`` waits until every request a client has sent is counted, so request
counts taken after a client gave up are exact (the server may read a request well after the client sent it).
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from airflow_flink_replay.hooks.flink_rest import FlinkRestHook, FlinkRestSettings

JAVA_ERROR = (
    "org.apache.flink.runtime.rest.handler.RestHandlerException: Could not execute application.\n"
    "\tat org.apache.flink.runtime.webmonitor.handlers.JarRunHandler.lambda$handleRequest$1(JarRunHandler.java:114)\n"
    "\tat java.base/java.lang.Thread.run(Thread.java:840)\n"
    "Caused by: java.lang.IllegalStateException: Cannot map checkpoint/savepoint state for operator abc\n"
    "\t... 4 more\n"
)

#: A Python worker's failure as Flink 2.2 reports it in ``exceptionHistory`` (from a real job, shortened): Java
#: exceptions whose message holds the worker's traceback, Beam's and PyFlink's frames first, the job's module after.
PYTHON_WORKER_ERROR = (
    "org.apache.flink.runtime.taskmanager.AsynchronousException: Caught exception while processing timer.\n"
    "\tat org.apache.flink.streaming.runtime.tasks.StreamTask.invokeProcessingTimeCallback(StreamTask.java:1862)\n"
    "Caused by: java.lang.RuntimeException: Error while waiting for BeamPythonFunctionRunner flush\n"
    "\t... 15 more\n"
    "Caused by: java.util.concurrent.ExecutionException: java.lang.RuntimeException: Error received from SDK harness "
    "for instruction 1: Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.11/site-packages/apache_beam/runners/worker/sdk_worker.py", line 311, in _execute\n'
    "    response = task()\n"
    "               ^^^^^^\n"
    '  File "pyflink/fn_execution/beam/beam_operations_fast.pyx", line 252, in pyflink.fn_execution.beam.'
    "beam_operations_fast.StatelessFunctionOperation.generate_operation\n"
    '  File "/tmp/python-files/afr_build_8392043e/gateway_import.py", line 18, in <module>\n'
    "    from flink_agents.api.core_options import AgentExecutionOptions\n"
    '  File "/venv/lib/python3.11/site-packages/flink_agents/api/core_options.py", line 61, in __init__\n'
    "    jvm = get_gateway().jvm\n"
    "          ^^^^^^^^^^^^^\n"
    '  File "/venv/lib/python3.11/site-packages/pyflink/java_gateway.py", line 85, in launch_gateway\n'
    '    raise Exception("It\'s launching the PythonGatewayServer during Python UDF execution "\n'
    "Exception: It's launching the PythonGatewayServer during Python UDF execution which is unexpected. It usually "
    "happens when the job codes are in the top level of the Python script file and are not enclosed in a `if name "
    "== 'main'` statement.\n"
    "\n"
    "\tat java.base/java.util.concurrent.CompletableFuture.reportGet(CompletableFuture.java:396)\n"
    "\t... 3 more\n"
)

JOB = {
    "jid": "j1",
    "name": "prod",
    "state": "RUNNING",
    "start-time": 1,
    "end-time": -1,
    "maxParallelism": -1,
    "timestamps": {"RUNNING": 5},
    "vertices": [
        {"id": "v1", "name": "Source: in", "parallelism": 1, "maxParallelism": 128, "status": "RUNNING"},
        {"id": "v2", "name": "action-execute-operator -> Map", "parallelism": 2, "maxParallelism": 256,
         "status": "RUNNING"},
    ],
}  # fmt: skip

#: The delay of an answer held until the test releases it (``FakeFlink.release``; the ``fake`` fixture
#: releases at teardown): the client's timeout fires first however slow the machine is.
HELD = math.inf
#: How long a held answer waits for its release at most (a test that forgets to release still ends).
HOLD_LIMIT = 300.0
#: The path of ``settle()``'s own request; never counted nor recorded.
SETTLE_PATH = "/__fake_flink_settle__"


class FakeFlink:
    """Scripted answers: ``routes[(method, path)]`` is a list of (status, body, delay) used in turn.

    A route path ending in ``*`` answers every path with that prefix (ids the code under test derives).
    Every request's body is recorded in ``bodies[(method, path)]`` (JSON decoded, else the raw bytes).
    A delay of ``HELD`` holds the answer until ``release()``.
    """

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[tuple[int, Any, float]]] = {}
        self.calls: dict[tuple[str, str], int] = defaultdict(int)
        self.bodies: dict[tuple[str, str], list[Any]] = defaultdict(list)
        self.headers: list[dict[str, str]] = []
        self.released = threading.Event()
        self.address: tuple[str, int] | None = None  # set by serve()
        self._unread = 0  # connections accepted whose request is not counted yet
        self._read = threading.Condition()

    def release(self) -> None:
        """Send the answers held so far and from now on (to clients that have long given up on them)."""
        self.released.set()

    def accepted(self) -> None:
        """The server accepted a connection (in its accept loop, before the handler thread starts)."""
        with self._read:
            self._unread += 1

    def read(self) -> None:
        """A connection's request is counted (or the connection closed without one)."""
        with self._read:
            self._unread -= 1
            self._read.notify_all()

    def settle(self, timeout: float = 120.0) -> None:
        """Return once every request sent to this server before the call is counted in ``calls``.

        The server accepts connections one at a time, in the order they arrived: once settle's own request
        is answered, every earlier connection has been accepted; then this waits until each has been read.
        Call it after the client under test returned (a client that timed out does not wait for the server).
        """
        assert self.address is not None, "settle() needs a served FakeFlink"
        conn = http.client.HTTPConnection(*self.address, timeout=timeout)
        try:
            conn.request("GET", SETTLE_PATH)
            conn.getresponse().read()
        finally:
            conn.close()
        with self._read:
            assert self._read.wait_for(lambda: self._unread == 0, timeout), "requests still unread: server stuck?"

    def on(self, method: str, path: str, *answers: tuple[int, Any] | tuple[int, Any, float]) -> None:
        self.routes[(method, path)] = [(a[0], a[1], a[2] if len(a) > 2 else 0.0) for a in answers]  # type: ignore[misc]

    def record(self, method: str, path: str, raw: bytes) -> None:
        try:
            self.bodies[(method, path)].append(json.loads(raw) if raw else None)
        except ValueError:
            self.bodies[(method, path)].append(raw)

    def answer(self, method: str, path: str) -> tuple[int, Any, float]:
        with self._read:
            self.calls[(method, path)] += 1
        answers = self.routes.get((method, path))
        if answers is None:
            prefixed = [k for k in self.routes if k[0] == method and k[1].endswith("*") and path.startswith(k[1][:-1])]
            answers = self.routes[prefixed[0]] if prefixed else None
        if not answers:
            return 404, {"errors": ["Not found: " + path]}, 0.0
        return answers.pop(0) if len(answers) > 1 else answers[0]

    def paths(self, method: str) -> list[str]:
        """Paths called with ``method``."""
        return [p for (m, p) in self.calls if m == method]


def serve(state: FakeFlink, port: int = 0) -> ThreadingHTTPServer:
    """Serve ``state`` on 127.0.0.1:``port`` (0: any free port) in a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        read = False

        def handle(self) -> None:
            try:
                super().handle()
            finally:
                if not self.read:  # closed before sending a request
                    state.read()

        def _serve(self) -> None:
            status: int
            body: Any
            delay: float
            if self.path == SETTLE_PATH:
                status, body, delay = 200, {}, 0.0
            else:
                state.headers.append(dict(self.headers))
                length = int(self.headers.get("Content-Length") or 0)
                state.record(self.command, self.path, self.rfile.read(length) if length else b"")
                status, body, delay = state.answer(self.command, self.path)
            self.read = True
            state.read()
            if delay == HELD:
                state.released.wait(HOLD_LIMIT)
            elif delay:
                time.sleep(delay)
            payload = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass

        do_GET = do_POST = do_PATCH = do_DELETE = _serve

        def log_message(self, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def process_request(self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any) -> None:
            state.accepted()  # counted in the accept loop, so settle() knows of it before its own request
            super().process_request(request, client_address)

    server = Server(("127.0.0.1", port), Handler)
    state.address = ("127.0.0.1", server.server_address[1])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def fake() -> Iterator[tuple[FakeFlink, str]]:
    state = FakeFlink()
    server = serve(state)
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    state.release()
    server.shutdown()
    server.server_close()


def make_hook(url: str, **kwargs: Any) -> FlinkRestHook:
    settings = FlinkRestSettings(base_url=url, retries=kwargs.pop("retries", 2), backoff_factor=0.01, **kwargs)
    return FlinkRestHook(settings=settings)
