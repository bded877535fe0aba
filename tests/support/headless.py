"""A real headless Chromium, driven over the DevTools protocol on a pipe: open pages, watch them.

No websocket and no extra package: with --remote-debugging-pipe, Chromium reads protocol
messages (JSON, each ended by a NUL byte) on its fd 3 and writes on its fd 4. Everything a page
requests, logs or throws arrives as an event, so a test can prove that a report made no network
request and logged no error, then measure what it drew.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("DDPCHECK_CHROMIUM", "/usr/bin/chromium")
# Without these, Chromium on a machine with no network tries to reach update, sync and
# field-trial servers, and refuses to start as root.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
]

# What a test measures once a page has loaded: the verdict, the text, and each chart's size.
MEASURE = """JSON.stringify({
  verdict: (document.getElementById('verdict') || {}).textContent || null,
  text: document.body.innerText,
  charts: Array.from(document.querySelectorAll('svg.chart, img')).map(e => {
    const box = e.getBoundingClientRect();
    const shapes = e.querySelectorAll('path, rect, image, use').length;
    return {tag: e.tagName, width: box.width, height: box.height, shapes: shapes};
  }),
  height: document.documentElement.scrollHeight,
})"""


class BrowserError(RuntimeError):
    pass


def unavailable() -> str | None:
    """Why no browser can start here, or None when one can."""
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        return f"{CHROMIUM} not found (apt-get install chromium)"
    return None


def _above_nine(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class Browser:
    """One headless Chromium for many pages (a start costs about a second)."""

    def __init__(self, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="wt16-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The child's ends above fd 9, so that putting them on 3 and 4 cannot close one of them.
        to_browser_r, from_browser_w = (_above_nine(fd) for fd in (to_browser_r, from_browser_w))
        # The shell puts the two pipe ends on fds 3 and 4, where Chromium looks for them.
        script = f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w} {to_browser_r}<&- {from_browser_w}>&-'
        self._proc = subprocess.Popen(
            [
                "bash",
                "-c",
                script,
                CHROMIUM,
                *FLAGS,
                "--remote-debugging-pipe",
                f"--user-data-dir={self._profile}",
            ],
            pass_fds=(to_browser_r, from_browser_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        try:
            self.call("Browser.getVersion")
        except BaseException:
            self.close()
            raise

    # -- the protocol
    def _send(self, method: str, params: dict[str, Any] | None, session: str | None) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        return self._next_id

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise BrowserError("Chromium closed the DevTools pipe (it exited)")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        wanted = self._send(method, params, session)
        deadline = time.monotonic() + self.timeout
        while True:
            message = self._receive(deadline)
            if message.get("id") == wanted:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def wait_for(self, method: str, session: str, since: int = 0) -> dict[str, Any]:
        """The first event `method` of `session` from the `since`-th event on, waiting for it if need be."""
        deadline = time.monotonic() + self.timeout
        for event in self.events[since:]:
            if event["method"] == method and event.get("sessionId") == session:
                return event
        while True:
            message = self._receive(deadline)
            if "method" in message:
                self.events.append(message)
                if message["method"] == method and message.get("sessionId") == session:
                    return message

    # -- pages
    def open(self, path: Path, width: int = 1100, height: int = 900) -> Page:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Network", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=session)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        first = len(self.events)
        url = path.resolve().as_uri()
        self.call("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired", session, first)
        measured = json.loads(
            self.call("Runtime.evaluate", {"expression": MEASURE, "returnByValue": True}, session)["result"][
                "value"
            ]
        )
        # Events that came with the navigation, this page's only.
        events = [e for e in self.events[first:] if e.get("sessionId") == session]
        return Page(self, target, session, url, measured, events)

    def close(self) -> None:
        try:
            if self._proc.poll() is None:
                self._send("Browser.close", None, None)
                self._proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            if self._proc.poll() is None:
                os.killpg(self._proc.pid, 9)
                self._proc.wait()
            for fd in (self._to_browser, self._from_browser):
                with contextlib.suppress(OSError):
                    os.close(fd)
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Page:
    def __init__(
        self,
        browser: Browser,
        target: str,
        session: str,
        url: str,
        measured: dict[str, Any],
        events: list[dict[str, Any]],
    ) -> None:
        self.browser, self.target, self.session, self.url = browser, target, session, url
        self.verdict: str | None = measured["verdict"]
        self.text: str = measured["text"]
        self.charts: list[dict[str, Any]] = measured["charts"]
        self.height: int = measured["height"]
        self.events = events

    def requests(self) -> list[str]:
        """Every URL the page asked for, the page itself included."""
        return [
            e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"
        ]

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and browser log errors (a blocked fetch is one)."""
        found = []
        for e in self.events:
            p = e["params"]
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                found.append(
                    " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                )
            elif e["method"] == "Runtime.exceptionThrown":
                found.append(p["exceptionDetails"].get("text", "exception"))
            elif e["method"] == "Log.entryAdded" and p["entry"].get("level") == "error":
                found.append(p["entry"].get("text", ""))
            elif e["method"] == "Network.loadingFailed":
                found.append(f"loading failed: {p.get('errorText')}")
        return found

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable)."""
        result = self.browser.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, self.session
        )
        return result["result"].get("value")

    def screenshot(self, path: Path, height: int | None = None, scale: float = 1.0) -> None:
        """A PNG of the page from the top, `height` CSS pixels of it (default: the whole page)."""
        clip = {"x": 0, "y": 0, "width": 1100, "height": height or self.height, "scale": scale}
        shot = self.browser.call(
            "Page.captureScreenshot",
            {"format": "png", "clip": clip, "captureBeyondViewport": True},
            self.session,
        )
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        self.browser.call("Target.closeTarget", {"targetId": self.target})
