"""The real llama-server's `/metrics`: every sample carries its family's `# TYPE` and `# HELP`; the parser's
cases in the engines' exposition shapes are in tests/unit/loadgen/test_prometheus_types.py.
"""

from __future__ import annotations

import httpx
import pytest
from conftest import need

from strix_pipeline.loadgen.prometheus import UNTYPED, parse_exposition

pytestmark = [pytest.mark.llama, pytest.mark.slow]


def test_the_real_llama_server_types_every_sample(request: pytest.FixtureRequest) -> None:
    try:
        srv = request.getfixturevalue("llama_server")
    except pytest.FixtureLookupError:
        need(False, "the llama_server fixture", "tests/conftest.py provides it")
    r = httpx.get(srv.metrics_url, timeout=10)
    r.raise_for_status()
    samples = parse_exposition(r.text)
    assert samples, r.text[:500]
    untyped = [s.name for s in samples if s.type == UNTYPED]
    assert not untyped, untyped
    for s in samples:
        assert s.help, s.name
        if s.name.endswith("_total"):
            assert s.type == "counter", s
