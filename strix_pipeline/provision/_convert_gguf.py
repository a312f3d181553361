"""Convert a GGUF model to a bf16 safetensors checkpoint. Runs INSIDE the vLLM venv's python.

Usage: python _convert_gguf.py GGUF_FILE OUT_DIR CHAT_TEMPLATE_FILE

The project's own environment has no torch or transformers; the vLLM venv
(:mod:`strix_pipeline.provision.vllm_env`) has both plus ``accelerate`` and ``gguf``. This file
imports nothing from strix_pipeline. It prints one JSON line with the facts it found (the last line
of stdout).

What it does:
1. load with ``GgufConfig(dequantize=True)`` -> full-precision weights, cast to bf16;
2. drop the quantizer (``model.hf_quantizer``, ``config.quantization_config``) so the saved checkpoint
   is plain bf16 and vLLM does not look for a GGUF quantization method;
3. the tokenizer transformers builds from GGUF adds no BOS although the GGUF metadata says
   ``tokenizer.ggml.add_bos_token = true``: put a ``<bos> $A`` template post-processor into
   ``tokenizer.json`` (and ``add_bos_token`` into ``tokenizer_config.json``);
4. the model is a base model without a chat template: write ``chat_template.jinja`` (which
   transformers and vLLM pick up from the checkpoint directory) from the given file.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path


def gguf_facts(path: Path) -> dict:
    """Metadata the checkpoint must agree with: file type (quantization), BOS settings, architecture."""
    import gguf

    reader = gguf.GGUFReader(str(path))

    def field(name: str):
        f = reader.fields.get(name)
        if f is None:
            return None
        try:
            return f.contents()
        except Exception:  # noqa: BLE001 - older gguf without contents(): decode by hand
            part = f.parts[f.data[0]]
            return part.tolist()[0] if hasattr(part, "tolist") else part

    file_type = field("general.file_type")
    try:
        quant = (
            gguf.LlamaFileType(int(file_type)).name.removeprefix("MOSTLY_") if file_type is not None else None
        )
    except ValueError:
        quant = f"file_type {file_type}"
    tensor_types: dict[str, int] = {}
    for t in reader.tensors:
        tensor_types[t.tensor_type.name] = tensor_types.get(t.tensor_type.name, 0) + 1
    return {
        "architecture": field("general.architecture"),
        "name": field("general.name"),
        "file_type": file_type,
        "quantization": quant,
        "tensor_types": tensor_types,
        "add_bos_token": field("tokenizer.ggml.add_bos_token"),
        "add_eos_token": field("tokenizer.ggml.add_eos_token"),
        "bos_token_id": field("tokenizer.ggml.bos_token_id"),
        "eos_token_id": field("tokenizer.ggml.eos_token_id"),
        "has_chat_template": reader.fields.get("tokenizer.chat_template") is not None,
    }


def fix_tokenizer(out: Path, bos_token: str, bos_id: int, add_bos: bool) -> bool:
    """Make the saved tokenizer add BOS as the GGUF says; True when tokenizer.json was changed."""
    changed = False
    tj = out / "tokenizer.json"
    data = json.loads(tj.read_text())
    if add_bos:
        special = {bos_token: {"id": bos_token, "ids": [bos_id], "tokens": [bos_token]}}
        bos = {"SpecialToken": {"id": bos_token, "type_id": 0}}
        data["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [
                bos,
                {"Sequence": {"id": "A", "type_id": 0}},
                bos,
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": special,
        }
        changed = True
        tj.write_text(json.dumps(data, ensure_ascii=False, indent=2))
    tc = out / "tokenizer_config.json"
    cfg = json.loads(tc.read_text()) if tc.exists() else {}
    cfg["add_bos_token"] = bool(add_bos)
    cfg["add_eos_token"] = False
    cfg.setdefault("bos_token", bos_token)
    tc.write_text(json.dumps(cfg, ensure_ascii=False, indent=2))
    return changed


def main(argv: list[str]) -> int:
    gguf_file, out_dir, template_file = Path(argv[1]), Path(argv[2]), Path(argv[3])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    started = time.monotonic()
    facts = gguf_facts(gguf_file)
    print(f"gguf: {json.dumps(facts)}", flush=True)
    kw = {"gguf_file": gguf_file.name}
    print("loading tokenizer", flush=True)
    tok = AutoTokenizer.from_pretrained(str(gguf_file.parent), **kw)
    print("loading and dequantising the model", flush=True)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf_file.parent),
        quantization_config=GgufConfig(dequantize=True),
        dtype=torch.bfloat16,
        **kw,
    )
    model = model.to(torch.bfloat16)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False if hasattr(model, "is_quantized") else None
    print(f"saving to {out_dir}", flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    tok.save_pretrained(str(out_dir))
    cfg_path = out_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    if "quantization_config" in cfg:
        del cfg["quantization_config"]
        cfg_path.write_text(json.dumps(cfg, indent=2))
    bos_id = facts["bos_token_id"] if facts["bos_token_id"] is not None else tok.bos_token_id
    bos_token = tok.convert_ids_to_tokens(int(bos_id))
    add_bos = bool(facts["add_bos_token"]) if facts["add_bos_token"] is not None else True
    fixed = fix_tokenizer(out_dir, bos_token, int(bos_id), add_bos)
    shutil.copyfile(template_file, out_dir / "chat_template.jinja")
    # Check the fix with a fresh load, as vLLM will load it.
    tok2 = AutoTokenizer.from_pretrained(str(out_dir))
    ids = tok2("Hello")["input_ids"]
    if add_bos and ids[:1] != [int(bos_id)]:
        print(f"tokenizer still adds no BOS: {ids}", file=sys.stderr)
        return 2
    if ids[:2] == [int(bos_id), int(bos_id)]:
        print(f"tokenizer adds BOS twice: {ids}", file=sys.stderr)
        return 2
    size = sum(p.stat().st_size for p in out_dir.glob("*.safetensors"))
    result = {
        "gguf": facts,
        "dtype": "bfloat16",
        "bos_fixed": fixed,
        "bos_token": bos_token,
        "bos_token_id": int(bos_id),
        "hello_ids": ids,
        "parameters": sum(p.numel() for p in model.parameters()),
        "safetensors_bytes": size,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
