"""`vllm bench serve`'s command line in strix's terms: its names merged into strix bench's, and what strix
cannot honour refused by flag before anything is sent (docs/bench-output.md). Beside ``vllm_result``,
which writes vLLM's result file from the run.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from typing import Any

from strix_pipeline.config import ConfigError
from strix_pipeline.loadgen.server import normalize_base_url
from strix_pipeline.loadgen.vllm_result import (
    BACKENDS,
    VllmOptions,
    parse_goodput,
    parse_metadata,
    parse_metric_percentiles,
    parse_percentile_metrics,
)
from strix_pipeline.loadgen.workloads import random_lengths

# vLLM's flags that only shape the random dataset run, by dest: refused with --scenario or --dataset.
RANDOM_ONLY = {
    "input_len": "--input-len",
    "output_len": "--output-len",
    "random_input_len": "--random-input-len",
    "random_output_len": "--random-output-len",
    "random_range_ratio": "--random-range-ratio",
    "random_prefix_len": "--random-prefix-len",
    "endpoint": "--endpoint",
}
# Any of these (by dest) without --scenario or --dataset asks for the vLLM-style random run.
VLLM_RUN = RANDOM_ONLY | {
    "dataset_name": "--dataset-name",
    "base_url": "--base-url",
    "host": "--host",
    "port": "--port",
    "backend": "--backend",
    "num_prompts": "--num-prompts",
    "max_concurrency": "--max-concurrency",
    "request_rate": "--request-rate",
    "num_warmups": "--num-warmups",
    "save_result": "--save-result",
    "append_result": "--append-result",
    "percentile_metrics": "--percentile-metrics",
    "metric_percentiles": "--metric-percentiles",
    "label": "--label",
    "tokenizer": "--tokenizer",
    "served_model_name": "--served-model-name",
}
RANDOM_DEFAULTS = {"num_prompts": 1000, "input_len": 1024, "output_len": 128}  # vLLM's
VLLM_TIMEOUT_S = 6 * 60 * 60  # vLLM's client timeout; the random run uses it unless --timeout


@dataclass
class Plan:
    """What to run, the strix and vLLM names merged and checked before anything is sent."""

    mode: str  # "scenario" | "dataset" | "random"
    url: str
    model: str | None  # the name sent (None: detect)
    model_id: str | None  # vLLM's model_id (--model)
    levels: list[int] | None
    requests: int | None
    rate: float | None  # None: closed loop
    warmup: int | None
    seed: int | None
    endpoint: str | None = None
    chat: bool = True
    input_lens: list[int] = field(default_factory=list)
    output_lens: list[int] = field(default_factory=list)
    result_format: str | None = None  # None: no result file
    vllm: Any = None  # VllmOptions
    compat: dict[str, Any] = field(default_factory=dict)  # recorded in the strix JSON


def _given(args: argparse.Namespace, dest: str) -> bool:
    v = getattr(args, dest, None)
    return not (v is None or v is False or v == [])  # 0 is given: --max-concurrency 0 is refused by name


def _merged(args: argparse.Namespace, strix: str, vllm: str) -> Any:
    a, b = getattr(args, strix), getattr(args, vllm)
    if a is not None and b is not None and a != b:
        raise ConfigError(
            f"--{strix.replace('_', '-')} {a} and --{vllm.replace('_', '-')} {b} name the same setting"
        )
    return a if a is not None else b


def plan_run(args: argparse.Namespace) -> Plan:
    """Merge ``vllm bench serve``'s names into strix's, refuse what strix cannot honour, naming the flag."""
    mode = "scenario" if args.scenario else "dataset" if args.dataset else "random"
    if mode == "random" and not any(_given(args, d) for d in VLLM_RUN):
        raise ConfigError(
            "give --scenario NAME, --dataset FILE.jsonl, or vLLM's --dataset-name random (with "
            "--num-prompts, ...)"
        )
    if args.dataset_path is not None:
        raise ConfigError("--dataset-path: not supported; replay your own prompts with --dataset FILE.jsonl")
    if args.dataset_name is not None and args.dataset_name != "random":
        raise ConfigError(
            f"--dataset-name {args.dataset_name}: strix bench generates only vLLM's 'random' dataset "
            "(replay your own prompts with --dataset FILE.jsonl)"
        )
    if mode != "random":
        for dest, flag in RANDOM_ONLY.items():
            if _given(args, dest):
                raise ConfigError(f"{flag} applies to the random dataset run (no --scenario or --dataset)")
    if args.random_prefix_len:
        raise ConfigError(
            f"--random-prefix-len {args.random_prefix_len}: not supported (only 0); "
            "strix's prefix_cache scenario measures shared prefixes"
        )
    backend = args.backend or ("openai" if mode == "random" else "openai-chat")
    if backend not in BACKENDS:
        raise ConfigError(f"--backend {backend}: strix bench speaks {', '.join(BACKENDS)}")
    if mode != "random" and backend != "openai-chat":
        raise ConfigError(f"--backend {backend}: --scenario and --dataset send their own requests")
    chat = backend == "openai-chat"
    if args.endpoint is not None:
        if (
            not args.endpoint.startswith("/")
            or not args.endpoint.endswith(BACKENDS[backend])
            or (not chat and args.endpoint.endswith("chat/completions"))
        ):
            raise ConfigError(
                f"--endpoint {args.endpoint}: --backend {backend} sends to a path ending in "
                f"/{BACKENDS[backend]}"
                + ("" if chat else " (use --backend openai-chat for chat/completions)")
            )

    url = _merged(args, "url", "base_url")
    if url is None and (args.host or args.port or mode == "random"):
        url = f"http://{args.host or '127.0.0.1'}:{args.port or 8000}"
    elif url is not None and (args.host or args.port):
        raise ConfigError("--host/--port: give either them or --url/--base-url")
    if url is None:
        raise ConfigError("--url is required (vLLM's --base-url, or --host and --port)")
    endpoint = None
    if mode == "random":
        path = args.endpoint or ("/v1/chat/completions" if chat else "/v1/completions")
        full, root = url.rstrip("/") + path, normalize_base_url(url)  # vLLM: api_url = base_url + endpoint
        endpoint = full[len(root) :]

    if args.max_concurrency is not None and args.max_concurrency < 1:
        raise ConfigError("--max-concurrency must be greater than 0")
    levels = parse_levels(args.concurrency)
    if args.max_concurrency is not None:
        if levels is not None and levels != [args.max_concurrency]:
            raise ConfigError(
                f"--concurrency {args.concurrency} and --max-concurrency {args.max_concurrency} disagree"
            )
        levels = [args.max_concurrency]
    requests = _merged(args, "requests", "num_prompts")
    rate = _merged(args, "rate", "request_rate")
    if rate is not None and not rate > 0:
        raise ConfigError(f"--request-rate {rate}: must be positive (inf = all at once)")
    rate = None if rate is None or math.isinf(rate) else rate
    warmup = _merged(args, "warmup", "num_warmups")
    # vLLM: the general --input-len/--output-len override the dataset's own
    input_len = args.input_len if args.input_len is not None else args.random_input_len
    output_len = args.output_len if args.output_len is not None else args.random_output_len

    if mode == "scenario" and rate is not None:
        raise ConfigError("--rate applies to --dataset (the standard scenarios are closed loops)")
    if mode == "dataset" and rate is not None and args.max_concurrency is not None:
        raise ConfigError("--max-concurrency with --request-rate: only for the random dataset run")
    if mode == "random" and levels is not None and len(levels) > 1:
        raise ConfigError(
            f"--concurrency {args.concurrency}: the random run is one level (--max-concurrency N); "
            "sweep with --scenario concurrency_sweep"
        )

    try:
        goodput = parse_goodput(args.goodput)
        metadata = parse_metadata(args.metadata)
        pmetrics = parse_percentile_metrics(args.percentile_metrics)
        percentiles = parse_metric_percentiles(args.metric_percentiles)
        input_lens: list[int] = []
        output_lens: list[int] = []
        if mode == "random":
            requests = requests or RANDOM_DEFAULTS["num_prompts"]
            input_lens, output_lens = random_lengths(
                requests,
                input_len or RANDOM_DEFAULTS["input_len"],
                output_len or RANDOM_DEFAULTS["output_len"],
                args.random_range_ratio or 0.0,
                args.seed if args.seed is not None else 0,
            )
    except ValueError as e:
        raise ConfigError(str(e)) from None

    result_format = args.result_format
    if result_format is None and (args.save_result or args.append_result):
        result_format = "vllm"
    if result_format is not None and not (args.save_result or args.append_result):
        args.save_result = True  # --result-format alone asks for the file
    single = mode == "random" or (mode == "dataset" and (rate is not None or len(levels or [1]) == 1))
    if result_format == "vllm" and not single:
        raise ConfigError(
            "--result-format vllm: vLLM's result is one level; run the random dataset, or --dataset with one "
            "--max-concurrency or a --request-rate (or write --result-format strix)"
        )
    if (args.result_dir or args.result_filename) and result_format is None:
        raise ConfigError(
            "--result-dir/--result-filename: add --save-result (vLLM writes no file without it)"
        )

    model_id = args.model
    compat: dict[str, Any] = {}
    if mode == "random" or any(_given(args, d) for d in VLLM_RUN):
        compat = {
            "backend": backend,
            "endpoint": endpoint,
            "dataset_name": "random" if mode == "random" else None,
            "num_prompts": requests if mode == "random" else None,
            "random_input_len": (input_len or RANDOM_DEFAULTS["input_len"]) if mode == "random" else None,
            "random_output_len": (output_len or RANDOM_DEFAULTS["output_len"]) if mode == "random" else None,
            "random_range_ratio": (args.random_range_ratio or 0.0) if mode == "random" else None,
            "request_rate": rate if rate is not None else "inf",
            "max_concurrency": args.max_concurrency,
            "ignore_eos": True,
            "tokenizer": args.tokenizer,
            "served_model_name": args.served_model_name,
            "label": args.label,
            "goodput": goodput or None,
            "percentile_metrics": pmetrics,
            "metric_percentiles": percentiles,
            "seed": args.seed,
        }
    vllm = VllmOptions(
        backend=backend,
        label=args.label,
        tokenizer_id=args.tokenizer,
        metadata=metadata,
        burstiness=args.burstiness,
        goodput=goodput,
        percentile_metrics=pmetrics,
        metric_percentiles=percentiles,
    )
    return Plan(
        mode=mode,
        url=url,
        model=args.served_model_name or args.model,
        model_id=model_id,
        levels=levels,
        requests=requests,
        rate=rate,
        warmup=warmup,
        seed=args.seed,
        endpoint=endpoint,
        chat=chat,
        input_lens=input_lens,
        output_lens=output_lens,
        result_format=result_format,
        vllm=vllm,
        compat=compat,
    )


def parse_levels(text: str | None) -> list[int] | None:
    """``--concurrency 1,4,8``: the client counts, positive; None when not given."""
    if not text:
        return None
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--concurrency: expected comma-separated integers, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise ConfigError(f"--concurrency: expected positive integers, got {text!r}")
    return levels
