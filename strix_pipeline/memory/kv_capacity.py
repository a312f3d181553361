"""The KV cache bytes vLLM needs for a token capacity (context per slot x slots), with its block rounding.

So both engines hold KV for the same context: llama-server gets ``-c context x slots -np slots``; vLLM
gets ``--kv-cache-memory-bytes`` sized here for ``max_num_seqs`` requests of ``max_model_len`` tokens
each, instead of a pool a configuration chose. The rules are vLLM 0.32's (vllm/v1/core/kv_cache_utils.py,
vllm/v1/kv_cache_interface.py), checked against its own log on this project's Gemma 3 270M: with 2 GiB it
reported "CPU KV cache size: 110,733 tokens, Maximum concurrency for 2,048 tokens per request: 54.07x",
which :func:`vllm_kv_sizing` reproduces (tests/unit/memory/test_kv_capacity.py).

- A page is one block of ``block_size`` tokens of one layer: block_size x kv_heads x head_dim x 2 (K, V)
  x dtype bytes.
- Layers are bucketed by attention kind (full, or a sliding window of W tokens). The group size is the
  smallest bucket's layer count (the largest when it is under 1.5x the smallest); each bucket is split
  into ceil(layers / group size) groups. Gemma 3 270M: 3 full + 15 sliding layers -> 6 groups of 3.
- One block of the shared pool is group size x page bytes; vLLM makes available_bytes // that blocks.
- A request of ``max_model_len`` tokens takes, per group: full attention ceil(len / block_size);
  sliding window ceil(min(W - 1 + in-flight tokens, len) / block_size) + 1, the in-flight tokens being
  ``max_num_batched_tokens`` (one batch in flight: no pipeline parallelism).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from strix_pipeline.memory.bytes_per_token import BF16_CACHE_BYTES, ModelFileError

# vLLM's block size by platform when --block-size is not given: the CPU backend's attention kernels
# take 128 (the 0.32 log: "kv cache group sizes (128, …)"); CUDA/ROCm attention backends take 16.
CPU_BLOCK_SIZE = 128
GPU_BLOCK_SIZE = 16
# vLLM's API server default max_num_batched_tokens on the CPU and on GPUs under 70 GiB (arg_utils.py
# get_batch_defaults): 2048; Strix Halo's device (about 62 GiB as HIP reports it) is one of those.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
FULL = None  # a full-attention layer's window


@dataclass(frozen=True)
class KvLayout:
    """Per attention layer its sliding window (None: full attention), and the K/V shape of one token."""

    windows: tuple[int | None, ...]
    kv_heads: int
    head_dim: int
    dtype_bytes: int = BF16_CACHE_BYTES

    def page_bytes(self, block_size: int) -> int:
        return block_size * self.kv_heads * self.head_dim * 2 * self.dtype_bytes

    @property
    def bytes_per_token_all_layers(self) -> int:
        return len(self.windows) * self.kv_heads * self.head_dim * 2 * self.dtype_bytes


@dataclass(frozen=True)
class KvSizing:
    """What vLLM makes of a KV budget: its pool blocks and what one full-length request takes."""

    bytes: int  # the budget: --kv-cache-memory-bytes
    block_size: int
    group_size: int  # layers per group: one pool block is group_size pages
    groups: tuple[int | None, ...]  # each group's window (None: full attention)
    block_bytes: int
    blocks_per_request: int
    max_model_len: int

    @property
    def num_blocks(self) -> int:
        return self.bytes // self.block_bytes

    @property
    def max_concurrency(self) -> float:
        return self.num_blocks / self.blocks_per_request

    @property
    def capacity_tokens(self) -> int:
        """What vLLM logs as "KV cache size: N tokens"."""
        return int(self.max_concurrency * self.max_model_len)

    def describe(self) -> str:
        full = sum(1 for g in self.groups if g is FULL)
        return (
            f"{self.bytes} B = {self.num_blocks} blocks of {self.block_bytes} B ({self.group_size} layers x "
            f"{self.block_size} tokens), {self.blocks_per_request} blocks per {self.max_model_len}-token "
            f"request ({full} full-attention + {len(self.groups) - full} sliding-window groups): "
            f"{self.capacity_tokens} tokens, concurrency {self.max_concurrency:.2f}"
        )


def parse_config(text: str, where: str) -> dict:
    """A checkpoint's ``config.json`` text as a JSON object; ``where`` names it in the error."""
    try:
        config = json.loads(text)
    except ValueError as e:
        raise ModelFileError(f"{where}: does not parse ({e})") from e
    if not isinstance(config, dict):
        raise ModelFileError(f"{where}: is {type(config).__name__}, not a JSON object")
    return config


def layout_from_config(directory: Path, dtype_bytes: int = BF16_CACHE_BYTES) -> KvLayout:
    """The KV layout of a Hugging Face checkpoint directory on this machine
    (:func:`layout_from_config_json`)."""
    path = Path(directory) / "config.json"
    try:
        text = path.read_text()
    except OSError as e:
        raise ModelFileError(f"{path}: cannot be read ({e.strerror or e})") from e
    return layout_from_config_json(parse_config(text, str(path)), str(path), dtype_bytes)


def layout_from_config_json(config: dict, where: str, dtype_bytes: int = BF16_CACHE_BYTES) -> KvLayout:
    """The KV layout of a Hugging Face checkpoint from its parsed ``config.json`` (``text_config`` when
    nested), read wherever the engine sees it; ``where`` names it in errors. ``layer_types``
    (``sliding_attention`` / ``full_attention``) with ``sliding_window``, else every layer full
    attention (or every layer sliding when a window is used and no pattern is given)."""
    if isinstance(config.get("text_config"), dict):
        config = config["text_config"]

    def count(key: str) -> int:
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ModelFileError(f"{where}: field {key} is {value!r}: expected a whole number >= 1")
        return value

    layers = count("num_hidden_layers")
    kv_heads = count("num_key_value_heads" if config.get("num_key_value_heads") else "num_attention_heads")
    head_dim = (
        count("head_dim") if config.get("head_dim") else count("hidden_size") // count("num_attention_heads")
    )
    window = config.get("sliding_window")
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise ModelFileError(f"{where}: field layer_types is not a list of {layers} layer kinds")
        unknown = sorted({str(t) for t in types if t not in ("sliding_attention", "full_attention")})
        if unknown:
            raise ModelFileError(f"{where}: field layer_types has kinds {unknown} this sizing does not know")
        if "sliding_attention" in types and not (isinstance(window, int) and window > 0):
            raise ModelFileError(f"{where}: sliding layers but field sliding_window is {window!r}")
        windows = tuple(window if t == "sliding_attention" else FULL for t in types)
    elif isinstance(window, int) and window > 0 and config.get("use_sliding_window") is not False:
        windows = (window,) * layers
    else:
        windows = (FULL,) * layers
    return KvLayout(windows, kv_heads, head_dim, dtype_bytes)


def _groups(windows: tuple[int | None, ...]) -> tuple[int, tuple[int | None, ...]]:
    """(group size, each group's window): vLLM's _get_kv_cache_groups_uniform_page_size."""
    buckets = Counter(windows)
    smallest, largest = min(buckets.values()), max(buckets.values())
    size = largest if largest < smallest * 1.5 else smallest
    groups: list[int | None] = []
    for window, n in buckets.items():
        groups += [window] * math.ceil(n / size)
    return size, tuple(groups)


def _request_blocks(window: int | None, max_model_len: int, block_size: int, in_flight: int) -> int:
    if window is FULL:
        return math.ceil(max_model_len / block_size)
    return math.ceil(min(window - 1 + in_flight, max_model_len) / block_size) + 1


def vllm_kv_sizing(
    layout: KvLayout,
    budget_bytes: int,
    max_model_len: int,
    *,
    block_size: int = CPU_BLOCK_SIZE,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
) -> KvSizing:
    """What vLLM makes of ``budget_bytes`` of KV cache for this layout."""
    size, groups = _groups(layout.windows)
    per_request = sum(_request_blocks(w, max_model_len, block_size, max_num_batched_tokens) for w in groups)
    return KvSizing(
        budget_bytes,
        block_size,
        size,
        groups,
        size * layout.page_bytes(block_size),
        per_request,
        max_model_len,
    )


def vllm_kv_bytes_for(
    layout: KvLayout,
    max_model_len: int,
    max_num_seqs: int,
    *,
    block_size: int = CPU_BLOCK_SIZE,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
) -> KvSizing:
    """The KV budget that holds exactly ``max_num_seqs`` requests of ``max_model_len`` tokens: whole
    blocks, so vLLM's "Maximum concurrency" is ``max_num_seqs``.00x and its token capacity
    ``max_num_seqs x max_model_len`` (the capacity llama-server's ``-c`` gives its slots)."""
    probe = vllm_kv_sizing(
        layout, 0, max_model_len, block_size=block_size, max_num_batched_tokens=max_num_batched_tokens
    )
    budget = probe.block_bytes * probe.blocks_per_request * max_num_seqs
    return vllm_kv_sizing(
        layout, budget, max_model_len, block_size=block_size, max_num_batched_tokens=max_num_batched_tokens
    )
