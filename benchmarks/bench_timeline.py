"""serve's timeline on a run of 200 M spans over 64 ranks, in headless Chromium (issue 33,
item 1): first paint of the whole run, the server's time for zooms and pans down to exact
spans, and the server's peak memory.

    python benchmarks/bench_timeline.py [--dir /tmp/hotspan-timeline] [--spans 200e6]
                                        [--ranks 64] [--zooms 20] [--seed 0] [--cold]

    # as measured for docs/performance.md (the run generated once, then reused):
    flock /tmp/hotspan-bench.lock python benchmarks/bench_timeline.py --dir big/timeline

1. Generates the run once into DIR/run with ``bench_big.generate`` (the 200 M-span, 64-rank
   training loop of issue 23: about 3 GB of Parquet, a part of about 1 M spans a row group),
   reused when it is there.
2. Starts ``hotspan serve DIR`` in a process of its own. With ``--cold`` the run's saved
   timeline index (``.hotspan-timeline-*.npz`` in the run's folder) is removed first, so the
   server builds it (the first server ever to open a run): its time is printed.
3. Asks for the run's page once without a browser (the statistics and phases the page shows
   are then computed, as the server's warmer leaves them), then loads it in headless
   Chromium through the DevTools protocol and measures, with the page's own clock
   (``performance.now()``, from the page's request): when the page arrived, when the
   timeline's request left and came back, and when the canvas was drawn (``data-drawn``).
   Target: the whole run drawn at most 1 s after the page's request.
4. ``--zooms`` views asked from inside the page as the canvas asks them (same width), at
   scales from the whole run down to windows of exact spans, each at a random place (a pan):
   the server's time for each (the browser's Resource Timing, request start to response
   end), and the server process's CPU time over it (``/proc/PID/stat``: less noisy than wall
   time on a shared machine). Target: at most 300 ms each.
5. The server's peak resident memory (``VmHWM``): after the page's statistics and phases,
   and (reset then, Linux ``clear_refs``) over the timeline's requests. Target: at most 1 GiB.

A table of the figures and the targets last; the load average before and after.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent


# --------------------------------------------------------------------------- DevTools protocol


class DevTools:
    """Just enough of the Chrome DevTools protocol over a WebSocket (the standard library
    only: no client is a dependency of the project) to drive one page."""

    def __init__(self, ws_url: str) -> None:
        match = re.match(r"ws://([^/:]+):(\d+)(/.*)", ws_url)
        assert match, ws_url
        host, port, path = match.group(1), int(match.group(2)), match.group(3)
        self.sock = socket.create_connection((host, port), timeout=300)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        assert b" 101 " in head.split(b"\r\n", 1)[0], head
        self.next_id = 0

    def _send(self, text: str) -> None:
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        if n < 126:
            header = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 1 << 16:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(header + mask + masked)

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("DevTools closed the connection")
            out += chunk
        return out

    def _receive(self) -> dict:
        message = b""
        while True:
            first, second = self._exact(2)
            n = second & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._exact(8))[0]
            message += self._exact(n)
            if first & 0x80:  # the last frame of the message
                return json.loads(message)

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        mine = self.next_id
        self._send(json.dumps({"id": mine, "method": method, "params": params}))
        while True:
            reply = self._receive()
            if reply.get("id") == mine:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def evaluate(self, expression: str, timeout_s: float = 300):
        result = self.call(
            "Runtime.evaluate",
            expression=expression,
            awaitPromise=True,
            returnByValue=True,
            timeout=int(timeout_s * 1000),
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}...: {result['exceptionDetails']}")
        return result["result"].get("value")


class Browser:
    """Headless Chromium with a profile of its own and the DevTools port open."""

    def __init__(self, width: int = 1280, height: int = 900) -> None:
        binary = next(
            (
                shutil.which(n)
                for n in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(n)
            ),
            None,
        )
        if binary is None:
            sys.exit("bench_timeline: headless Chromium is not on PATH (apt-get install chromium)")
        self.profile = Path(tempfile.mkdtemp(prefix="hotspan-bench-chromium-"))
        self.proc = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
                f"--window-size={width},{height}",
                f"--user-data-dir={self.profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                sys.exit("bench_timeline: Chromium did not open its DevTools port")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as r:
            pages = [t for t in json.load(r) if t["type"] == "page"]
        self.page = DevTools(pages[0]["webSocketDebuggerUrl"])
        self.page.call("Page.enable")
        self.page.call("Runtime.enable")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


# --------------------------------------------------------------------------- the server


class Server:
    """``python -m hotspan serve DIR --port 0`` in a process of its own."""

    def __init__(self, directory: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "HOTSPAN_TOKEN"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hotspan", "serve", str(directory), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        deadline = time.monotonic() + 120
        line = ""
        while time.monotonic() < deadline:
            ready, _w, _x = select.select([self.proc.stdout], [], [], 1)
            if ready:
                line = self.proc.stdout.readline()
                break
            if self.proc.poll() is not None:
                break
        match = re.search(r"(http://\S+/)", line)
        if not match:
            self.stop()
            sys.exit(f"bench_timeline: hotspan serve announced no URL: {line!r}")
        self.url = match.group(1)

    def get(self, path: str, timeout: float = 900) -> tuple[float, bytes]:
        t = time.perf_counter()
        with urllib.request.urlopen(self.url + path.lstrip("/"), timeout=timeout) as r:
            body = r.read()
        return time.perf_counter() - t, body

    def reset_peak(self) -> bool:
        """Start the server's peak resident memory again from what it holds now (Linux:
        ``clear_refs`` 5); False where that cannot be done."""
        try:
            Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")
            return True
        except OSError:
            return False

    def cpu_s(self) -> float:
        """The server process's CPU time so far (user + system, all its threads), seconds:
        less noisy than wall time on a shared machine."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss(self) -> int:
        """The server's resident memory now, bytes (VmRSS)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def peak_rss(self) -> int:
        """The server's peak resident memory, bytes (VmHWM)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --------------------------------------------------------------------------- measures

#: Before the page's own scripts: note the moment the canvas is first drawn (its
#: ``data-drawn`` set), on the page's clock (ms from the page's request).
WATCH = r"""
new MutationObserver(function (_m, observer) {
  var box = document.getElementById('timeline-view');
  if (box && +box.dataset.drawn >= 1 && window.__hotspanDrawn === undefined) {
    window.__hotspanDrawn = performance.now();
    observer.disconnect();
  }
}).observe(document, {subtree: true, childList: true, attributes: true,
                      attributeFilter: ['data-drawn']});
"""

#: In the page: wait for the canvas's first drawing; then the page's own times (ms from the
#: page's request): the document's response, the timeline request's start and end, the drawing.
FIRST_PAINT = r"""
new Promise(function (resolve, reject) {
  var deadline = performance.now() + 1200000;
  (function poll() {
    var box = document.getElementById('timeline-view');
    if (window.__hotspanDrawn === undefined) {
      if (performance.now() > deadline) { reject(new Error('never drawn')); return; }
      setTimeout(poll, 20);
      return;
    }
    var nav = performance.getEntriesByType('navigation')[0];
    var asked = performance.getEntriesByType('resource').filter(function (e) {
      return e.name.indexOf('/timeline?') >= 0; })[0];
    resolve({drawn: window.__hotspanDrawn, page: nav.responseEnd,
             request: asked ? asked.requestStart : null, response: asked ? asked.responseEnd : null,
             url: asked ? asked.name : null, tracks: +box.dataset.tracks,
             spans: +box.dataset.spans, pixels: +box.dataset.pixels});
  })();
})
"""

#: In the page: ask one view as the canvas asks it; its Resource Timing and what it held.
ASK = r"""
(function (url) {
  return fetch(url, {credentials: 'same-origin'}).then(function (r) {
    if (!r.ok) throw new Error('HTTP ' + r.status + ' for ' + url);
    return r.json();
  }).then(function (body) {
    var e = performance.getEntriesByName(new URL(url, location.href).href).pop();
    var spans = 0, pixels = 0;
    body.tracks.forEach(function (t) { spans += t.spans.length; pixels += t.pixels.length; });
    return {ms: e.responseEnd - e.requestStart, wait: e.responseStart - e.requestStart,
            tracks: body.tracks.length, spans: spans, pixels: pixels};
  });
})(%s)
"""


def windows(first: int, last: int, count: int, seed: int) -> list[tuple[str, int, int]]:
    """``count`` windows (what, start, end): scales from the whole run down by 4x steps to
    windows of a few exact spans a track, each scale at random places (pans)."""
    import random

    rng = random.Random(seed)
    total = last - first
    scales = [4**k for k in range(1, 12) if total // 4**k >= 20_000]  # down to ~20 us
    out = []
    for i in range(count):
        scale = scales[i * len(scales) // count]
        length = total // scale
        start = first + rng.randrange(0, total - length)
        what = "zoom" if i == 0 or scales[(i - 1) * len(scales) // count] != scale else "pan"
        out.append((f"{what} 1/{scale}", start, start + length))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/hotspan-timeline"))
    parser.add_argument("--spans", type=float, default=200e6)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--zooms", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--cold", action="store_true", help="remove the run's saved timeline index first"
    )
    args = parser.parse_args()
    run = args.dir / "run"
    print("load average before:", Path("/proc/loadavg").read_text().strip(), flush=True)
    if not any(run.glob("rank=*/part-*.parquet")):
        sys.path.insert(0, str(HERE))
        import bench_big

        t = time.perf_counter()
        n = bench_big.generate(run, int(args.spans), args.ranks)
        print(f"generated {n:,} spans into {run} in {time.perf_counter() - t:.0f} s", flush=True)
    size = sum(p.stat().st_size for p in run.glob("rank=*/part-*.parquet"))
    print(f"run: {run} ({size / 2**30:.2f} GiB of Parquet)", flush=True)
    saved = sorted(run.glob(".hotspan-timeline-*.npz"))
    if args.cold:
        for path in saved:
            path.unlink()
    print(f"saved timeline index: {'removed (--cold)' if args.cold else saved or 'none'}")

    rows: list[tuple[str, str, str, str]] = []
    server = Server(args.dir)
    browser = None
    try:
        _t, body = server.get("v1/traces")
        (entry,) = json.loads(body)["traces"]
        rid = entry["id"]
        spans = entry.get("spans")
        print(f"serving {server.url} run {rid}: {spans} spans", flush=True)
        took, _b = server.get(f"runs/{rid}")  # the statistics and phases the page shows
        print(f"the run page without a browser (statistics, phases): {took:.1f} s", flush=True)
        before = server.peak_rss()
        rows.append(("server peak RSS: statistics, phases", f"{before / 2**20:.0f} MiB", "", ""))
        # from here on, the peak of what the timeline adds to what the server holds
        timeline_only = server.reset_peak()
        held = server.rss()
        print(f"server RSS when the timeline starts: {held / 2**20:.0f} MiB", flush=True)
        rows.append(("server RSS when the timeline starts", f"{held / 2**20:.0f} MiB", "", ""))

        browser = Browser()
        page = browser.page
        cpu = server.cpu_s()
        page.call("Page.addScriptToEvaluateOnNewDocument", source=WATCH)
        page.call("Page.navigate", url=f"{server.url}runs/{rid}")
        deadline = time.monotonic() + 1200
        while not str(page.evaluate("location.href")).startswith(server.url):
            if time.monotonic() > deadline:
                sys.exit("bench_timeline: the page never loaded")
            time.sleep(0.05)
        first = page.evaluate(FIRST_PAINT, timeout_s=1200)
        paint_cpu = server.cpu_s() - cpu
        own = first["response"] - first["request"] if first["request"] is not None else None
        print(
            f"first paint: {first['drawn']:.0f} ms after the page's request (page {first['page']:.0f} ms, "
            f"timeline request {first['request']:.0f}-{first['response']:.0f} ms: {own:.0f} ms); "
            f"{first['tracks']} tracks, {first['spans']} spans exact, {first['pixels']} pixels; "
            f"server CPU {paint_cpu * 1000:.0f} ms",
            flush=True,
        )
        rows.append(
            (
                "first paint of the whole run",
                f"{first['drawn']:.0f} ms",
                "<= 1000 ms",
                "ok" if first["drawn"] <= 1000 else "MISSED",
            )
        )
        rows.append(("  of which the timeline's request", f"{own:.0f} ms", "", ""))
        rows.append(("  server CPU, page and timeline", f"{paint_cpu * 1000:.0f} ms", "", ""))
        width = int(re.search(r"width=(\d+)", first["url"]).group(1))
        start = int(re.search(r"start_ns=(\d+)", first["url"]).group(1))
        end = int(re.search(r"end_ns=(\d+)", first["url"]).group(1))

        times = []
        cpus = []
        for what, lo, hi in windows(start, end, args.zooms, args.seed):
            url = f"/v1/traces/{rid}/timeline?start_ns={lo}&end_ns={hi}&width={width}"
            cpu = server.cpu_s()
            got = page.evaluate(ASK % json.dumps(url), timeout_s=1200)
            cpus.append((server.cpu_s() - cpu) * 1000)
            times.append(got["ms"])
            print(
                f"{what:>12}: {got['ms']:8.0f} ms (first byte {got['wait']:.0f} ms, server CPU "
                f"{cpus[-1]:.0f} ms) "
                f"{got['tracks']} tracks, {got['spans']} spans exact, {got['pixels']} pixels",
                flush=True,
            )
        worst = max(times)
        rows.append(
            (
                "zoom/pan: server CPU, median / slowest",
                f"{sorted(cpus)[len(cpus) // 2]:.0f} / {max(cpus):.0f} ms",
                "",
                "",
            )
        )
        rows.append(
            (
                f"zoom/pan, {len(times)} views: median",
                f"{sorted(times)[len(times) // 2]:.0f} ms",
                "",
                "",
            )
        )
        rows.append(
            (
                "zoom/pan: slowest",
                f"{worst:.0f} ms",
                "<= 300 ms each",
                "ok" if worst <= 300 else f"MISSED ({sum(t > 300 for t in times)} over)",
            )
        )
        peak = server.peak_rss()
        rows.append(
            (
                "server peak RSS: the timeline" if timeline_only else "server peak RSS",
                f"{peak / 2**20:.0f} MiB",
                "<= 1024 MiB",
                "ok" if peak <= 2**30 else "MISSED",
            )
        )
    finally:
        if browser is not None:
            browser.close()
        server.stop()
    print()
    print(f"{'what':40} {'measured':>12} {'target':>16}  verdict")
    for what, got, target, verdict in rows:
        print(f"{what:40} {got:>12} {target:>16}  {verdict}")
    print("load average after:", Path("/proc/loadavg").read_text().strip())


if __name__ == "__main__":
    main()
