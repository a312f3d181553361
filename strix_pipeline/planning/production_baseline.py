"""Production as deployed, as the baseline: what was read of the Box's production engine (a container's
``docker inspect``, or a systemd unit's ``ExecStart`` and ``Environment``) and the baseline run it gives.
A unit whose ExecStart is ``docker run … IMAGE …`` (or ``podman run``) is read as that container: its
image, the image's entrypoint with the unit's arguments, its ``-e``, ``-v`` and ``--device``. A unit
that runs a binary gives the matching engine build instead: the image of the same llama.cpp build and
backend (planning/production_target.py), the binary's build read from its ``--version``.

Pure: the reading itself is hosts/box/production_read.py's. The baseline keeps production's image digest,
executable, flags (context, slots, cache types, flash attention, offload, batch sizes), environment and
model file; it changes only what a benchmark beside production's port must (where the engine listens),
and lists every change with its reason. The read's digest names what was read: a run of this baseline
records it, and a later read with another digest means production changed.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import Literal

# What the pipeline must set itself: where the engine listens (production holds its own port). The
# environment forms (llama-server reads LLAMA_ARG_* when the flag is absent) go with the flags.
LISTEN_FLAGS = frozenset({"--host", "--port"})
LISTEN_ENV = frozenset({"LLAMA_ARG_HOST", "LLAMA_ARG_PORT"})
MODEL_FLAGS = ("-m", "--model")
# The settings shown side by side (`strix production show`): each with the spellings llama-server takes.
SETTINGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("context", ("-c", "--ctx-size")),
    ("slots", ("-np", "--parallel")),
    ("cache type K", ("-ctk", "--cache-type-k")),
    ("cache type V", ("-ctv", "--cache-type-v")),
    ("flash attention", ("-fa", "--flash-attn")),
    ("GPU layers", ("-ngl", "--gpu-layers", "--n-gpu-layers")),
    ("batch", ("-b", "--batch-size")),
    ("micro-batch", ("-ub", "--ubatch-size")),
    ("device", ("-dev", "--device")),
)
# Flags that take no value (the rest of llama-server's flags take exactly one).
SWITCHES = frozenset(
    {"--no-mmap", "--mmap", "--metrics", "--no-webui", "--jinja", "--cont-batching", "--no-cont-batching",
     "--mlock", "--no-kv-offload", "--kv-unified", "--verbose", "-v", "--check-tensors", "--embedding",
     "--embeddings", "--reranking", "--no-warmup", "--swa-full", "--context-shift", "--no-context-shift"}
)  # fmt: skip

# what a baseline run read from production records, and what a decision calls its baseline then
PRODUCTION_AS_DEPLOYED = "production as deployed"

Backend = Literal["vulkan", "rocm", "cpu", "unknown"]


class ProductionReadError(ValueError):
    """What was read cannot give a baseline (no model file, no executable); the message says why."""


@dataclass(frozen=True)
class Mount:
    source: str  # on the host
    destination: str  # in the container


_OPTIONAL_READ = frozenset({"build", "build_backend"})


@dataclass(frozen=True)
class ProductionRead:
    """What production runs, as read on the Box (nothing else: secrets in its environment stay there
    only as their names' digest part)."""

    kind: Literal["container", "unit"]
    name: str  # the container's or the unit's
    argv: tuple[str, ...]  # entrypoint + command, or ExecStart's argv
    env: tuple[str, ...] = ()  # NAME=value the container or unit was given (not the image's own)
    image: str | None = None  # the reference it was started from ("ghcr.io/ggml-org/llama.cpp:server")
    image_digest: str | None = None  # "<registry/repository>@sha256:…" (else the image id)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[str, ...] = ()
    build: str | None = None  # a binary's llama.cpp build ("b6123"), from its --version
    build_backend: Backend | None = None  # the backend its --version output names (vulkan, rocm)

    @property
    def digest(self) -> str:
        """sha256 of what was read, in a fixed form: equal reads give equal digests (a field never read
        is left out, so a read of a container digests as it did before binaries had builds)."""
        data = {k: v for k, v in asdict(self).items() if v is not None or k not in _OPTIONAL_READ}
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ProductionRead:
        data = json.loads(text)
        mounts = tuple(Mount(**m) for m in data.pop("mounts", []))
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}, mounts=mounts)


@dataclass(frozen=True)
class BaselineChange:
    """One way the baseline differs from production, and why."""

    what: str
    production: str
    baseline: str
    why: str


@dataclass(frozen=True)
class ProductionBaseline:
    """The baseline run production as deployed gives: its image (same digest) or binary, its
    executable and flags without the listen address, its environment, its model file and backend."""

    read_digest: str
    image_ref: str | None  # None: production runs a binary, not an image
    image_tag: str | None  # the tag production was started from ("server-vulkan"), when it named one
    executable: tuple[str, ...]
    flags: tuple[str, ...]  # production's, without --host/--port (the run adds its own)
    env: tuple[str, ...]
    model_in_engine: str  # the model path as production's engine opens it
    model_on_host: str  # that file on the Box
    backend: Backend
    settings: tuple[tuple[str, str], ...]
    changes: tuple[BaselineChange, ...] = field(default=())
    build: str | None = None  # production's binary's llama.cpp build: the engine build to run

    @property
    def source(self) -> str:
        """What a baseline run records: where its settings came from, with the read's digest."""
        return f"{PRODUCTION_AS_DEPLOYED} ({self.read_digest})"

    def argv(self, model_path: str, bind_host: str, port: int) -> list[str]:
        """Production's executable and flags, the model as the run's engine sees it, listening where the
        run says."""
        flags = list(self.flags)
        for i, f in enumerate(flags):
            if f in MODEL_FLAGS and i + 1 < len(flags):
                flags[i + 1] = model_path
            elif f.startswith("--model="):
                flags[i] = f"--model={model_path}"
        return [*self.executable, *flags, "--host", bind_host, "--port", str(port)]

    def env_dict(self) -> dict[str, str]:
        return dict(e.split("=", 1) for e in self.env if "=" in e)


def _split(argv: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(executable, flags): the executable is everything before the first flag (``/app/llama-server``,
    or ``toolbox run llama-server``)."""
    for i, a in enumerate(argv):
        if a.startswith("-"):
            return list(argv[:i]), list(argv[i:])
    return list(argv), []


def _pairs(flags: list[str]) -> list[tuple[str, str | None]]:
    """Each flag with its value (``--x=v`` and ``--x v`` alike; a switch has none)."""
    return [(name, value) for name, value, _ in _spans(flags)]


def _spans(flags: list[str]) -> list[tuple[str, str | None, list[str]]]:
    """Each flag with its value and the tokens it was written as."""
    out: list[tuple[str, str | None, list[str]]] = []
    i = 0
    while i < len(flags):
        f = flags[i]
        if "=" in f and f.startswith("--"):
            name, value = f.split("=", 1)
            out.append((name, value, [f]))
            i += 1
        elif (
            f in SWITCHES
            or i + 1 >= len(flags)
            or (flags[i + 1].startswith("-") and len(flags[i + 1]) > 1 and not flags[i + 1][1:2].isdigit())
        ):
            out.append((f, None, [f]))
            i += 1
        else:
            out.append((f, flags[i + 1], flags[i : i + 2]))
            i += 2
    return out


def _on_host(path: str, mounts: tuple[Mount, ...]) -> str | None:
    """The host file behind a container path: the mount with the longest destination holding it."""
    p = PurePosixPath(path)
    best: Mount | None = None
    for m in mounts:
        dest = PurePosixPath(m.destination)
        if (p == dest or dest in p.parents) and (best is None or len(m.destination) > len(best.destination)):
            best = m
    if best is None:
        return None
    rest = p.relative_to(PurePosixPath(best.destination))
    return str(PurePosixPath(best.source) / rest) if str(rest) != "." else best.source


def backend_of(read: ProductionRead, flags: list[tuple[str, str | None]]) -> Backend:
    """Vulkan or ROCm, from what production says itself: its ``--device`` (``Vulkan0``, ``ROCm0``),
    its image or binary's name, its environment, then its devices (ROCm needs /dev/kfd; Vulkan only
    /dev/dri)."""
    device = next((v for n, v in flags if n in ("-dev", "--device") and v), "")
    if device.lower().startswith("vulkan"):
        return "vulkan"
    if device.lower().startswith(("rocm", "hip")):
        return "rocm"
    if device.lower() == "none":
        return "cpu"
    if read.build_backend is not None:
        return read.build_backend
    named = " ".join([read.image or "", read.image_digest or "", *read.argv[:1]]).lower()
    if "vulkan" in named or "radv" in named or "amdvlk" in named:
        return "vulkan"
    if "rocm" in named or "hip" in named:
        return "rocm"
    names = {e.split("=", 1)[0] for e in read.env}
    if any(n.startswith(("GGML_VK_", "RADV_", "AMD_VULKAN_ICD", "VK_ICD")) for n in names):
        return "vulkan"
    if any(n.startswith(("HSA_", "HIP_", "ROCR_", "ROCBLAS_")) for n in names):
        return "rocm"
    devices = {d.split(":", 1)[0] for d in read.devices}
    if "/dev/kfd" in devices:
        return "rocm"
    if any(d.startswith("/dev/dri") for d in devices):
        return "vulkan"
    return "cpu" if _in_container(read) and not devices else "unknown"


def _in_container(read: ProductionRead) -> bool:
    """Production runs in a container (its own, or a unit's ``docker run``): its paths are the
    container's, its devices those given to it."""
    return read.kind == "container" or read.image is not None


def _tag(ref: str | None) -> str | None:
    last = (ref or "").split("@", 1)[0].rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def derive_baseline(read: ProductionRead) -> ProductionBaseline:
    """The baseline production as deployed gives (see the module's docstring)."""
    executable, flags = _split(read.argv)
    if not executable:
        raise ProductionReadError(f"production {read.name}: no executable in {shlex.join(read.argv)!r}")
    spans = _spans(flags)
    pairs = [(name, value) for name, value, _ in spans]
    changes: list[BaselineChange] = []
    kept: list[tuple[str, str | None]] = []
    kept_tokens: list[str] = []  # as production wrote them (``--ctx-size=4096`` stays one token)
    for name, value, tokens in spans:
        if name in LISTEN_FLAGS:
            changes.append(
                BaselineChange(name, value or "", "set by the run", "production holds its own port")
            )
        else:
            kept.append((name, value))
            kept_tokens += tokens
    env = []
    for e in read.env:
        name, _, value = e.partition("=")
        if name in LISTEN_ENV:
            changes.append(
                BaselineChange(
                    name, value, "unset (the run's --host/--port)", "production holds its own port"
                )
            )
        else:
            env.append(e)
    model = next((v for n, v in kept if n in MODEL_FLAGS and v), None)
    model = model or next((e.split("=", 1)[1] for e in env if e.startswith("LLAMA_ARG_MODEL=")), None)
    if not model:
        raise ProductionReadError(f"production {read.name}: no model file (-m / --model) in its command")
    on_host = _on_host(model, read.mounts) if _in_container(read) else model
    if not _in_container(read):
        changes.append(
            BaselineChange(
                "executable",
                shlex.join(executable),
                f"the llama-server of the matching engine build ({read.build or 'build unread'})",
                "production runs a binary: the baseline runs the image of its llama.cpp build and backend",
            )
        )
    if on_host is None:
        raise ProductionReadError(
            f"production {read.name}: its model {model} is in no mount: the baseline cannot open that file"
        )
    settings = tuple(
        (label, next((v or "on" for n, v in kept if n in names), "default")) for label, names in SETTINGS
    )
    return ProductionBaseline(
        read_digest=read.digest,
        image_ref=read.image_digest,
        image_tag=_tag(read.image),
        executable=tuple(executable),
        flags=tuple(kept_tokens),
        env=tuple(env),
        model_in_engine=model,
        model_on_host=on_host,
        backend=backend_of(read, pairs),
        settings=settings,
        changes=tuple(changes),
        build=read.build,
    )


# ------------------------------------------------------------------------------- a systemd unit


def parse_systemctl_show(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(argv, environment) from ``systemctl show -p ExecStart -p Environment <unit>``.

    ``ExecStart={ path=/usr/bin/llama-server ; argv[]=/usr/bin/llama-server -m … ;
    ignore_errors=no ; … }`` (one line);
    ``Environment=A=1 "B=two words"`` (systemd quotes a value with spaces)."""
    argv: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key == "ExecStart" and "argv[]=" in value:
            inner = value.split("argv[]=", 1)[1]
            inner = inner.split(" ; ", 1)[0]
            argv = tuple(shlex.split(inner))
        elif key == "Environment" and value.strip():
            env = tuple(shlex.split(value))
    return argv, env


# llama.cpp's ``--version``: ``version: 6123 (a1b2c3d)`` (a release), or a packaged build's
# ``version: 0.6.0-dev (build 6123, commit …)``; build 0 is a build that knows no number
_VERSION_BUILD = re.compile(r"version:\s*(\d+)\s*\(|\(build\s+(\d+)\b")
_BACKEND_SAID = (("vulkan", re.compile(r"vulkan", re.I)), ("rocm", re.compile(r"\b(rocm|hip)\b", re.I)))


def parse_build(text: str) -> tuple[str | None, Backend | None]:
    """(``b<N>``, backend) from a llama-server's ``--version`` output: its build number (None when it
    prints none or 0) and the backend it loaded (``load_backend: loaded Vulkan backend``, ``ggml_vulkan:
    Found 1 Vulkan devices``), if it names one."""
    m = _VERSION_BUILD.search(text)
    n = int(next(g for g in m.groups() if g is not None)) if m else 0
    backend = next((name for name, pattern in _BACKEND_SAID if pattern.search(text)), None)
    return (f"b{n}" if n > 0 else None), backend  # type: ignore[return-value]


# ------------------------------------------------------------------------------- a changed production


def differences(old: ProductionRead, new: ProductionRead) -> list[str]:
    """What changed between two reads of production, in words (``-c 8192 -> 16384``, ``image …``)."""
    out: list[str] = []
    if old.image_digest != new.image_digest:
        out.append(f"image {old.image_digest} -> {new.image_digest}")
    if old.argv[:1] != new.argv[:1]:
        out.append(f"executable {shlex.join(old.argv[:1])} -> {shlex.join(new.argv[:1])}")
    if old.build != new.build or old.build_backend != new.build_backend:
        out.append(f"build {old.build} ({old.build_backend}) -> {new.build} ({new.build_backend})")
    before, after = dict(_pairs(_split(old.argv)[1])), dict(_pairs(_split(new.argv)[1]))
    for flag in dict.fromkeys([*before, *after]):
        if flag not in after:
            out.append(f"{flag} removed (was {before[flag] or 'on'})")
        elif flag not in before:
            out.append(f"{flag} added ({after[flag] or 'on'})")
        elif before[flag] != after[flag]:
            out.append(f"{flag} {before[flag]} -> {after[flag]}")
    env_before, env_after = set(old.env), set(new.env)
    if env_before != env_after:
        names = sorted({e.split("=", 1)[0] for e in env_before ^ env_after})
        out.append(f"environment {', '.join(names)}")  # names only: a value may be a secret
    if old.mounts != new.mounts or old.devices != new.devices:
        out.append("mounts or devices")
    return out or ["what was read (same settings, another form)"]
