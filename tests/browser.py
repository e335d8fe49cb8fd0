"""Headless Chromium driven over the DevTools Protocol (CDP), for tests that look at rendered pages.

``chromium --screenshot --virtual-time-budget=N`` waits for the page to go idle before it lets virtual
time run out; a single-page app that keeps polling (the Airflow UI) may never go idle, and then Chromium
never returns. Here the test decides when a page is ready: :meth:`Browser.wait_for` polls the live DOM in
real time until a predicate holds, or fails at a deadline with the DOM it saw last. Every CDP call has
a timeout, and the browser's whole process group is killed when the ``with`` block ends::

    with Browser(tmp_path / "chromium") as browser:
        browser.goto(url)
        dom = browser.wait_for_texts("verdict", "FAIL")
        browser.screenshot(tmp_path / "page.png")

Nothing here reaches the network by itself: Chromium runs with its background services switched off.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import websocket

CHROMIUM = Path("/usr/bin/chromium")

#: Background services that would reach the network, switched off (the same set the screenshot tests use).
NO_NETWORK_FLAGS = (
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
)

#: Set on a window before navigating away from it: a window without it is the new document.
_STALE_MARK = "__testsBrowserLeaving"

_SNAPSHOT_JS = """JSON.stringify({
  html: document.documentElement ? document.documentElement.outerHTML : "",
  text: document.body ? document.body.innerText : "",
  url: location.href,
  ready: document.readyState
})"""


class BrowserError(RuntimeError):
    """Chromium did not start, a CDP call failed or timed out, or the browser went away."""


@dataclass(frozen=True)
class Dom:
    """What the page showed at one moment: its serialized DOM, its rendered text, its URL and readyState."""

    html: str
    text: str
    url: str
    ready: str

    def contains(self, *texts: str) -> bool:
        """Whether every one of ``texts`` occurs in the serialized DOM."""
        return all(t in self.html for t in texts)

    def missing(self, *texts: str) -> list[str]:
        """Those of ``texts`` that do not occur in the serialized DOM."""
        return [t for t in texts if t not in self.html]


class Browser:
    """One headless Chromium with one page, driven over CDP; use it as a context manager.

    ``profile_dir`` becomes Chromium's ``--user-data-dir`` (created if missing; Chromium's own log goes to
    ``<profile_dir>.log`` beside it). ``call_timeout`` bounds every CDP call, ``start_timeout`` the start.
    """

    def __init__(
        self,
        profile_dir: Path,
        *,
        width: int = 1600,
        height: int = 1000,
        chromium: Path = CHROMIUM,
        extra_flags: Iterable[str] = (),
        start_timeout: float = 60.0,
        call_timeout: float = 30.0,
    ) -> None:
        self.profile_dir = Path(profile_dir)
        self.width, self.height = width, height
        self.chromium = Path(chromium)
        self.extra_flags = tuple(extra_flags)
        self.start_timeout = start_timeout
        self.call_timeout = call_timeout
        self.log_path = self.profile_dir.parent / f"{self.profile_dir.name}.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._ws: websocket.WebSocket | None = None
        self._session: str | None = None
        self._ids = itertools.count(1)

    # --- lifecycle

    def __enter__(self) -> Browser:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _start(self) -> None:
        if not self.chromium.exists():
            raise BrowserError(f"{self.chromium} is not installed: run `make system-deps` (as root it installs "
                               "Debian's chromium; otherwise `sudo apt-get install chromium`)")
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        port_file = self.profile_dir / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)  # a stale one from an earlier browser on this profile
        args = [
            str(self.chromium), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--remote-debugging-port=0", f"--user-data-dir={self.profile_dir}",
            f"--window-size={self.width},{self.height}", *NO_NETWORK_FLAGS, *self.extra_flags, "about:blank",
        ]
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + self.start_timeout
        lines: list[str] = []
        while True:
            if port_file.exists():
                lines = port_file.read_text().splitlines()
                if len(lines) >= 2 and lines[0].strip().isdigit():
                    break
            if self._proc.poll() is not None:
                raise BrowserError(f"chromium exited with {self._proc.returncode} at start: {self._log_tail()}")
            if time.monotonic() > deadline:
                raise BrowserError(f"chromium wrote no {port_file} within {self.start_timeout:.0f}s: "
                                   f"{self._log_tail()}")
            time.sleep(0.1)
        url = f"ws://127.0.0.1:{lines[0].strip()}{lines[1].strip()}"
        # No Origin header: Chromium refuses websocket clients that send a foreign one.
        self._ws = websocket.create_connection(url, timeout=self.call_timeout, suppress_origin=True)
        target = self._call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self._session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                   session=False)["sessionId"]
        self._call("Page.enable")
        self._call("Runtime.enable")
        self._call("Emulation.setDeviceMetricsOverride",
                   {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})

    def close(self) -> None:
        """Close the CDP connection and kill Chromium's whole process group (idempotent)."""
        if self._ws is not None:
            with contextlib.suppress(Exception):
                self._ws.close()
            self._ws = None
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        # Renderers and helpers share the group: make sure none outlives the browser process.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                break
            time.sleep(0.1)

    def _log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no chromium log)"

    # --- CDP

    def _call(
        self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None,
        session: bool = True,
    ) -> dict[str, Any]:
        """Send one CDP command and return its result; events that arrive meanwhile are dropped."""
        if self._ws is None:
            raise BrowserError(f"{method}: the browser is not running")
        msg_id = next(self._ids)
        message: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        limit = self.call_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        try:
            self._ws.send(json.dumps(message))
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BrowserError(f"CDP {method} got no answer within {limit:.0f}s")
                self._ws.settimeout(remaining)
                reply = json.loads(self._ws.recv())
                if reply.get("id") == msg_id:
                    break
        except websocket.WebSocketTimeoutException:
            raise BrowserError(f"CDP {method} got no answer within {limit:.0f}s") from None
        except (websocket.WebSocketException, OSError) as exc:
            raise BrowserError(f"CDP {method}: connection to chromium lost ({exc}): {self._log_tail()}") from exc
        if "error" in reply:
            raise BrowserError(f"CDP {method} failed: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    # --- pages

    def goto(self, url: str, *, timeout: float | None = None) -> None:
        """Navigate the page to ``url``; return once the new document has replaced the old one.

        That is not when the page is ready (a single-page app renders later): wait for that with
        :meth:`wait_for`. Until the new document is there, :meth:`dom` could still read the old one, so the old
        window is marked first and the navigation waits for a window without the mark.
        """
        limit = self.call_timeout if timeout is None else timeout
        self._call("Runtime.evaluate", {"expression": f"window.{_STALE_MARK} = true", "returnByValue": True})
        result = self._call("Page.navigate", {"url": url}, timeout=limit)
        if result.get("errorText"):
            raise BrowserError(f"navigating to {url} failed: {result['errorText']}")
        if not result.get("loaderId"):
            return  # a same-document navigation (only the fragment changed): the window stays
        deadline = time.monotonic() + limit
        while True:
            with contextlib.suppress(BrowserError):  # the context may be torn down in between
                check = self._call("Runtime.evaluate",
                                   {"expression": f"window.{_STALE_MARK} === undefined", "returnByValue": True})
                if check.get("result", {}).get("value") is True:
                    return
            if time.monotonic() > deadline:
                raise BrowserError(f"navigating to {url}: the old document was still there after {limit:.0f}s")
            time.sleep(0.1)

    def evaluate(self, expression: str, *, timeout: float | None = None) -> Any:
        """The value of the JavaScript ``expression`` in the page (a promise is awaited); a thrown error raises
        :class:`BrowserError` with its description."""
        result = self._call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                 "awaitPromise": True}, timeout=timeout)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise BrowserError(f"evaluating JavaScript failed: {details.get('exception', {}).get('description')}"
                               f" ({details.get('text')})")
        return result.get("result", {}).get("value")

    def dom(self) -> Dom:
        """The page's DOM and rendered text right now."""
        result = self._call("Runtime.evaluate", {"expression": _SNAPSHOT_JS, "returnByValue": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"reading the DOM failed: {result['exceptionDetails']}")
        data = json.loads(result["result"]["value"])
        return Dom(html=data["html"], text=data["text"], url=data["url"], ready=data["ready"])

    def wait_for(
        self, predicate: Callable[[Dom], bool], *, timeout: float = 60.0, interval: float = 0.5, what: str = ""
    ) -> Dom:
        """Poll the DOM in real time until ``predicate`` holds and return that DOM.

        At the deadline raise an AssertionError naming ``what`` with the tail of the last DOM seen. A DOM that
        cannot be read for a moment (the page is navigating) is retried until the deadline.
        """
        deadline = time.monotonic() + timeout
        last: Dom | None = None
        error: BrowserError | None = None
        while True:
            try:
                last = self.dom()
                error = None
                if predicate(last):
                    return last
            except BrowserError as exc:
                if self._proc is None or self._proc.poll() is not None:
                    raise
                error = exc
            if time.monotonic() >= deadline:
                break
            time.sleep(interval)
        seen = f"last DOM ({last.url}, {last.ready}): ...{last.html[-3000:]}" if last else "no DOM read"
        raise AssertionError(
            f"page did not show {what or 'what was expected'} within {timeout:.0f}s; {seen}"
            + (f"; last error: {error}" if error else "")
        )

    def wait_for_texts(self, *texts: str, timeout: float = 60.0) -> Dom:
        """Wait until every one of ``texts`` occurs in the serialized DOM; see :meth:`wait_for`."""
        state: dict[str, list[str]] = {"missing": list(texts)}

        def shows_all(dom: Dom) -> bool:
            state["missing"] = dom.missing(*texts)
            return not state["missing"]

        try:
            return self.wait_for(shows_all, timeout=timeout, what=f"all of {list(texts)}")
        except AssertionError as exc:
            raise AssertionError(f"missing {state['missing']}: {exc}") from None

    def screenshot(self, path: Path) -> Path:
        """Capture the viewport (``width`` x ``height``) as a PNG at ``path`` and return ``path``."""
        result = self._call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False},
                            timeout=max(self.call_timeout, 60.0))
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(result["data"]))
        return path
