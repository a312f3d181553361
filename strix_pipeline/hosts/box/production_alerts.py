"""Who is told when production is not where the Box's users need it: the webhook and the run.

:class:`ProductionAlerts` is the ``alert`` of a :class:`~strix_pipeline.hosts.box.production.ProductionGuard`:
each message goes to the run's log (the Dagster run's, through the runner's ``log``) as an ``ALERT``
line, is kept for the run's record, and is POSTed to the webhook the configuration names
(``decision.webhook_url_env``; the one Slack-compatible POST, webhook.py, that analysis/notify.py's
messages use too). A webhook that does not answer is logged, never raised: production's restore does
not wait on a chat server.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from strix_pipeline.webhook import post  # the one webhook POST

log = logging.getLogger(__name__)


@dataclass
class ProductionAlerts:
    webhook_url: str | None
    run_log: Callable[[str], None] | None = None
    sent: list[str] = field(default_factory=list)  # every message, delivered or not

    def __call__(self, text: str) -> None:
        self.sent.append(text)
        if self.run_log is not None:
            self.run_log(f"ALERT: {text}")
        if not self.webhook_url:
            log.info("webhook not configured; would have sent: %s", text)
            return
        post(self.webhook_url, f":rotating_light: {text}")
