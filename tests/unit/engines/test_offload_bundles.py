"""The architecture gate reads compressed offload bundles (CCOB): a HIP library whose device code was
built with ``--offload-compress`` names its targets only inside the compressed data, and before this
reader such a library passed the gate unread whatever it was built for.

The libraries are made here in LLVM's layout (OffloadBundler.cpp: an uncompressed bundle
``__CLANG_OFFLOAD_BUNDLE__`` with entry ids ``hipv4-amdgcn-amd-amdhsa--gfxNNNN``, wrapped as CCOB v2/v3
with zlib or zstd), and llama.cpp's arch-list command itself runs on them in a real shell.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from conftest import need

from strix_pipeline.engines import llamacpp, offload_bundles, sglang
from strix_pipeline.engines.base import TORCH_ARCH_SNIPPET, parse_compiled_targets
from strix_pipeline.hosts.docker import image_checks
from strix_pipeline.hosts.errors import EngineStartError


def bundle(targets: list[str]) -> bytes:
    """An uncompressed clang offload bundle with one code object per target (plus the host entry)."""
    ids = [b"host-x86_64-unknown-linux-gnu-"] + [f"hipv4-amdgcn-amd-amdhsa--{t}".encode() for t in targets]
    head = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(ids))
    for i, entry in enumerate(ids):
        head += struct.pack("<QQQ", 4096 * (i + 1), 64, len(entry)) + entry
    return head + b"\x7fELF" + os.urandom(256)


def ccob(inner: bytes, *, version: int = 3, method: int = 0) -> bytes:
    if method == 0:
        body = zlib.compress(inner, 9)
    elif method == 1:
        body = subprocess.run(["zstd", "-q", "-c"], input=inner, capture_output=True, check=True).stdout
    else:
        body = os.urandom(64)
    sizes = {2: ("<II", 24), 3: ("<QQ", 32)}[version]
    total = sizes[1] + len(body)
    return (
        b"CCOB"
        + struct.pack("<HH", version, method)
        + struct.pack(sizes[0], total, len(inner))
        + struct.pack("<Q", 0xABCD)
        + body
    )


def library(*parts: bytes) -> bytes:
    """A shared library's bytes: an ELF start, then the parts with unrelated bytes between them."""
    out = b"\x7fELF\x02\x01\x01" + os.urandom(512)
    for p in parts:
        out += p + os.urandom(300)
    return out


def test_a_compressed_bundle_hides_its_targets_from_a_plain_scan_and_the_reader_finds_them() -> None:
    lib = library(ccob(bundle(["gfx1100", "gfx1151"])))
    assert b"amdgcn-amd-amdhsa--gfx" not in lib  # what the old gate scanned for: nothing to see
    assert offload_bundles.targets_of(lib) == (["gfx1100", "gfx1151"], None)


@pytest.mark.parametrize("version", [2, 3])
def test_each_ccob_version_with_zlib_is_read(version: int) -> None:
    lib = library(ccob(bundle(["gfx942", "gfx950"]), version=version))
    assert offload_bundles.targets_of(lib) == (["gfx942", "gfx950"], None)


def test_zstd_bundles_are_read_with_the_zstd_command() -> None:
    need(shutil.which("zstd") is not None, "the zstd command", "apt-get install zstd (.ci/run installs it)")
    lib = library(ccob(bundle(["gfx1151"]), method=1), ccob(bundle(["gfx1151"]), method=1))
    assert offload_bundles.targets_of(lib) == (["gfx1151"], None)


def test_plain_and_compressed_bundles_of_one_library_are_both_read() -> None:
    lib = library(bundle(["gfx1151"]), ccob(bundle(["gfx942"])))
    assert offload_bundles.targets_of(lib) == (["gfx1151", "gfx942"], None)


def test_a_bundle_it_cannot_decompress_is_said_so() -> None:
    targets, problem = offload_bundles.targets_of(library(ccob(bundle(["gfx1151"]), method=7)))
    assert targets == [] and problem is not None and "unknown method 7" in problem


# ------------------------------------------------- llama.cpp's arch-list command, run in a real shell


def _tools(tmp_path: Path, *, python: bool) -> str:
    """A PATH with what the command uses (and python3 only when asked): an image without python3."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "find", "grep", "tr", "sed", "sort"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    if python:
        (bin_dir / "python3").symlink_to(sys.executable)
    return str(bin_dir)


def _arch_list(tmp_path: Path, libs: dict[str, bytes], *, python: bool = True):
    root = tmp_path / "image" / "app"
    root.mkdir(parents=True)
    for name, data in libs.items():
        (root / name).write_bytes(data)
    env = {"PATH": _tools(tmp_path, python=python), "STRIX_ARCH_ROOTS": str(root)}
    out = subprocess.run(llamacpp.ARCH_LIST_COMMAND, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return parse_compiled_targets(out.stdout), root


def test_the_gate_passes_a_compressed_library_built_for_gfx1151(tmp_path) -> None:
    found, root = _arch_list(tmp_path, {"libggml-hip.so": library(ccob(bundle(["gfx1100", "gfx1151"])))})
    assert found.components == {str(root / "libggml-hip.so"): ("gfx1100", "gfx1151")}
    assert found.missing("gfx1151") == {} and found.unreadable == {}


def test_the_gate_refuses_a_compressed_library_without_gfx1151(tmp_path) -> None:
    found, root = _arch_list(tmp_path, {"libggml-hip.so": library(ccob(bundle(["gfx942", "gfx950"])))})
    assert found.missing("gfx1151") == {str(root / "libggml-hip.so"): ("gfx942", "gfx950")}


def test_an_uncompressed_library_is_still_read_by_the_shell_alone(tmp_path) -> None:
    found, root = _arch_list(tmp_path, {"libggml-hip.so.0": library(bundle(["gfx1151"]))}, python=False)
    assert found.components == {str(root / "libggml-hip.so.0"): ("gfx1151",)}


def test_without_python3_a_compressed_library_is_unreadable_and_refused(tmp_path, monkeypatch) -> None:
    found, root = _arch_list(tmp_path, {"libggml-hip.so": library(ccob(bundle(["gfx1151"])))}, python=False)
    assert list(found.unreadable) == [str(root / "libggml-hip.so")]
    assert "no python3" in found.unreadable[str(root / "libggml-hip.so")]
    monkeypatch.setattr(image_checks, "list_compiled_targets", lambda *a, **k: found)
    with pytest.raises(EngineStartError) as e:
        image_checks.check_arch(None, "img", ["sh"], "gfx1151", run_id="r")
    assert e.value.status == "failed_guard"
    assert e.value.reason.startswith("cannot tell whether the image was built for gfx1151: ")
    assert "production was not stopped" in e.value.reason


def test_sglangs_command_reads_compressed_kernels_too(tmp_path) -> None:
    # sgl-kernel's libraries are found by its package: a stand-in package of one compressed library
    pkg = tmp_path / "site" / "sgl_kernel"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "common_ops.so").write_bytes(library(ccob(bundle(["gfx942"]))))
    command = sglang.ARCH_LIST_COMMAND[2]
    rest = command.removeprefix(TORCH_ARCH_SNIPPET)  # the torch part needs torch; the rest runs here
    assert rest != command and offload_bundles.READER in rest
    out = subprocess.run(
        [sys.executable, "-c", rest],
        env={"PYTHONPATH": str(tmp_path / "site")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert parse_compiled_targets(out.stdout).components == {"sgl_kernel/common_ops.so": ("gfx942",)}
