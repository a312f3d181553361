"""What the server says about itself: its root URL, the model it serves, its per-request context."""

from __future__ import annotations

import aiohttp


def normalize_base_url(url: str) -> str:
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


async def _get_json(session: aiohttp.ClientSession, url: str) -> object:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as r:
            return await r.json(content_type=None) if r.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def detect_context_length(session: aiohttp.ClientSession, base_url: str) -> int | None:
    """Per-request context: llama-server /props (per slot), else /v1/models max_model_len (vLLM, SGLang)."""
    props = await _get_json(session, base_url + "/props")
    if isinstance(props, dict):
        n = (props.get("default_generation_settings") or {}).get("n_ctx")
        if isinstance(n, int) and n > 0:
            return n
    models = await _get_json(session, base_url + "/v1/models")
    if isinstance(models, dict):
        for m in models.get("data") or ():
            n = m.get("max_model_len") if isinstance(m, dict) else None
            if isinstance(n, int) and n > 0:
                return n
    return None


async def detect_model(session: aiohttp.ClientSession, base_url: str) -> str | None:
    models = await _get_json(session, base_url + "/v1/models")
    if isinstance(models, dict):
        for m in models.get("data") or ():
            if isinstance(m, dict) and isinstance(m.get("id"), str):
                return m["id"]
    return None
