"""Decode efficiency's inputs on a Docker host, measured on the host benchmarked: its copy bandwidth with
the engine's thread count and the bytes the model reads per generated token.

One short-lived container of the host's ``efficiency_probe_image`` (python3 with numpy: the official
vLLM ROCm image has both, busybox neither) runs before the engine starts, with the network disabled,
the model file or checkpoint directory bind-mounted read-only (a path that does not exist is refused,
never created), labelled ``strix.probe=true`` like the project's other probe containers (never
``strix.managed``: the engine leftover guard is not for it, and the GPU-holder check does not count
it). It is named :data:`PROBE_NAME`: one per host, and a probe a killed run left is removed by the
next one before it starts its own. The sources of ``memory/bandwidth.py``, ``memory/gguf_header.py`` and
``memory/bytes_per_token.py`` (stdlib + numpy, no project import but the GGUF header's) travel in its
argv, so nothing of the project needs to be in the image. It prints one JSON object on stdout, read
apart from stderr, which only explains a failure.

Every failure -- the image missing or its pull failing, no interpreter or no numpy in it, a model the
reader refuses, a non-zero exit, output that is no JSON object -- is a reason string, never an
exception: the run goes on and stores it as ``efficiency_problem``.

The thread count: llama-server's ``-t``/``--threads`` when its flags set one (the last wins, as in the
engine), else every CPU the container may use (``os.sched_getaffinity``), which the stored
``bandwidth_threads`` then says. llama-server's own default is close to that (its physical cores).
vLLM and SGLang -- and llama-server offloading to the GPU -- decode on the GPU, whose bandwidth a CPU
copy approaches from below: there a figure above 1 is possible, and is stored as the problem it
names, not as a value.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path, PurePosixPath
from typing import Any

from strix_pipeline.config import DockerHostConfig
from strix_pipeline.engines.base import flag_value
from strix_pipeline.hosts.box import checks as box_checks
from strix_pipeline.hosts.docker import model_files
from strix_pipeline.hosts.docker.host import split_image_ref
from strix_pipeline.memory import bandwidth as bandwidth_module
from strix_pipeline.memory import bytes_per_token as bytes_module
from strix_pipeline.memory import gguf_header as gguf_module
from strix_pipeline.memory.bandwidth import BandwidthProbe
from strix_pipeline.memory.bytes_per_token import ModelBytes

log = logging.getLogger(__name__)

PROBE_NAME = "strix-efficiency-probe"
PROBE_LABELS = {"strix.probe": "true"}
MODEL_MOUNT = "/strix-model"  # the model's parent in the probe container: the image's own paths stay visible
# numpy's import, a 3 s copy probe and a header read; a Box over ssh adds seconds, not minutes
TIMEOUT_S = 180

# Run as ``python -c _DRIVER <bandwidth.py> <gguf_header.py> <bytes_per_token.py> <arguments as JSON>``:
# each source is loaded as a module of its own (registered first: a dataclass looks its module up in
# sys.modules); the GGUF header's under its project name, the one bytes_per_token.py imports it by.
# An error of one half is reported beside the other half's result.
_DRIVER = r"""
import json, os, pathlib, sys, types

def load(name, source):
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, name + ".py", "exec"), module.__dict__)
    return module

def error(e):
    return type(e).__name__ + ": " + str(e)

args = json.loads(sys.argv[4])
out = {"python": sys.version.split()[0]}
try:
    bandwidth = load("strix_bandwidth", sys.argv[1])
    threads = args["threads"] or len(os.sched_getaffinity(0))
    probe = bandwidth.measure_copy_bandwidth(
        threads, args["size_mib"], args["repeats"], args["time_budget_s"]
    )
    out["bandwidth"] = probe.as_dict()
except Exception as e:
    out["bandwidth_error"] = error(e)
if args["model"] is not None:
    try:
        load(args["header_module"], sys.argv[2])
        reader = load("strix_bytes_per_token", sys.argv[3])
        path = pathlib.Path(args["model"])
        try:
            found = reader.from_hf_checkpoint(path) if path.is_dir() else reader.from_gguf(path)
            out["model"] = found.as_dict()
        except (reader.ModelFileError, OSError) as e:
            out["model_error"] = str(e)
    except Exception as e:
        out["model_error"] = error(e)
print(json.dumps(out))
"""


def engine_threads(kind: str, flags: list[str]) -> int | None:
    """llama-server's thread count from its argv (``-t N``, ``--threads=N``; the last one wins), else
    None: the probe then takes every CPU the container may use."""
    if kind != "llamacpp":
        return None
    # -t is --threads' short name: one spelling, then the engines' own reader of a flag's last value
    spelled = [f"--threads{f[2:]}" if f == "-t" or f.startswith("-t=") else f for f in flags]
    try:
        n = int(flag_value(spelled, "--threads") or "")
    except ValueError:
        return None
    return n if n >= 1 else None  # llama-server reads -t -1 as "its default"


def model_host_path(path: str | None, models_dir: str | None) -> tuple[str | None, str | None]:
    """(the model's absolute path on the host, or why there is none): the engine's own rule
    (box_checks.model_host_path), and a path it leaves relative is a reason, not a mount."""
    if not path:
        return None, "no model path known for this run"
    found = box_checks.model_host_path(path, models_dir)
    if not PurePosixPath(found).is_absolute():
        return None, f"model path {path!r} is relative and the host has no models_dir"
    return found, None


def probe_command(
    python: str,
    threads: int | None,
    model_in_container: str | None,
    *,
    size_mib: int = 256,
    repeats: int = 5,
    time_budget_s: float = 3.0,
) -> list[str]:
    """The probe's argv: ``threads`` None takes every CPU the process may use; ``model_in_container``
    None measures the bandwidth alone. The defaults are the local probe's (memory/bandwidth.py)."""
    args = {
        "threads": threads,
        "size_mib": size_mib,
        "repeats": repeats,
        "time_budget_s": time_budget_s,
        "model": model_in_container,
        "header_module": gguf_module.__name__,
    }
    return [
        python,
        "-c",
        _DRIVER,
        Path(bandwidth_module.__file__).read_text(),
        Path(gguf_module.__file__).read_text(),
        Path(bytes_module.__file__).read_text(),
        json.dumps(args),
    ]


def _positive_int(x: Any, *, zero: bool = False) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and (x >= 0 if zero else x >= 1)


def _bandwidth(d: Any) -> tuple[BandwidthProbe | None, str | None]:
    if not isinstance(d, dict):
        return None, f"bandwidth is {d!r}, not an object"
    try:
        probe = BandwidthProbe(**d)
    except TypeError as e:
        return None, f"bandwidth {d!r}: {e}"
    rate = probe.bytes_per_s
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0:
        return None, f"bandwidth_bytes_per_s={rate!r} is not a positive number"
    if not (
        _positive_int(probe.threads) and _positive_int(probe.buffer_bytes) and _positive_int(probe.repeats)
    ):
        return None, f"bandwidth {d!r}: threads, buffer_bytes and repeats are not counts >= 1"
    if not isinstance(probe.method, str):
        return None, f"bandwidth method {probe.method!r} is not text"
    return BandwidthProbe(float(rate), probe.threads, probe.buffer_bytes, probe.repeats, probe.method), None


def _model(d: Any, host_path: str | None) -> tuple[ModelBytes | None, str | None]:
    if not isinstance(d, dict):
        return None, f"model is {d!r}, not an object"
    try:
        model = ModelBytes(**d)
    except TypeError as e:
        return None, f"model {d!r}: {e}"
    if not (_positive_int(model.weight_bytes) and _positive_int(model.kv_bytes_per_token, zero=True)):
        return (
            None,
            f"model weight_bytes={model.weight_bytes!r}, kv_bytes_per_token={model.kv_bytes_per_token!r}",
        )
    if not isinstance(model.source, str) or not isinstance(model.details, dict):
        return None, f"model source {model.source!r} or details are not text and an object"
    # the reader saw the mount; the host's path is the one anyone can look at
    details = {
        k: host_path if k in ("file", "directory") and host_path else v for k, v in model.details.items()
    }
    return ModelBytes(model.weight_bytes, model.kv_bytes_per_token, model.source, details), None


def parse_output(
    stdout: str, *, image: str, host_model_path: str | None = None
) -> tuple[BandwidthProbe | None, ModelBytes | None, list[str]]:
    """The probe's stdout (its last line: one JSON object) -> (bandwidth, model bytes, the reasons of
    what is missing). ``host_model_path`` replaces the mount's path in the model's details."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    try:
        out = json.loads(lines[-1]) if lines else None
    except ValueError:
        out = None
    if not isinstance(out, dict):
        return None, None, [f"efficiency probe in {image} printed no JSON object: {stdout[-300:]!r}"]
    problems: list[str] = []
    probe = model = None
    if "bandwidth" in out:
        probe, why = _bandwidth(out["bandwidth"])
        if why:
            problems.append(f"efficiency probe in {image}: {why}")
    else:
        why = out.get("bandwidth_error") or "no bandwidth in its output"
        problems.append(f"bandwidth probe in {image} failed: {str(why)[:300]}")
    if "model" in out:
        model, why = _model(out["model"], host_model_path)
        if why:
            problems.append(f"efficiency probe in {image}: {why}")
    elif "model_error" in out:
        problems.append(f"model bytes unknown: {str(out['model_error'])[:300]}")
    elif host_model_path is not None:
        problems.append(f"efficiency probe in {image}: no model bytes in its output")
    return probe, model, problems


def _error(e: BaseException) -> str:
    return " ".join(str(getattr(e, "explanation", None) or e).split())[:300]


def prepare_image(client: Any, host: DockerHostConfig) -> str | None:
    """Make sure the efficiency probe image is on the host (pulled when missing), while production
    still serves: a pull after its stop would lengthen the outage. None when it is there, else why not."""
    import docker.errors

    image = host.efficiency_probe_image
    if not image:
        return "no efficiency_probe_image"
    try:
        client.images.get(image)
        return None
    except docker.errors.ImageNotFound:
        pass
    except Exception as e:  # noqa: BLE001 - docker-py wraps socket, HTTP and image errors alike
        return f"efficiency probe image {image} not looked up: {_error(e)}"
    repo, reference = split_image_ref(image)
    try:
        client.images.pull(repo, tag=reference)
        client.images.get(image)
    except Exception as e:  # noqa: BLE001 - a registry that refuses or a name that is not there: a reason
        return f"efficiency probe image {image} could not be pulled: {_error(e)}"
    return None


def _remove(container: Any) -> None:
    try:
        container.remove(force=True)
    except Exception as e:  # noqa: BLE001 - gone already: nothing left behind
        log.debug("efficiency probe removal: %s", e)


def measure_on_host(
    client: Any,
    host: DockerHostConfig,
    threads: int | None,
    model_path: str | None,
    *,
    timeout_s: float = TIMEOUT_S,
    size_mib: int = 256,
    time_budget_s: float = 3.0,
) -> tuple[BandwidthProbe | None, ModelBytes | None, str | None]:
    """(bandwidth, model bytes, why either is missing) from one probe container on the host.
    ``model_path``: the profile's path (relative to ``models_dir`` or absolute; None: the bandwidth
    alone); ``threads`` None: every CPU the container may use. Never raises for the host's or the
    image's sake."""
    import docker.types

    image = host.efficiency_probe_image
    if not image:
        return None, None, "no efficiency_probe_image"
    host_path, why_no_path = model_host_path(model_path, host.models_dir)
    mounts, in_container = [], None
    if host_path is not None:
        in_container = f"{MODEL_MOUNT}/{PurePosixPath(host_path).name}"
        # every part of a split GGUF beside the first, as the reader looks for them
        mounts = [
            docker.types.Mount(f"{MODEL_MOUNT}/{PurePosixPath(f).name}", f, type="bind", read_only=True)
            for f in model_files.required_files(host_path).files
        ]
    argv = probe_command(
        host.efficiency_probe_python, threads, in_container, size_mib=size_mib, time_budget_s=time_budget_s
    )
    try:  # one probe per host: a probe a killed run left is replaced, never duplicated
        client.containers.get(PROBE_NAME).remove(force=True)
    except Exception:  # noqa: BLE001 - no leftover (NotFound), or the create below says what is wrong
        pass
    container = None
    try:
        container = client.containers.create(
            image,
            argv[1:],
            entrypoint=argv[:1],
            name=PROBE_NAME,
            network_disabled=True,
            mounts=mounts,
            labels=PROBE_LABELS,
        )
        container.start()
    except Exception as e:  # noqa: BLE001 - no interpreter at that name (exit 127 at start), no image, no model
        if container is not None:
            _remove(container)
        what = _error(e)
        hint = (
            f" (the image needs {host.efficiency_probe_python} with numpy)" if container is not None else ""
        )
        return None, None, f"efficiency probe in {image} did not start: {what}{hint}"
    try:
        try:
            code = int(container.wait(timeout=timeout_s).get("StatusCode", -1))
        except Exception as e:  # noqa: BLE001 - the wait's read timeout, or the connection lost
            return (
                None,
                None,
                f"efficiency probe in {image} did not finish within {timeout_s:g} s: {_error(e)}",
            )
        out = (container.logs(stdout=True, stderr=False) or b"").decode("utf-8", "replace")
        err = (container.logs(stdout=False, stderr=True) or b"").decode("utf-8", "replace")
    except Exception as e:  # noqa: BLE001 - the daemon gone while reading the logs
        return None, None, f"efficiency probe in {image}: its output not read: {_error(e)}"
    finally:
        _remove(container)
    if code != 0:
        said = " ".join(err.split())[-300:] or " ".join(out.split())[-300:]
        return None, None, f"efficiency probe in {image} exited {code}: {said}"
    probe, model, problems = parse_output(out, image=image, host_model_path=host_path)
    if why_no_path and model_path is not None:  # no model asked for (doctor's check): nothing unknown
        problems.append(f"model bytes unknown: {why_no_path}")
    return probe, model, "; ".join(problems) or None
