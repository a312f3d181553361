"""`strix box init ssh://user@box`: a starting configuration for a new Box, from what is read there
read-only (hosts/box/survey.py): production as deployed (its container, image source, model file,
context and slots), the GPU device nodes and video/render groups, the memory, the GGUF models beside
production's. The decision's baseline is production as deployed (no baseline_image / baseline_model)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from rich.console import Console

from strix_pipeline.cli.common import as_markup, error
from strix_pipeline.config import DockerHostConfig
from strix_pipeline.config_load import load_config
from strix_pipeline.hosts.box.survey import BoxSurvey, survey
from strix_pipeline.hosts.docker.host import make_client
from strix_pipeline.hosts.docker.ssh import client_transport
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.planning.production_baseline import ProductionBaseline, derive_baseline
from strix_pipeline.planning.production_target import split_digest_ref
from strix_pipeline.units import GB

_QUANT = re.compile(r"(?i)(IQ\d\w*?|Q\d_K_[SML]|Q\d_K|Q\d_\d|Q\d|BF16|F16|F32|MXFP4)(?=[-_.]|$)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("box", help="a Box: a starting configuration read from it")
    psub = p.add_subparsers(dest="box_command", metavar="COMMAND")
    i = psub.add_parser(
        "init",
        help="write a starting configuration for a new Box from what is read there (read-only)",
        description="Connects to the Box's Docker over ssh, reads production (the running llama-server "
        "container, or --production NAME), its devices and groups, its memory and the GGUF models beside "
        "production's, and writes a configuration whose decision baseline is production as deployed.",
    )
    i.add_argument("url", metavar="ssh://user@box[:port]")
    i.add_argument(
        "--out", default="strix.toml", help="the file to write (default: strix.toml; never overwritten)"
    )
    i.add_argument("--name", default="box", help="the host's name in the configuration (default: box)")
    i.add_argument("--production", help="production's container name (default: the one running llama-server)")
    i.add_argument(
        "--user-env", default="STRIX_BOX_USER", help="the variable the written config reads the user from"
    )
    i.add_argument(
        "--key-env", help="the variable holding the ssh private key's path (default: ssh's own keys)"
    )
    i.add_argument("--known-hosts", help="a known_hosts file with the Box's host key (default: ssh's own)")
    i.set_defaults(func=run_init)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _q(value: object) -> str:
    return json.dumps(value)  # a TOML basic string / array of them is a JSON one


def _flag(base: ProductionBaseline, label: str) -> str | None:
    value = dict(base.settings).get(label)
    return None if value in (None, "default") else value


def model_profile(base: ProductionBaseline) -> tuple[str, dict[str, object]]:
    """Production's model as a profile: its file, its context per slot and slots, its alias."""
    stem = PurePosixPath(base.model_on_host).name.removesuffix(".gguf")
    name = re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-")[:60] or "production"
    quant = _QUANT.search(stem)
    slots = int(_flag(base, "slots") or 1)
    ctx = int(_flag(base, "context") or 4096 * slots)
    flags = list(base.flags)
    alias = next((flags[i + 1] for i, f in enumerate(flags[:-1]) if f in ("-a", "--alias")), None)
    family = re.sub(r"[-_.]?" + re.escape(quant.group(1)) + r"$", "", stem, flags=re.I) if quant else stem
    return name, {
        "model": alias or stem,
        "family": family.lower() or name,
        "quantization": quant.group(1).upper() if quant else "unknown",
        "path": base.model_on_host,
        "context_length": max(1, ctx // slots),
        "parallel": slots,
    }


def config_text(url: str, name: str, s: BoxSurvey, base: ProductionBaseline, args: argparse.Namespace) -> str:
    """The starting configuration (TOML)."""
    assert s.production is not None
    u = urlparse(url)
    hostport = f"{u.hostname}:{u.port}" if u.port else f"{u.hostname}"
    port = next((c.production for c in base.changes if c.what in ("--port", "LLAMA_ARG_PORT")), "8080")
    listen = next((c.production for c in base.changes if c.what in ("--host", "LLAMA_ARG_HOST")), "127.0.0.1")
    health_host = "127.0.0.1" if listen in ("0.0.0.0", "::", "") else listen
    profile, model = model_profile(base)
    lines = [
        f"# A starting configuration for the Box {hostport}, written by `strix box init` from what it read.",
        f"# Production: container {s.production.name}, {base.source}.",
        "# The decision's baseline is production as deployed (no [decision] baseline_image / baseline_model:",
        "# set them only to override it).",
        f"# export {args.user_env}=<the user on the Box> before any strix command.",
        "",
        "[project]",
        'warehouse = "warehouse/strix.duckdb"',
        'artifacts = "artifacts"',
        'schedule = "0 3 * * 1"',
        "",
        f"[hosts.{name}]",
        'kind = "docker"',
        f"docker_host = {_q(f'ssh://{{user}}@{hostport}')}",
        f"ssh_user_env = {_q(args.user_env)}",
    ]
    if args.key_env:
        lines.append(f"ssh_key_path_env = {_q(args.key_env)}")
    if args.known_hosts:
        lines.append(f"ssh_known_hosts = {_q(str(Path(args.known_hosts).resolve()))}")
    lines.append(f"devices = {_q(s.devices)}")
    for group in ("video", "render"):
        if group in s.groups:
            lines.append(f"{group}_gid = {s.groups[group]}")
    if s.mem_total_bytes:
        lines.append(f"# memory: {s.mem_total_bytes / GB:.1f} GB in MemTotal (set memory_budget_gb below it)")
    lines += [
        "maintenance_window_hours = 6",
        "",
        f"[hosts.{name}.production]",
        f"container = {_q(s.production.name)}",
        f"health_url = {_q(f'http://{health_host}:{port}/health')}",
        "",
        "[engines.llamacpp]",
        'kind = "llamacpp"',
        'role = "baseline"',
    ]
    if base.image_ref and "@" in base.image_ref:
        registry, repository, _ = split_digest_ref(base.image_ref)
        lines += [
            "",
            "[[engines.llamacpp.images]]",
            f"registry = {_q(registry)}",
            f"repository = {_q(repository)}",
        ]
        if base.image_tag:
            lines.append(f"floating = {_q([base.image_tag])}")
        if registry.split(":", 1)[0] in ("127.0.0.1", "localhost"):
            lines.append("insecure = true")
    lines += ["", f"[models.{profile}]"]
    lines += [f"{k} = {_q(v)}" for k, v in model.items()]
    others = [m for m in s.models if m != base.model_on_host]
    if others:
        lines.append("# other models found beside it: " + ", ".join(others))
    lines += [
        "",
        "[profiles.standard]",
        "",
        "[runs]",
        f'{name} = [{{ engine = "llamacpp", model = {_q(profile)}, profile = "standard" }}]',
        "",
        "[decision]",
        f"host = {_q(name)}",
        'baseline_engine = "llamacpp"',
        'candidate_engine = "llamacpp"  # add the candidate engine (vLLM, SGLang) and its model profile',
        'required = ["C1", "C3", "C5"]',
        f"medium_moe_model = {_q(profile)}",
        f"gpt_oss_model = {_q(profile)}",
        "",
    ]
    return "\n".join(lines)


def run_init(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.exists():
        return error(f"{out} exists: not overwritten (give --out)")
    try:
        cfg = DockerHostConfig.model_validate(
            {
                "kind": "docker",
                "docker_host": args.url,
                "ssh_key_path_env": args.key_env,
                "ssh_known_hosts": args.known_hosts,
            }
        )
        client = make_client(cfg, timeout_s=30)
    except (ValueError, EngineStartError) as e:
        return error(f"{args.url}: {e}")
    try:
        transport = client_transport(client)
        s = survey(client, transport.target if transport else None, args.production)
    finally:
        client.close()
    if s.production is None:
        return error(f"no production found on {args.url}: {s.production_why}")
    base = derive_baseline(s.production)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(config_text(args.url, args.name, s, base, args))
    load_config(str(out))  # what was written loads, or the error says why
    console = Console()
    console.print(as_markup(f"wrote {out}: production {s.production.name} as the baseline ({base.source})"))
    console.print(as_markup(f"next: export {args.user_env}=<user>; strix --config {out} doctor"))
    return 0
