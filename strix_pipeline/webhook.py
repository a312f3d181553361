"""The one webhook POST: a Slack-compatible ``{"text": ...}`` message to the URL the configuration's
``decision.webhook_url_env`` names. Below hosts, runner and analysis, which each compose their own
messages (production alerts, regression notices). A failed POST is logged, never raised: the pipeline's
results do not depend on a chat server, and the URL (a secret) is never logged.
"""

from __future__ import annotations

import logging
import os

import httpx

from strix_pipeline.config import StrixConfig

log = logging.getLogger(__name__)


def webhook_url(config: StrixConfig) -> str | None:
    return os.environ.get(config.decision.webhook_url_env) or None


def post(url: str, text: str, *, timeout_s: float = 10.0) -> bool:
    try:
        resp = httpx.post(url, json={"text": text}, timeout=timeout_s)
    except httpx.HTTPError as e:
        log.warning("webhook POST failed: %s", e)
        return False
    if resp.status_code >= 300:
        log.warning("webhook answered %s: %s", resp.status_code, resp.text[:200])
        return False
    return True
