"""Headless Chromium driven over the DevTools protocol through a pipe (``--remote-debugging-
pipe``: commands on the browser's fd 3, answers on its fd 4, each a JSON message ended by a
NUL byte), with the standard library alone: a page opened at a given viewport size, and
JavaScript evaluated in it until it answers what a test waits for."""

from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import time
from typing import Any

from _util import chromium


def _above(fd: int, low: int) -> int:
    """``fd`` moved to a number at least ``low``."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, low)
    os.close(fd)
    return moved


class Page:
    """One page of a headless Chromium of its own, ``width`` x ``height`` CSS pixels."""

    def __init__(self, tmp_path, width: int, height: int = 900) -> None:
        self._log = tmp_path / f"chromium-{width}.log"
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # Above fd 4, so that moving one end to 3 never overwrites the other before it moves.
        to_browser_r = _above(to_browser_r, 10)
        from_browser_w = _above(from_browser_w, 10)
        command = [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--remote-debugging-pipe",
            f"--window-size={width},{height}",
            f"--user-data-dir={tmp_path / f'cdp-profile-{width}'}",
            "about:blank",
        ]
        # The browser reads fd 3 and writes fd 4: the pipes' ends moved there by bash (dash
        # takes no fd above 9).
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w}', *command],
            pass_fds=(to_browser_r, from_browser_w),
            stdout=subprocess.DEVNULL,
            stderr=open(self._log, "wb"),  # noqa: SIM115 -- the browser's, closed with it
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next = 0
        self._session: str | None = None
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.send("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def send(self, method: str, timeout: float = 60, **params: Any) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if self._session is not None:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read(deadline)
            if answer.get("id") == self._next:
                if "error" in answer:
                    raise AssertionError(f"{method}: {answer['error']}")
                return answer.get("result", {})

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise AssertionError("Chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                log = self._log.read_text(errors="replace")[-3000:]
                raise AssertionError(f"Chromium closed its pipe; its log ends: {log}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            return None
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60, what: str | None = None) -> Any:
        """Evaluate ``expression`` until it gives something true (returned), failing after
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what or expression}")
            time.sleep(0.05)

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (AssertionError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)

    def __enter__(self) -> "Page":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: JavaScript: how a document fits the viewport, and where the timeline's drawing ends.
#: ``doc``: the document holding the timeline (the page's own, or a frame's). The plot's
#: rightmost painted column is read back from the canvas (the end of the run, drawn).
FIT_JS = r"""
(function (doc) {
  var top = document.documentElement;
  var box = doc && doc.getElementById('timeline-view');
  if (!box || !(+box.dataset.drawn > 0)) return null;
  var canvas = box.querySelector('canvas');
  var rect = canvas.getBoundingClientRect();
  var frameLeft = 0;
  if (doc !== document) frameLeft = doc.defaultView.frameElement.getBoundingClientRect().left;
  var g = canvas.getContext('2d');
  var data = g.getImageData(0, 0, canvas.width, canvas.height).data;
  var painted = -1;
  for (var x = canvas.width - 1; x >= 0 && painted < 0; x--) {
    for (var y = 0; y < canvas.height; y++) {
      var i = (y * canvas.width + x) * 4;
      // a span's colour: neither the track's grey background nor blank
      if (data[i + 3] > 0 && !(data[i] === 0xf4 && data[i + 1] === 0xf6 && data[i + 2] === 0xf8)) {
        painted = x; break;
      }
    }
  }
  var inner = doc.documentElement;
  return {
    scrollWidth: top.scrollWidth, clientWidth: top.clientWidth,
    innerScrollWidth: inner.scrollWidth, innerClientWidth: inner.clientWidth,
    canvasLeft: frameLeft + rect.left, canvasRight: frameLeft + rect.right,
    canvasWidth: canvas.width, painted: painted,
    viewport: window.innerWidth
  };
})(%s)
"""
