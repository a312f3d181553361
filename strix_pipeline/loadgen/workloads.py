"""Workloads: code prompts cut from the Python standard library, JSON prompts, shared prefixes, datasets.

Everything is deterministic from the seed (on a given Python version: the corpus is its stdlib).
Exact input lengths come from the server's own tokenizer (``/tokenize`` + ``/detokenize``: llama.cpp,
vLLM and SGLang each have one); without it the length is estimated from characters and flagged. Either
way the request record keeps the true count from ``usage``. Every prompt starts with a unique tag so
that no request reuses another's cached prefix unless the scenario means it to (``prefix_cache``).
"""

from __future__ import annotations

import json
import random
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

# Long-lived stdlib modules, so the corpus barely moves between Python versions.
CORPUS_MODULES = (
    "argparse.py",
    "difflib.py",
    "textwrap.py",
    "csv.py",
    "json/decoder.py",
    "json/encoder.py",
    "heapq.py",
    "bisect.py",
    "fractions.py",
    "statistics.py",
    "dataclasses.py",
    "string.py",
    "shlex.py",
    "calendar.py",
    "ipaddress.py",
    "pprint.py",
    "configparser.py",
    "tarfile.py",
    "zipfile.py",
    "functools.py",
    "collections/__init__.py",
    "enum.py",
    "typing.py",
    "inspect.py",
    "pathlib.py",
    "datetime.py",
    "decimal.py",
    "_pydecimal.py",
    "email/message.py",
    "http/client.py",
)
CHARS_PER_TOKEN = 3.6  # code through a BPE tokenizer; only used when the server cannot tokenize
CODE_TASKS = (
    "Review the following Python code and explain what it does.",
    "Summarise the purpose of each function in this code.",
    "Find possible bugs in this Python code.",
    "Describe how you would test the code below.",
)


def load_corpus(min_chars: int) -> str:
    """Concatenated stdlib source, at least ``min_chars`` long (repeated if the stdlib is short)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for rel in CORPUS_MODULES:
        p = root / rel
        if p.is_file():
            texts.append(f"# file: {rel}\n" + p.read_text(encoding="utf-8", errors="replace"))
    if not texts:  # a stripped Python: fall back to any sources present
        for p in sorted(root.glob("*.py"))[:40]:
            texts.append(f"# file: {p.name}\n" + p.read_text(encoding="utf-8", errors="replace"))
    corpus = "\n".join(texts) or "def f(x):\n    return x + 1\n"
    while len(corpus) < min_chars:
        corpus += "\n" + corpus
    return corpus


@dataclass
class Prompt:
    prompt_id: str
    text: str
    target_tokens: int | None  # tokens we aimed for (None: a dataset prompt of unknown length)
    measured_tokens: int | None  # what the server tokenizer said, None when estimated
    output_tokens: int


class ServerTokenizer:
    """The serving engine's tokenizer over HTTP, probed once: llama.cpp, vLLM/SGLang flavours."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, model: str) -> None:
        self.session, self.base_url, self.model = session, base_url, model
        self.flavour: str | None = None  # "llamacpp" | "openai" | None (no tokenizer)
        self.path = "/tokenize"
        self.detokenize_ok = False

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            async with self.session.post(
                self.base_url + path, json=body, timeout=aiohttp.ClientTimeout(total=60)
            ) as r:
                if r.status != 200:
                    return None
                return await r.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None

    def _body(self, text: str) -> dict[str, Any]:
        if self.flavour == "llamacpp":
            return {"content": text, "add_special": False}
        return {"model": self.model, "prompt": text, "add_special_tokens": False}

    async def probe(self) -> bool:
        for flavour, path in (("llamacpp", "/tokenize"), ("openai", "/tokenize"), ("openai", "/v1/tokenize")):
            self.flavour, self.path = flavour, path
            toks = await self.tokenize("def add(a, b):\n    return a + b\n")
            if toks:
                back = await self.detokenize(toks)
                self.detokenize_ok = back is not None and "add" in back
                return True
        self.flavour = None
        return False

    async def tokenize(self, text: str) -> list[int] | None:
        if not self.flavour:
            return None
        got = await self._post(self.path, self._body(text))
        if not isinstance(got, dict) or not isinstance(got.get("tokens"), list):
            return None
        return [t if isinstance(t, int) else t.get("id") for t in got["tokens"]]

    async def detokenize(self, tokens: list[int]) -> str | None:
        path = self.path.replace("tokenize", "detokenize")
        body: dict[str, Any] = {"tokens": tokens}
        if self.flavour != "llamacpp":
            body["model"] = self.model
        got = await self._post(path, body)
        if not isinstance(got, dict):
            return None
        text = got.get("content", got.get("prompt"))
        return text if isinstance(text, str) else None


class Workload:
    """Builds prompts of exact token lengths from a token slice of the corpus."""

    def __init__(self, tokenizer: ServerTokenizer | None, seed: int) -> None:
        self.tok = tokenizer
        self.rng = random.Random(seed)
        self.corpus = ""
        self.corpus_tokens: list[int] | None = None
        self.chars_per_token = CHARS_PER_TOKEN
        self._counter = 0

    @property
    def exact(self) -> bool:
        return self.corpus_tokens is not None

    async def prepare(self, max_tokens: int) -> None:
        """Tokenize enough corpus for the longest prompt plus room for distinct offsets."""
        n_chars = int((max_tokens + 4096) * 4.5)
        self.corpus = load_corpus(n_chars)[:n_chars]
        if self.tok and (self.tok.flavour or await self.tok.probe()):
            toks = await self.tok.tokenize(self.corpus)
            if toks:
                self.chars_per_token = len(self.corpus) / len(toks)
                if self.tok.detokenize_ok and len(toks) >= max_tokens:
                    self.corpus_tokens = toks

    def new_id(self, kind: str) -> str:
        self._counter += 1
        return f"{kind}-{self._counter:05d}-{self.rng.getrandbits(32):08x}"

    async def _count(self, text: str) -> int | None:
        if not self.exact or not self.tok:
            return None
        toks = await self.tok.tokenize(text)
        return len(toks) if toks is not None else None

    async def corpus_text(self, n_tokens: int) -> tuple[str, bool]:
        """A corpus slice of ``n_tokens`` tokens at a seeded offset; (text, exact)."""
        n_tokens = max(0, n_tokens)
        if self.corpus_tokens is not None and self.tok:
            span = max(1, len(self.corpus_tokens) - n_tokens)
            off = self.rng.randrange(span)
            text = await self.tok.detokenize(self.corpus_tokens[off : off + n_tokens])
            if text is not None:
                return text, True
        n_chars = int(n_tokens * self.chars_per_token)
        span = max(1, len(self.corpus) - n_chars)
        off = self.rng.randrange(span)
        return self.corpus[off : off + n_chars], False

    async def code_prompt(self, n_tokens: int, output_tokens: int, kind: str = "code") -> Prompt:
        """A unique tag and task, then code up to ``n_tokens`` tokens in all."""
        pid = self.new_id(kind)
        head = f"{pid.split('-')[-1]} {self.rng.choice(CODE_TASKS)}\n\n"
        head_n = await self._count(head)
        head_len = head_n if head_n is not None else int(len(head) / self.chars_per_token)
        body, exact = await self.corpus_text(n_tokens - head_len)
        # Exact up to a possible merge of the two tokens where head and body meet.
        measured = n_tokens if exact and head_n is not None else None
        return Prompt(pid, head + body, n_tokens, measured, output_tokens)

    def json_prompt(self, output_tokens: int) -> Prompt:
        """Asks for a small JSON object, generated from the seed (the smoke test's JSON check)."""
        pid = self.new_id("json")
        name = self.rng.choice(["ada", "grace", "linus", "barbara", "ken", "margaret"])
        age = self.rng.randint(20, 90)
        text = (
            f'Return only a JSON object with the keys "name" and "age" for this person: name {name}, '
            f"age {age}. No other text."
        )
        return Prompt(pid, text, None, None, output_tokens)

    async def shared_prefix(self, n_tokens: int) -> tuple[str, str]:
        """A prefix nobody has sent before (id, text) for one cold/warm pair of ``prefix_cache``."""
        p = await self.code_prompt(n_tokens, 0, kind="prefix")
        return p.prompt_id, p.text


def random_lengths(
    n: int, input_len: int, output_len: int, range_ratio: float = 0.0, seed: int = 0
) -> tuple[list[int], list[int]]:
    """Per-request (input, output) token lengths as vLLM's random dataset draws them: integer-uniform
    in [floor(len * (1 - r)), ceil(len * (1 + r))] (output at least 1), inputs first, from
    ``numpy.random.default_rng(seed)``. (vLLM first takes the tokenizer's special tokens off the input
    length; the prompts here are sent without special tokens.)"""
    import math

    import numpy as np

    if not 0.0 <= range_ratio < 1.0:
        raise ValueError(f"--random-range-ratio must be in [0, 1), got {range_ratio}")
    if n < 1 or input_len < 1 or output_len < 1:
        raise ValueError("--num-prompts, --random-input-len and --random-output-len must be positive")
    rng = np.random.default_rng(seed)
    in_lo, in_hi = math.floor(input_len * (1 - range_ratio)), math.ceil(input_len * (1 + range_ratio))
    out_lo = max(1, math.floor(output_len * (1 - range_ratio)))
    out_hi = max(1, math.ceil(output_len * (1 + range_ratio)))
    inputs = rng.integers(max(1, in_lo), in_hi + 1, size=n)
    outputs = rng.integers(out_lo, out_hi + 1, size=n)
    return [int(x) for x in inputs], [int(x) for x in outputs]


def load_dataset(path: str | Path, default_output_tokens: int = 256) -> list[Prompt]:
    """GuideLLM-style JSONL: one object a line with ``prompt`` and optionally ``output_tokens_count``
    (``prompt_tokens_count`` is read when present, as the target length)."""
    prompts = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise ValueError(f"{path}:{i}: not JSON: {e}") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
                raise ValueError(f'{path}:{i}: each line needs a "prompt" string')
            out = obj.get("output_tokens_count", default_output_tokens)
            if not isinstance(out, int) or out <= 0:
                raise ValueError(f"{path}:{i}: output_tokens_count must be a positive integer")
            target = obj.get("prompt_tokens_count")
            prompts.append(
                Prompt(
                    f"dataset-{i:05d}", obj["prompt"], target if isinstance(target, int) else None, None, out
                )
            )
    if not prompts:
        raise ValueError(f"{path}: no prompts")
    return prompts
