"""Rules the Dagster layer only reports: which change fails the regression check, which required
criterion lacks fresh evidence, which images the sensor requests now and which wait."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from support.notify import regression
from support.pipeline_helpers import vllm_image

from strix_pipeline.analysis.decision import Decision
from strix_pipeline.planning import due as planning_due
from strix_pipeline.planning.due import due_images
from strix_pipeline.records import CriterionResult

NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def test_confirmed_regression() -> None:
    assert regression().is_confirmed_regression
    assert not regression(status="provisional").is_confirmed_regression
    assert not regression(direction="improvement").is_confirmed_regression


def _criterion(cid: str, status: str) -> CriterionResult:
    return CriterionResult(
        "e1",
        NOW,
        "box",
        "unknown",
        cid,
        cid.lower(),
        True,
        status,
        None,
        None,
        None,
        None,
        None,
        [],
        [],
        False,
        "no run in the window",
        None,
    )


def test_without_fresh_evidence_names_required_unknown_criteria_only() -> None:
    d = Decision(
        "unknown",
        "e1",
        NOW,
        "box",
        [_criterion("C1", "pass"), _criterion("C2", "unknown"), _criterion("C4", "unknown")],
    )
    assert [c.criterion for c in d.without_fresh_evidence(["C1", "C2", "C3"])] == ["C2"]
    assert d.without_fresh_evidence([]) == []


def test_due_images_requests_each_digest_once_and_lets_closed_hosts_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b, c = vllm_image("v1.0.0", "a"), vllm_image("v1.1.0", "b"), vllm_image("latest", "c", floating=True)
    closed = {b.digest}
    # the rule lives in planning.due: the window is patched where it is read
    monkeypatch.setattr(
        planning_due, "hosts_in_window", lambda config, image, now: image.digest not in closed
    )
    due = due_images(None, [a, b, c], {c.digest}, NOW)  # type: ignore[arg-type]
    assert due.now == [a] and due.waiting == [b]
    assert due.requested == {a.digest, c.digest}  # b stays unrequested: asked again on a later tick
    closed.clear()
    again = due_images(None, [a, b, c], due.requested, NOW)  # type: ignore[arg-type]
    assert again.now == [b] and again.waiting == []
