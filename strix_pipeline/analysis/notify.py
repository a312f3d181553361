"""A short Slack-compatible webhook message when something a person should look at happened.

Three things are worth a message: the verdict changed, a criterion changed status, or a confirmed,
unacknowledged engine regression appeared for the first time (or its bisection ended: the message
names the first release that shows it). A change the canary puts on the host (``host_drift``) is
not an engine regression and is never sent; one the canary moved beside (``canary_moved``) is, with
the canary's movement in its line. The URL comes from the environment variable
that ``DecisionConfig.webhook_url_env`` names (it is a secret; ``webhook.webhook_url``). A failed POST
is logged, never raised: the pipeline's results do not depend on a chat server.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from strix_pipeline.analysis.changepoints import confirmed_since
from strix_pipeline.analysis.changes import stored_changes
from strix_pipeline.analysis.decision.sentence import Wording, verdict_sentence
from strix_pipeline.webhook import post

if TYPE_CHECKING:
    from strix_pipeline.analysis.changepoints import Change
    from strix_pipeline.analysis.decision import Decision
    from strix_pipeline.warehouse import BisectionRecord, Warehouse

log = logging.getLogger(__name__)

MAX_REGRESSIONS_LISTED = 8  # a chat message, not a report


def _previous_statuses(previous: Decision | None, current: Decision) -> tuple[str | None, dict[str, str]]:
    if previous is not None:
        return previous.verdict, {c.criterion: c.status for c in previous.criteria}
    return current.previous_verdict, dict(current.previous_statuses)


def regression_alerts(wh: Warehouse, previous: Decision | None, current: Decision) -> list[Change]:
    """The stored, unacknowledged changes, those confirmed since `previous` marked ``newly_confirmed``.

    The switch decision's own path to the alert: the `regressions` asset stores when each change was
    first found confirmed (``confirmed_at``); the evaluation after it alerts on the confirmations in
    (previous evaluation, this evaluation] -- each one once, whichever process found it.
    """

    changes = stored_changes(wh, include_acknowledged=False)
    confirmed_since(changes, previous.evaluated_at if previous else None, current.evaluated_at)
    since = previous.evaluated_at if previous else None
    for b in wh.list_bisections():
        c = next((c for c in changes if c.change_id == b.change_id), None)
        if c is None:
            continue
        c.bisection = bisection_text(b)
        # a search that ended since the previous evaluation is news of its own: alerted like a
        # newly confirmed regression (the message says what it found)
        if (
            b.status != "running"
            and (since is None or b.updated_at > since)
            and b.updated_at <= current.evaluated_at
        ):
            c.newly_confirmed = c.newly_confirmed or c.status == "confirmed"
    return changes


def bisection_text(b: BisectionRecord) -> str:
    if b.status in ("found", "nothing_between"):
        return (
            f"first release that shows it: {b.first_release} (not {b.last_without}; "
            f"{b.runs_used} bisection run(s))"
        )
    if b.status == "running":
        return f"bisecting: {b.reason}"
    return f"bisection {b.status}: {b.reason}"


def new_regressions(changes: list[Change]) -> list[Change]:
    return [
        c for c in changes if c.is_confirmed_regression and c.ack_status == "active" and c.newly_confirmed
    ]


def notification_text(
    previous: Decision | None, current: Decision, changes: list[Change], wording: Wording | None = None
) -> str | None:
    """The message, or None when nothing changed that a person needs to hear about. A verdict or a
    criterion that moved is said with the decision's one sentence (the report's, the feed's)."""
    before, statuses = _previous_statuses(previous, current)
    sentence = verdict_sentence(current, wording or Wording())
    lines: list[str] = []
    if before is not None and before != current.verdict:
        lines.append(f"Switch decision on {current.host}: *{before} → {current.label}* — {sentence}")
    moved = [
        (c.criterion, c.name, statuses[c.criterion], c.status, c.reason)
        for c in current.criteria
        if c.criterion in statuses and statuses[c.criterion] != c.status
    ]
    if moved and not lines:
        lines.append(f"Switch decision on {current.host}: still *{current.label}* — {sentence}")
    for cid, name, old, new, reason in moved:
        lines.append(f"• {cid} {name}: {old} → {new} — {reason}")
    regressions = new_regressions(changes)
    if regressions:
        lines.append(f"{len(regressions)} confirmed regression(s):")
        for c in regressions[:MAX_REGRESSIONS_LISTED]:
            lines.append(
                f"• {c.engine} @ {c.host} {c.scenario} level {c.level} {c.metric}: {c.magnitude_pct:+.1f}% "
                f"from {c.version_before} to {c.version_after} (p={c.pvalue:.2g}; `strix ack {c.change_id}`)"
                + (f"; {c.bisection}" if c.bisection else "")
                + (f"; beside it: {c.canary_moved}" if c.canary_moved else "")
            )
        if len(regressions) > MAX_REGRESSIONS_LISTED:
            lines.append(f"… and {len(regressions) - MAX_REGRESSIONS_LISTED} more")
    return "\n".join(lines) if lines else None


def notify_changes(
    previous: Decision | None,
    current: Decision,
    changes: list[Change],
    url: str | None,
    *,
    timeout_s: float = 10.0,
    wording: Wording | None = None,
) -> bool:
    """POST a message when the verdict or a criterion changed or a confirmed regression appeared.

    Returns True only when a message was delivered (2xx). `previous` None: the current decision's own
    `previous_verdict` / `previous_statuses` (from the warehouse history) are compared instead.
    ``wording``: how the message's sentence names the two sides (the engines and the version).
    """
    text = notification_text(previous, current, changes, wording)
    if text is None:
        return False
    if not url:
        log.info("webhook not configured; would have sent: %s", text)
        return False
    try:
        return post(url, text, timeout_s=timeout_s)
    except Exception as e:  # noqa: BLE001 - never let a notification break the run
        log.warning("webhook notification failed: %s", e)
        return False
