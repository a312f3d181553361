"""Configs for `strix doctor` tests and a way to pick one check out of its answer."""

from __future__ import annotations

from pathlib import Path

from support.pipeline_helpers import write_config


def doctor_config(
    tmp_path: Path, *, model_path: str | None = None, registry: str | None = None, box: bool = False
) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = write_config(tmp_path)
    text = path.read_text()
    if model_path:
        text = text.replace(
            'served_name = "gemma3-270m"', f'served_name = "gemma3-270m"\npath = "{model_path}"'
        )
    if registry:
        text = text.replace(
            '[engines.llamacpp]\nkind = "llamacpp"\nrole = "baseline"\nimages = []',
            f'[engines.llamacpp]\nkind = "llamacpp"\nrole = "baseline"\n\n[[engines.llamacpp.images]]\n'
            f'registry = "{registry}"\nrepository = "ggml-org/llama.cpp"\ninsecure = true\n',
        )
    if box:
        text = text.replace(
            "[engines.llamacpp]",
            '[hosts.box]\nkind = "docker"\ndocker_host = "unix:///nonexistent/docker.sock"\ndevices = '
            "[]\n\n[engines.llamacpp]",
        )
        text = text.replace(
            "[runs]\n", '[runs]\nbox = [{ engine = "llamacpp", model = "gemma3-270m", profile = "tiny" }]\n'
        )
    path.write_text(text)
    return path


def by_name(checks, host: str, name: str):
    found = [c for c in checks if c.host == host and c.name == name]
    assert found, [(c.host, c.name) for c in checks]
    return found[0]
