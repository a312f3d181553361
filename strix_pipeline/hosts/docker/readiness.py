"""Whether a started engine answers: its readiness paths in order, the build it reports, and the
address its URLs are made with."""

from __future__ import annotations

from typing import Any

import httpx

from strix_pipeline.engines.base import EngineSpec

VERSION_LABEL = "org.opencontainers.image.version"


def ready_answer(http: httpx.Client, base_url: str, paths: tuple[str, ...]) -> tuple[bool, str]:
    """All readiness paths answer 200 in order; /v1/models must also list a model."""
    for path in paths:
        try:
            r = http.get(base_url + path)
        except httpx.HTTPError as e:
            return False, f"{path}: {type(e).__name__}"
        if r.status_code != 200:
            return False, f"{path} -> {r.status_code}"
        if path == "/v1/models":
            try:
                if not r.json().get("data"):
                    return False, "/v1/models lists no model"
            except (ValueError, AttributeError):
                return False, "/v1/models is not JSON"
    return True, "ready"


def last_log_line(text: str) -> str:
    """The log's last line of the engine's own (not the launcher's), as a reason's tail."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("[strix ")]
    return f": {lines[-1][:300]}" if lines else ""


def url_host(address: str) -> str:
    """An address as the host part of a URL (an IPv6 literal in brackets)."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def engine_build(spec: EngineSpec, base_url: str, image: Any) -> str | None:
    """The build the engine reports at its version endpoint, else the image's version or revision label."""
    if spec.version_path and spec.version_key:
        try:
            r = httpx.get(base_url + spec.version_path, timeout=5)
            if r.status_code == 200:
                value = r.json().get(spec.version_key)
                if value:
                    return str(value)
        except (httpx.HTTPError, ValueError, AttributeError):
            pass
    labels = ((getattr(image, "attrs", None) or {}).get("Config") or {}).get("Labels") or {}
    return labels.get(VERSION_LABEL) or labels.get("org.opencontainers.image.revision")
