"""The keys `vllm bench serve` writes to its result JSON, for checking strix's writer against them.

They are written out here from vLLM's own source, not from strix's writer: vllm-project/vllm
``vllm/benchmarks/serve.py`` (``main_async``: the setup, ``--metadata`` and traffic keys, then
``benchmark()``'s result dict less the per-request lists that only ``--save-detailed`` keeps;
``process_one_metric``: mean_/median_/std_/p<N>_<metric>_ms for each ``--percentile-metrics`` name at
each ``--metric-percentiles`` value).
"""

from __future__ import annotations

# serve.py main_async: result_json["date"] ... ["num_prompts"], then the --metadata keys, then traffic.
VLLM_SETUP_KEYS = ["date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts"]
VLLM_TRAFFIC_KEYS = ["request_rate", "burstiness", "max_concurrency"]
# serve.py benchmark(): the generation result dict, without input_lens, output_lens, start_times, ttfts,
# itls, generated_texts and errors (main_async deletes them unless --save-detailed; latencies and
# queue_times stay).
VLLM_RESULT_KEYS = [
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "latencies",
    "queue_times",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "rtfx",
]


def vllm_metric_keys(metrics: list[str], percentiles: list[str]) -> list[str]:
    """process_one_metric's keys, in its call order (ttft, tpot, itl, e2el, client queue, e2el+queue)."""
    order = ["ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue"]
    keys = []
    for m in (m for m in order if m in metrics):
        keys += [f"mean_{m}_ms", f"median_{m}_ms", f"std_{m}_ms"] + [f"p{p}_{m}_ms" for p in percentiles]
    return keys
