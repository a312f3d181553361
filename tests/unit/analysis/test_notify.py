"""Webhook notifications against a receiver on loopback."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from support.notify import NOW, Receiver, regression

from strix_pipeline.analysis.decision import CRITERIA, Decision, Wording
from strix_pipeline.analysis.notify import notification_text, notify_changes
from strix_pipeline.records import CriterionResult


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def decision(verdict: str, statuses: dict[str, str], previous: str | None = None, prev_st=None) -> Decision:
    crits = [
        CriterionResult(
            "e1",
            NOW,
            "strix-halo",
            verdict,
            cid,
            name,
            True,
            statuses[cid],
            None,
            None,
            None,
            None,
            None,
            [],
            [],
            False,
            f"{cid} reason",
            None,
        )
        for cid, name in CRITERIA.items()
        if cid in statuses
    ]
    return Decision(verdict, "e1", NOW, "strix-halo", crits, previous, prev_st or {}, reason="because")


SEPT = {"C1": "pass", "C2": "pass", "C3": "pass", "C4": "fail", "C5": "fail"}
ALL = dict.fromkeys(SEPT, "pass")


def test_verdict_change_posts_slack_json(receiver):
    prev = decision("evaluate", SEPT)
    cur = decision("switch", ALL)
    wording = Wording("vLLM", "llama-server", "0.32.0")
    assert notify_changes(prev, cur, [], receiver.url, wording=wording) is True
    (body,) = receiver.bodies
    assert set(body) == {"text"}
    assert "evaluate → switch" in body["text"]
    # said with the decision's one sentence (the report's), the sides named as the wording names them
    assert "Switch: move to vLLM 0.32.0. Every required criterion passes" in body["text"]
    assert "C4 serves_gpt_oss_120b_mxfp4: fail → pass" in body["text"]


def test_nothing_changed_sends_nothing(receiver):
    assert notify_changes(decision("evaluate", SEPT), decision("evaluate", SEPT), [], receiver.url) is False
    assert receiver.bodies == []
    # first evaluation ever: nothing to compare with
    assert (
        notify_changes(None, decision("unknown", dict.fromkeys(SEPT, "unknown")), [], receiver.url) is False
    )
    assert receiver.bodies == []


def test_history_on_the_decision_is_used_when_previous_is_none(receiver):
    cur = decision("evaluate", SEPT, previous="evaluate", prev_st={**SEPT, "C5": "unknown"})
    assert notify_changes(None, cur, [], receiver.url)
    assert "C5 memory_not_above_llamacpp: unknown → fail" in receiver.bodies[0]["text"]


def test_new_confirmed_regression_posts_once(receiver):
    same = decision("evaluate", SEPT)
    assert notify_changes(same, same, [regression()], receiver.url)
    assert "+12.5%" in receiver.bodies[0]["text"] and "strix ack abc123" in receiver.bodies[0]["text"]
    quiet = [
        regression(newly_confirmed=False),
        regression(ack_status="acknowledged"),
        regression(status="provisional", newly_confirmed=False),
        regression(direction="improvement"),
    ]
    assert notification_text(same, same, quiet) is None


def test_failures_are_logged_not_raised(caplog):
    bad = Receiver(status=500)
    try:
        assert notify_changes(decision("evaluate", SEPT), decision("switch", ALL), [], bad.url) is False
        assert len(bad.bodies) == 1
    finally:
        bad.close()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    assert (
        notify_changes(
            decision("evaluate", SEPT), decision("switch", ALL), [], f"http://127.0.0.1:{port}/", timeout_s=2
        )
        is False
    )
    assert notify_changes(decision("evaluate", SEPT), decision("switch", ALL), [], None) is False
    assert "webhook" in caplog.text


def test_a_regression_the_canary_moved_beside_is_sent_with_the_movement_and_the_hosts_is_not():
    same = decision("evaluate", SEPT)
    moved = regression(canary_moved="canary llamacpp b100 concurrency_sweep@5 ttft_p95_ms +9.0% between …")
    text = notification_text(same, same, [moved])
    assert (
        "+12.5%" in text and "beside it: canary llamacpp b100 concurrency_sweep@5 ttft_p95_ms +9.0%" in text
    )
    hosts = regression(host_drift="host drift suspected: the change lies between two runs of one release")
    assert notification_text(same, same, [hosts]) is None
