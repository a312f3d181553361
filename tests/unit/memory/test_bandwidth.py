"""The copy-bandwidth probe: its structure, its bounds, its failures; no timing is asserted (the machine
is shared), only that a probe measures something, records what it counted, and never hangs or hides an
error of its copying threads."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from strix_pipeline.memory import bandwidth
from strix_pipeline.memory.bandwidth import BYTES_COUNTED, BandwidthProbe, measure_copy_bandwidth

MIB = 1024 * 1024


def _copiers_left() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("copy-bandwidth-")]


def test_a_one_thread_probe_measures_and_records_what_it_counted() -> None:
    probe = measure_copy_bandwidth(1, size_mib=16, repeats=2)
    assert isinstance(probe, BandwidthProbe)
    assert probe.bytes_per_s > 0 and np.isfinite(probe.bytes_per_s)
    assert probe.threads == 1
    assert probe.buffer_bytes == 16 * MIB
    assert 1 <= probe.repeats <= 2
    assert BYTES_COUNTED in probe.method and "read+write" in BYTES_COUNTED
    assert probe.as_dict() == {
        "bytes_per_s": probe.bytes_per_s,
        "threads": 1,
        "buffer_bytes": 16 * MIB,
        "repeats": probe.repeats,
        "method": probe.method,
    }
    assert _copiers_left() == []


def test_a_two_thread_probe_splits_the_buffers_and_says_two_threads() -> None:
    probe = measure_copy_bandwidth(2, size_mib=16, repeats=2)
    assert probe.threads == 2
    assert "2 thread(s)" in probe.method
    assert probe.buffer_bytes == 16 * MIB  # the total, split among the threads
    assert probe.bytes_per_s > 0
    assert _copiers_left() == []


def test_an_uneven_split_records_the_bytes_really_copied() -> None:
    probe = measure_copy_bandwidth(3, size_mib=1, repeats=1)
    assert probe.buffer_bytes == (MIB // 3 // 8) * 8 * 3
    assert probe.threads == 3


def test_a_spent_time_budget_still_times_one_pass() -> None:
    probe = measure_copy_bandwidth(1, size_mib=4, repeats=50, time_budget_s=1e-9)
    assert probe.repeats == 1
    assert "best of 1 pass(es)" in probe.method
    assert probe.bytes_per_s > 0


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"threads": 0}, "threads=0"),
        ({"threads": True}, "threads=True"),
        ({"threads": 2.0}, "threads=2.0"),
        ({"threads": 1, "size_mib": 0}, "size_mib=0"),
        ({"threads": 1, "repeats": 0}, "repeats=0"),
        ({"threads": 1, "time_budget_s": 0}, "time_budget_s=0"),
        ({"threads": 1, "time_budget_s": float("nan")}, "time_budget_s=nan"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs: dict, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        measure_copy_bandwidth(**kwargs)


def test_a_failing_copy_is_raised_not_hung_on_and_the_threads_end(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(dst, src):
        raise RuntimeError("copy failed")

    monkeypatch.setattr(bandwidth.np, "copyto", boom)
    with pytest.raises(RuntimeError, match="copy failed"):
        measure_copy_bandwidth(2, size_mib=2, repeats=2)
    assert _copiers_left() == []


def test_a_failed_allocation_is_raised_and_the_threads_end(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_memory(*a, **kw):
        raise MemoryError("no room for the buffers")

    monkeypatch.setattr(bandwidth.np, "ones", no_memory)
    with pytest.raises(MemoryError, match="no room"):
        measure_copy_bandwidth(2, size_mib=2)
    assert _copiers_left() == []


def test_the_command_prints_the_probe_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert bandwidth.main(["--threads", "2", "--size-mib", "4", "--repeats", "1"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["threads"] == 2 and got["buffer_bytes"] == 4 * MIB and got["bytes_per_s"] > 0


def test_the_command_says_what_is_wrong_with_its_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert bandwidth.main(["--threads", "0"]) == 2
    assert "threads=0" in capsys.readouterr().err


def test_the_file_runs_alone_with_python_and_numpy(tmp_path: Path) -> None:
    """As in a probe container: the one file, no project on the path (-I: isolated mode)."""
    alone = tmp_path / "bandwidth.py"
    shutil.copy(bandwidth.__file__, alone)
    out = subprocess.run(
        [sys.executable, "-I", str(alone), "--threads", "1", "--size-mib", "4", "--repeats", "1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["threads"] == 1 and got["bytes_per_s"] > 0
