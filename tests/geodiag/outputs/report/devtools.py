"""Headless chromium driven over the DevTools protocol (``--remote-debugging-pipe``): a
viewport of any width (``--window-size`` stops at 500 px, wider than a phone), a script
evaluated in the page whatever its Content-Security-Policy, and a full-page screenshot."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path


class Browser:
    """One headless chromium; :meth:`open` a page at a width, then :meth:`evaluate` and
    :meth:`screenshot` it. Use as a context manager."""

    def __init__(self, chromium: str, profile: Path) -> None:
        to_chrome, self._to_chrome = os.pipe()  # chromium reads commands on fd 3
        self._from_chrome, from_chrome = os.pipe()  # and writes answers on fd 4

        def pipes() -> None:
            # copies first: either end may be fd 3 or 4 already, and dup2 onto itself
            # would leave it closed on exec
            read_end, write_end = os.dup(to_chrome), os.dup(from_chrome)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        cmd = [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            "about:blank",
        ]
        self._proc = subprocess.Popen(
            cmd,
            preexec_fn=pipes,  # noqa: PLW1509 (no threads here)
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome)
        os.close(from_chrome)
        self._next_id, self._buffer, self.session = 0, b"", None
        self._events: list[str | None] = []  # events that came while a command waited
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.send("Page.enable")
        self.send("Page.setBypassCSP", enabled=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.session = None
            self.send("Browser.close")
        except (OSError, RuntimeError):
            pass
        self._proc.wait(timeout=30)
        os.close(self._to_chrome)
        os.close(self._from_chrome)

    def _message(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, **params) -> dict:
        """The result of one command (in the page's session once attached)."""
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params}
        if self.session is not None:
            msg["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        while True:
            answer = self._message()
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self._events.append(answer.get("method"))

    def _wait_for(self, method: str) -> None:
        """Until the event ``method`` has come (while a command waited, or now)."""
        while method not in self._events:
            self._events.append(self._message().get("method"))
        self._events.clear()

    def open(self, page: Path, width: int, height: int = 900) -> None:
        """Load ``page`` in a viewport ``width`` x ``height`` CSS px (a phone's below 600)."""
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=width < 600,
        )
        self._events.clear()
        self.send("Page.navigate", url=page.as_uri())
        self._wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (JSON-serializable)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"])
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """The whole page, as tall as its content, as a PNG at ``path``."""
        size = self.send("Page.getLayoutMetrics")["cssContentSize"]
        shot = self.send(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        return path
