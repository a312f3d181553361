"""Screenshots of the Dagster UI for docs/dashboard.md: headless Chromium driven over the DevTools protocol.

    .venv/bin/python docs/tools/ui_screenshots.py [--base http://127.0.0.1:3000] [--out docs/img]

Start the UI first (`make ui`, or `dagster-webserver -w workspace.yaml` with the DAGSTER_HOME that
`make run` wrote). Each page is loaded, Dagster's first-visit dialog is dismissed, and a PNG is
written. Only loopback URLs are visited.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import websockets

# file -> (path, the label of a button to click once the page is there, or None)
PAGES = {
    "asset-graph.png": ("/asset-groups", None),
    "decision.png": ("/assets/switch_decision", None),
    "decision-plots.png": ("/assets/switch_decision", "Plots"),
    "benchmark-partitions.png": ("/assets/benchmark_run?view=partitions", None),
    "trend-charts.png": ("/assets/trend_charts", None),
}
CLICK = """
for (const b of document.querySelectorAll('button')) { if (b.innerText.trim() === %s) { b.click(); break; } }
"""
DISMISS = """
for (const b of document.querySelectorAll('button')) {
  if (['Skip', 'Dismiss', 'Close'].includes(b.innerText.trim())) { b.click(); }
}
"""


async def _capture(ws_url: str, url: str, out: Path, width: int, height: int, click: str | None) -> None:
    async with websockets.connect(ws_url, max_size=64 * 2**20) as ws:
        seq = 0

        async def call(method: str, params: dict | None = None) -> dict:
            nonlocal seq
            seq += 1
            await ws.send(json.dumps({"id": seq, "method": method, "params": params or {}}))
            while True:
                msg = json.loads(await ws.recv())
                if msg.get("id") == seq:
                    return msg.get("result", {})

        await call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        await call("Page.navigate", {"url": url})
        for _ in range(3):  # the dialog appears once the app has loaded
            await asyncio.sleep(4)
            await call("Runtime.evaluate", {"expression": DISMISS})
        if click:
            await call("Runtime.evaluate", {"expression": CLICK % json.dumps(click)})
        await asyncio.sleep(3)
        shot = await call("Page.captureScreenshot", {"format": "png"})
        out.write_bytes(base64.b64decode(shot["data"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="http://127.0.0.1:3000")
    parser.add_argument("--out", default="docs/img")
    parser.add_argument("--only", action="append", help="file name(s) of PAGES to take")
    args = parser.parse_args()
    if not args.base.startswith(("http://127.0.0.1", "http://localhost")):
        raise SystemExit("only loopback URLs")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        raise SystemExit("needs Debian's chromium")
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--remote-debugging-port=9333",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(50):
                try:
                    targets = json.loads(urllib.request.urlopen("http://127.0.0.1:9333/json").read())
                    break
                except OSError:
                    time.sleep(0.2)
            page = next(t for t in targets if t["type"] == "page")
            for name, (path, click) in PAGES.items():
                if args.only and name not in args.only:
                    continue
                out = Path(args.out) / name
                asyncio.run(_capture(page["webSocketDebuggerUrl"], args.base + path, out, 1600, 1000, click))
                print(f"{out}  <- {path}")
        finally:
            proc.kill()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
