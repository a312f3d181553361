"""The report's HTML pieces: every value from the warehouse escaped, times in the configured zone,
numbers with their units and intervals, and the page frame with its Content-Security-Policy."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from strix_pipeline.units import gib_text

# C0 controls (but tab and newline) and C1 controls are not text in HTML: shown as their escapes
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")

STYLE = """
:root{color-scheme:light dark;--fg:#111;--bg:#fff;--muted:#555;--line:#bbb;--link:#0645ad}
@media (prefers-color-scheme:dark){:root{--fg:#eee;--bg:#121212;--muted:#aaa;--line:#555;--link:#8ab4f8}}
*{box-sizing:border-box}
body{font-family:system-ui,sans-serif;line-height:1.45;color:var(--fg);background:var(--bg);
max-width:80rem;margin:0 auto;padding:0 1rem 3rem}
a{color:var(--link);text-decoration:underline}
a:focus-visible,summary:focus-visible{outline:3px solid var(--fg);outline-offset:2px}
.skip{position:absolute;left:-999px}.skip:focus{left:1rem;top:1rem;background:var(--bg);padding:.5rem}
nav ul{display:flex;flex-wrap:wrap;gap:.25rem 1rem;list-style:none;padding:0}
.verdict{font-size:1.4rem;border:3px solid var(--fg);padding:.75rem 1rem;margin:1rem 0}
.verdict strong{text-transform:uppercase;letter-spacing:.05em}
.muted{color:var(--muted)}
.scroll{overflow-x:auto;max-width:100%}
summary{cursor:pointer}summary h2{display:inline;font-size:1.2rem}
table{border-collapse:collapse;margin:.5rem 0 1rem;font-variant-numeric:tabular-nums}
th,td{border:1px solid var(--line);padding:.3rem .5rem;text-align:left;vertical-align:top}
th{font-weight:600}
td.num{text-align:right}
td a,.nowrap{white-space:nowrap}
/* a run's facts hold digests and command lines: they break anywhere rather than widen the page */
.facts td{overflow-wrap:anywhere}
pre{white-space:pre-wrap;word-break:break-all;border:1px solid var(--line);padding:.5rem;overflow-x:auto}
.chart{margin:1rem 0 2rem}
h2{border-bottom:2px solid var(--line);padding-bottom:.2rem;margin-top:2.5rem}
.verdict-sentence{font-size:1.3rem;line-height:1.4;font-weight:600;max-width:60rem;margin:.5rem 0 1rem}
table.criteria{width:100%;table-layout:fixed}
.criteria td{overflow-wrap:anywhere}
.criteria td a{white-space:normal}
.criteria .c-1{overflow-wrap:normal}
/* the forest plot is as wide as its box: vega-embed makes its box inline-block, so as wide as the plot */
#chart-forest{display:block;width:100%}
@media (min-width:60.01rem){
.criteria .c-0{width:15rem}.criteria .c-1{width:6.5rem}.criteria .c-2,.criteria .c-3{width:6.5rem}
.criteria .c-4{width:9rem}.criteria .c-6{width:11rem}
.criteria tr.status-fail .c-1{border-left:4px solid #c62828}
.criteria tr.status-pass .c-1{border-left:4px solid #2e7d32}
.sidebyside .c-0{width:13rem}.sidebyside .c-1,.sidebyside .c-2,.sidebyside .c-3{width:auto}
.sidebyside .c-4,.sidebyside .c-5{width:9rem}
}
/* a narrow screen: each criterion a card, each cell labelled, nothing left out */
@media (max-width:60rem){
table.criteria,.criteria tbody,.criteria tr,.criteria td{display:block;width:auto}
.criteria thead{display:none}
.criteria tr{border:2px solid var(--line);margin:0 0 1rem;padding:.5rem .75rem}
.criteria tr.status-fail{border-left:6px solid #c62828}.criteria tr.status-pass{border-left:6px solid #2e7d32}
.criteria td{border:0;padding:.15rem 0}
.criteria td::before{content:attr(data-label) ": ";font-weight:600;color:var(--muted)}
.criteria td.c-0::before{content:none}
}
.answer-word{font-size:1.5rem;margin-right:.3rem}
#answer{border:3px solid var(--fg);padding:.5rem 1rem;margin:1rem 0}
.caveats{margin:.25rem 0 .5rem;padding-left:1.2rem;color:var(--muted)}
.glossary dt{font-weight:700;margin-top:1rem}.glossary dd{margin:.25rem 0 0 1rem;max-width:60rem}
/* a phone: every other table a card per row, each cell under its column's name (a run's facts: the
name above the value); nothing scrolls sideways */
@media (max-width:40rem){
table.cards,.cards tbody,.cards tr,.cards td,table.facts,.facts tbody,.facts tr,.facts th,.facts td{
display:block;width:auto}
.cards thead{display:none}
.cards tr{border:1px solid var(--line);margin:0 0 .75rem;padding:.35rem .6rem}
.cards td,.facts th,.facts td{border:0;padding:.1rem 0;text-align:left;overflow-wrap:anywhere}
.cards td a{white-space:normal}
.cards td::before{content:attr(data-label) ": ";font-weight:600;color:var(--muted)}
.cards td:first-child{font-weight:600}
.facts tr{border-bottom:1px solid var(--line);padding:.3rem 0}
.facts th{color:var(--muted)}
}
@media (max-width:40rem){body{padding:0 .5rem 2rem}.verdict{font-size:1.15rem}
.verdict-sentence{font-size:1.05rem}
/* a phone's first screen holds the answer, the deciding figure and the forest plot */
h1{font-size:1.3rem;margin:.5rem 0}nav ul{margin:.25rem 0;font-size:.9rem}
#answer{padding:.25rem .5rem;margin:.5rem 0}#answer p{margin:.4rem 0}.answer-word{font-size:1.2rem}}
"""


def esc(value: object) -> str:
    """Any value as HTML text (element content or a quoted attribute): nothing from the warehouse
    becomes markup; control characters are shown as their escapes."""
    text = "" if value is None else str(value)
    text = _CONTROL.sub(lambda m: ascii(m.group())[1:-1], text)
    return html.escape(text, quote=True)


def local_time(t: datetime | None, zone: str, fmt: str = "%Y-%m-%d %H:%M %Z") -> str:
    """A stored time (UTC; a naive one is UTC) in the configured time zone, with the zone's name."""
    if t is None:
        return "–"
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(ZoneInfo(zone)).strftime(fmt)


def number(v: float | None, unit: str, digits: int = 1) -> str:
    """``820.0 ms``; ``–`` when there is no reading (never a zero)."""
    return "–" if v is None else f"{v:,.{digits}f} {unit}"


def with_interval(v: float | None, low: float | None, high: float | None, unit: str, digits: int = 0) -> str:
    """``820 ms (95 % CI 760–900 ms)``: the value and, when there is one, its interval."""
    if v is None:
        return "–"
    text = f"{v:,.{digits}f} {unit}"
    if low is not None and high is not None:
        text += f" (95 % CI {low:,.{digits}f}–{high:,.{digits}f} {unit})"
    return text


def memory(n_bytes: float | None) -> str:
    return gib_text(n_bytes, 2, unknown="–")


def page(title: str, body: str, *, head: str = "", csp: str) -> str:
    """A whole page: the style inline, the given policy, the body as given (already escaped)."""
    return "\n".join(
        [
            "<!DOCTYPE html>",
            "<html lang='en'><head><meta charset='utf-8'>",
            "<meta name='viewport' content='width=device-width, initial-scale=1'>",
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
            f"<title>{esc(title)}</title>",
            f"<style>{STYLE}</style>",
            head,
            "</head><body>",
            body,
            "</body></html>",
            "",
        ]
    )


def table(headers: list[str], rows: list[list[str]], *, numeric: set[int] = frozenset()) -> str:
    """A table as wide as its box on a wide screen (its cells wrap) and a card per row on a phone,
    each cell labelled with its header; the cells are HTML already (escaped by the caller), the
    headers plain text. Its box would scroll it alone rather than widen the page."""
    head = "".join(f"<th scope='col'>{esc(h)}</th>" for h in headers)
    opening = [
        f"<td data-label='{esc(h)}'" + (" class='num'>" if i in numeric else ">")
        for i, h in enumerate(headers)
    ]
    body = "".join("<tr>" + "".join(f"{opening[i]}{c}</td>" for i, c in enumerate(r)) + "</tr>" for r in rows)
    return (
        "<div class='scroll'><table class='cards'>"
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def link(href: str, text: str) -> str:
    """A link to a file of the site (``href`` is built by the site, never taken from the warehouse)."""
    return f"<a href='{esc(href)}'>{esc(text)}</a>"
