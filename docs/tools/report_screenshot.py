"""Screenshots of the weekly report for the README: the written site opened in headless Chromium.

    strix report --out /tmp/report
    .venv/bin/python docs/tools/report_screenshot.py /tmp/report [--out docs/img/report-1280.png]
        [--phone docs/img/report-390.png] [--height 1400] [--through '#verdict']

The site is opened from its file (it needs no server); the page is left to draw every chart, then
captured at 1280 pixels wide (and at a phone's 390 when --phone is given): the first --height pixels,
or with --through the page from its top to the end of that element (e.g. the verdict with its
criteria and comparisons). Chromium is the system's (/usr/bin/chromium), driven by Playwright's
Python package: no browser is downloaded.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
# every chart of the page has drawn: each JSON block's target holds Vega's SVG
DRAWN = (
    "() => [...document.querySelectorAll('script.strix-chart')].every("
    "s => document.getElementById(s.dataset.target).querySelector('svg.marks'))"
)


def capture(site: Path, out: Path, *, width: int, height: int, through: str | None = None) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=1)
            page.goto((site / "index.html").resolve().as_uri())
            page.wait_for_function(DRAWN, timeout=60_000)
            page.wait_for_timeout(500)
            out.parent.mkdir(parents=True, exist_ok=True)
            if through:
                box = page.locator(through).first.bounding_box()
                if box is None:
                    raise SystemExit(f"{through}: not on the page")
                clip = {"x": 0, "y": 0, "width": width, "height": box["y"] + box["height"] + 16}
                page.screenshot(path=str(out), full_page=True, clip=clip)
            else:
                page.screenshot(path=str(out), full_page=False)
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the folder `strix report --out` wrote")
    parser.add_argument("--out", type=Path, default=Path("docs/img/report-1280.png"))
    parser.add_argument("--phone", type=Path, help="also a phone-width capture (390 pixels) here")
    parser.add_argument("--height", type=int, default=1400, help="pixels of the page captured (default 1400)")
    parser.add_argument("--through", help="capture from the top to the end of this element (a CSS selector)")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").is_file():
        parser.error(f"{args.site}: no index.html (write the site first: strix report --out {args.site})")
    capture(args.site, args.out, width=1280, height=args.height, through=args.through)
    print(f"wrote {args.out}")
    if args.phone:
        capture(args.site, args.phone, width=390, height=1600, through=args.through)
        print(f"wrote {args.phone}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
