"""A headless Chromium driven over the DevTools protocol on a pipe (no websocket, no extra package).

Chromium started with `--remote-debugging-pipe` reads protocol commands from fd 3 and writes
replies and events to fd 4, each message a JSON object ended by a NUL byte. That is all a test
needs to open a page with the network blocked, collect console errors, evaluate script and take
a screenshot, with Debian's `chromium` and nothing downloaded.

    with Browser.launch() as browser:
        page = browser.open(Path("report.html").as_uri())
        page.wait_for("document.body.dataset.rendered !== undefined")
        page.screenshot(Path("report.png"))
        assert not browser.errors
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


class BrowserError(RuntimeError):
    """The browser could not be started or did not answer as the protocol says."""


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class Browser:
    process: subprocess.Popen[bytes]
    to_browser: Any
    from_browser: Any
    profile: tempfile.TemporaryDirectory[str]
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    blocked: list[str] = field(default_factory=list)  # requests that tried to leave the machine
    _next_id: int = 0
    _buffer: bytes = b""
    _session: str | None = None

    @classmethod
    def launch(cls, executable: str | None = None) -> Browser:
        executable = executable or find_chromium()
        if executable is None:
            raise BrowserError(
                "no chromium on PATH: run make test as root (it installs it), "
                "or apt-get install -y chromium"
            )
        profile = tempfile.TemporaryDirectory(prefix="wmo-chromium-")
        # fds 3 and 4 of the child: it reads commands from 3 and writes to 4.
        command_read, command_write = os.pipe()
        reply_read, reply_write = os.pipe()
        args = [
            executable,
            "--headless=new",
            "--no-sandbox",  # tests run as root in CI
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile.name}",
            # the network is blocked three ways: no proxy that works, no name that resolves,
            # and every request the page makes is answered by the test (see open()).
            "--proxy-server=http://127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "about:blank",
        ]

        def wire_fds() -> None:  # in the child, before exec (and before unlisted fds close)
            high_read, high_write = os.dup(command_read), os.dup(reply_write)  # never 3 or 4
            os.dup2(high_read, 3)
            os.dup2(high_write, 4)

        process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4, command_read, reply_write),
            preexec_fn=wire_fds,
        )
        os.close(command_read)
        os.close(reply_write)
        browser = cls(
            process,
            os.fdopen(command_write, "wb", buffering=0),
            os.fdopen(reply_read, "rb", buffering=0),
            profile,
        )
        browser.call("Browser.getVersion")
        return browser

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(BrowserError, OSError):
            self.call("Browser.close", timeout=5)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.to_browser.close()
        self.from_browser.close()
        self.profile.cleanup()

    # -- protocol -----------------------------------------------------------------------------

    def send(self, method: str, params: dict[str, Any] | None = None, session: bool = False) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self._session:
            message["sessionId"] = self._session
        self.to_browser.write(json.dumps(message).encode() + b"\0")
        return self._next_id

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session: bool = False,
        timeout: float = 60,
    ) -> dict[str, Any]:
        wanted = self.send(method, params, session)
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                raise BrowserError(f"{method}: no reply in {timeout} s")
            message = self._read()
            if message.get("id") == wanted:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self._event(message)

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = self.from_browser.read(1 << 16)
            if not chunk:
                raise BrowserError(f"chromium closed the pipe (exit code {self.process.poll()})")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _event(self, message: dict[str, Any]) -> None:
        method, params = message["method"], message.get("params", {})
        if method == "Fetch.requestPaused":
            url = params["request"]["url"]
            if url.startswith(("file:", "data:", "blob:", "about:")):
                self.send("Fetch.continueRequest", {"requestId": params["requestId"]}, True)
            else:
                self.blocked.append(url)
                self.send(
                    "Fetch.failRequest",
                    {"requestId": params["requestId"], "errorReason": "InternetDisconnected"},
                    True,
                )
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
            self.errors.append(f"console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            description = details.get("exception", {}).get("description", details.get("text"))
            self.errors.append(f"uncaught: {description}")
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"log: {entry.get('text')} {entry.get('url', '')}".strip())

    # -- a page -------------------------------------------------------------------------------

    def open(self, url: str, width: int = 1400, height: int = 900) -> Page:
        """A new tab with every non-local request failed (and recorded), then `url` loaded."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        self._session = attached["sessionId"]
        for method in ("Runtime.enable", "Log.enable", "Page.enable", "Network.enable"):
            self.call(method, session=True)
        self.call(
            "Network.emulateNetworkConditions",
            {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
            session=True,
        )
        self.call("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}, session=True)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=True,
        )
        self.call("Page.navigate", {"url": url}, session=True)
        return Page(self, width)


@dataclass
class Page:
    browser: Browser
    width: int

    def evaluate(self, expression: str, timeout: float = 60) -> Any:
        result = self.browser.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=True,
            timeout=timeout,
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 120) -> Any:
        """Poll until `expression` is truthy (it may throw while the page is still loading)."""
        deadline = time.monotonic() + timeout
        last_error: BrowserError | None = None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except BrowserError as error:
                value, last_error = None, error
            if value:
                return value
            time.sleep(0.1)
        raise BrowserError(
            f"waited {timeout} s for {expression!r} (last error: {last_error}); "
            f"console errors: {self.browser.errors}"
        )

    def screenshot(self, path: Path) -> Path:
        """The whole page (not just the viewport) as PNG."""
        metrics = self.browser.call("Page.getLayoutMetrics", session=True)
        height = int(metrics["cssContentSize"]["height"]) + 1
        self.browser.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=True,
        )
        shot = self.browser.call(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True},
            session=True,
            timeout=120,
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        return path
