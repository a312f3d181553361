"""The served checkpoint's ``config.json``, read where the engine will see it (C5 at the same context
on a Docker host, where vLLM's KV cache is sized from the model's per-token KV bytes).

The engine's container sees the model at ``/models/...``: the host's models directory mounted
read-only, a model outside it mounted on its own, or a model baked into the image. The reader here
asks a created, never started container of the engine's own image with the engine's own model mounts
(``DockerLauncher.model_volumes``) through Docker's archive API (``image_checks.read_file``): the
same view the engine gets, over ``ssh://`` and ``unix://`` alike, with nothing run in the image --
the Box simulator's vLLM image has neither ``cat`` nor coreutils, a distroless one no shell at all.

A reader is injectable (``DockerLauncher(read_config=...)``): the unit tests give one that needs no
daemon. Whatever stops the read is a :class:`ModelFileError` naming the file: the launch then keeps
the configured pool and its log says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from strix_pipeline.hosts.docker import image_checks
from strix_pipeline.memory.bytes_per_token import ModelFileError
from strix_pipeline.memory.kv_capacity import parse_config

CONFIG_NAME = "config.json"


@dataclass(frozen=True)
class ModelConfig:
    """A checkpoint's parsed ``config.json`` and where it was read (named in every error about it)."""

    data: dict[str, Any]
    source: str


# the checkpoint directory as the engine's container sees it -> its config.json
ConfigReader = Callable[[str], ModelConfig]


def in_image(client: Any, image_ref: str, volumes: dict[str, dict[str, str]], *, run_id: str) -> ConfigReader:
    """The reader through a container of ``image_ref`` with ``volumes`` (module docstring)."""

    def read(model_dir: str) -> ModelConfig:
        path = str(PurePosixPath(model_dir) / CONFIG_NAME)
        where = f"{path} in {image_ref}"
        try:
            text = image_checks.read_file(client, image_ref, path, run_id=run_id, volumes=volumes)
        except image_checks.ImageFileError as e:
            raise ModelFileError(f"{where}: {str(e).removeprefix(path + ': ')}") from e
        except Exception as e:  # noqa: BLE001 - docker-py wraps socket, HTTP and API errors alike: a reason
            said = " ".join(str(getattr(e, "explanation", None) or e).split())[:300]
            raise ModelFileError(f"{where}: not read ({type(e).__name__}: {said})") from e
        return ModelConfig(parse_config(text, where), where)

    return read
