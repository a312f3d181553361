"""A chart's self-contained HTML page, safe for any string in its data (the JSON block and the CSP)."""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import json
import re

import vl_convert as vlc

# The chart's JSON goes in a data block, never in script text: vl_convert's own page pastes the spec
# raw into a <script>, so a version like "v1</script><script>..." (an image label any publisher sets)
# ran as code. JSON's \u escapes keep the value the same for JSON.parse and leave no "<" for the
# HTML parser to end the block on.
_JSON_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_BOOT_JS = (
    "const spec = JSON.parse(document.getElementById('strix-chart-spec').textContent);"
    "vegaEmbed('#vega-chart', spec, {renderer: 'svg'}).catch(console.error);"
)
_CHART_STYLE = (
    "vega-chart.vega-embed{width:100%;display:flex}"
    "vega-chart.vega-embed details,vega-chart.vega-embed details summary{position:relative}"
)


def json_for_html(spec: str) -> str:
    text = json.dumps(json.loads(spec), ensure_ascii=False, separators=(",", ":"))
    return re.sub("[<>&\u2028\u2029]", lambda m: _JSON_UNSAFE[m.group()], text)


def csp_hash(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"


@functools.cache
def vega_bundle() -> str:
    # JS inlined: the charts open on the Box without reaching a CDN
    bundle = vlc.javascript_bundle()
    if re.search("</script|<!--", bundle, re.IGNORECASE):  # would end or garble the block it sits in
        raise ValueError("the Vega bundle from vl_convert cannot be inlined in a <script> as it is")
    return bundle


def chart_html(spec: str, title: str) -> str:
    """A self-contained page drawing the Vega-Lite ``spec`` (JSON text). Any string in the data is shown
    as text: the spec is parsed from a JSON block, and the page's Content-Security-Policy runs only its
    own two scripts (a second lock: an injected <script> or onerror= attribute is refused even if it
    ever got into the markup). Vega compiles its expressions with Function(), hence 'unsafe-eval'."""
    bundle = vega_bundle()
    csp = (
        f"script-src {csp_hash(bundle)} {csp_hash(_BOOT_JS)} 'unsafe-eval'; "
        "object-src 'none'; base-uri 'none'; form-action 'none'"
    )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            "<html><head><meta charset='utf-8'>",
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
            f"<title>{html.escape(title)}</title>",
            f"<style>{_CHART_STYLE}</style>",
            f"<script>{bundle}</script>",
            "</head><body>",
            "<div id='vega-chart'></div>",
            f"<script type='application/json' id='strix-chart-spec'>{json_for_html(spec)}</script>",
            f"<script>{_BOOT_JS}</script>",
            "</body></html>",
            "",
        ]
    )
