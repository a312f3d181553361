"""One place that knows Docker Hub's names: its aliases, the host its API answers on, ``library/``.

``docker.io``, ``index.docker.io`` and ``registry-1.docker.io`` all name Docker Hub, and a bare
``ubuntu`` there is ``library/ubuntu``. :func:`normalize_repository` gives one spelling for any of
them (the short one ``docker pull`` understands), so runs, images and configured sources compare equal
however each was written.
"""

from __future__ import annotations

DOCKER_HUB_NAMES = ("docker.io", "index.docker.io", "registry-1.docker.io")
DOCKER_HUB_API_HOST = "registry-1.docker.io"
DOCKER_HUB_API = "https://hub.docker.com"
OFFICIAL_NAMESPACE = "library/"


def is_docker_hub(registry: str) -> bool:
    return registry in DOCKER_HUB_NAMES


def api_host(registry: str) -> str:
    return DOCKER_HUB_API_HOST if is_docker_hub(registry) else registry


def api_repository(registry: str, repository: str) -> str:
    """Docker Hub's official images live under ``library/``."""
    if is_docker_hub(registry) and "/" not in repository:
        return f"{OFFICIAL_NAMESPACE}{repository}"
    return repository


def normalize_repository(name: str | None) -> str:
    """``[registry/]repository`` in one spelling: on Docker Hub (any alias) without the registry and
    without ``library/`` (``index.docker.io/library/ubuntu`` -> ``ubuntu``,
    ``registry-1.docker.io/vllm/vllm-openai-rocm`` -> ``vllm/vllm-openai-rocm``); elsewhere as given
    (``ghcr.io/ggml-org/llama.cpp``). None or empty -> ``""``."""
    if not name:
        return ""
    for alias in DOCKER_HUB_NAMES:
        if name.startswith(alias + "/"):
            name = name.removeprefix(alias + "/")
            break
    return name.removeprefix(OFFICIAL_NAMESPACE) if name.count("/") == 1 else name


def pull_reference(registry: str, repository: str, digest: str) -> str:
    """What ``docker pull`` is given for an image: ``repository@digest`` on Docker Hub (any alias: the
    daemon's default registry), ``registry/repository@digest`` elsewhere."""
    return f"{repository}@{digest}" if is_docker_hub(registry) else f"{registry}/{repository}@{digest}"
