"""Long contexts on the Box simulator over the real ``ssh://`` path: the example Box config's
``standard`` prefill ladder measures the field report's long-context points. A model profile set the way
the example sets it -- as far as the model allows natively, plus 1K -- gets its 32K level measured by a
real llama-server (Gemma 3 270M, 32,768 tokens natively, like Qwen3-30B-A3B), the levels below it too,
and its 64K level recorded as beyond the context, never sent; the example's gpt-oss profiles
(131,072 natively) plan the 64K level itself. Where the engine serves less than the profile asks (its
slots capped at the model's training context, as llama-server caps Gemma's at 32,768 unless told the
model holds more), the run says so.

With the example's old context (16,384 for every profile) the ladder stopped near 16K: the 32K level
was never measured on any model and the 64K level never planned.

What is sent is what is asserted: the whole example ladder is planned against the context
(``ladder_levels``, the function the suite itself plans with), and the engine is sent its two longest
levels -- the 32K prefill, the point of the test, and the 64K level, which is refused. The levels below
32K take the same path at lengths the other llama-server tests measure, and cost half as much again as
the 32K level (2K-16K 84 s against 32K's 160 s on a 2-core AVX-512 EPYC; the ladder took 824 s in all
on a 2-core AVX2 one).
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.bench_docker import HOST, image_record, managed, remove_left_behind
from support.box_sim import BoxSim, box_config
from support.llama_image import LlamaImage
from support.paths import REPO
from support.sshd import Sshd

from strix_pipeline.config import StrixConfig
from strix_pipeline.config_load import load_config
from strix_pipeline.loadgen.scenarios import ladder_levels
from strix_pipeline.memory.gguf_header import read_gguf_header
from strix_pipeline.records import RunResult
from strix_pipeline.runner import BenchmarkTarget, run_benchmark
from strix_pipeline.warehouse import Warehouse

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.llama, pytest.mark.sshd, pytest.mark.slow]

EXAMPLE = REPO / "config" / "strix-halo.example.toml"
PROFILE = "standard"
RUN_PREFIX = "boxlong-"
# Each example model's context without rope scaling, from its model card (the example's comment says
# the same): Qwen3-30B-A3B 32,768 (131,072 only with YaRN), gpt-oss-120b 131,072.
NATIVE_CONTEXT = {
    "qwen3-30b-a3b-gguf": 32768,
    "qwen3-30b-a3b": 32768,
    "gpt-oss-120b": 131072,
    "gpt-oss-120b-gguf": 131072,
}


@pytest.fixture(autouse=True)
def nothing_left_behind(docker_engine: None) -> Iterator[None]:
    yield
    left = remove_left_behind(RUN_PREFIX)
    assert not left, f"containers left behind: {left}"


def example() -> StrixConfig:
    return load_config(EXAMPLE)


def gguf_context(model_path: Path) -> tuple[str, int]:
    """(the metadata key of the model's training context, its value) from the GGUF's header."""
    metadata, _, _ = read_gguf_header(model_path)
    key = f"{metadata['general.architecture']}.context_length"
    return key, metadata[key]


def twin_context(native: int) -> int:
    """The context the example gives its profiles of a model with ``native`` tokens natively."""
    twin = next((m for m, n in NATIVE_CONTEXT.items() if n == native), None)
    assert twin, f"no example model has {native} tokens natively"
    return example().models[twin].context_length


def box_run(
    tmp_path: Path,
    llama: LlamaImage,
    model_path: Path,
    sshd: Sshd,
    probe_image: str,
    monkeypatch: pytest.MonkeyPatch,
    run_id: str,
    scenarios: list[str],
    *,
    profile: str = PROFILE,
    ladder: list[int] | None = None,
    **model: object,
) -> tuple[StrixConfig, RunResult]:
    """One forced run of the Gemma profile (``model`` overrides its keys) on the simulated Box, with
    the example's ``standard`` profile at one request per ladder level (``ladder``: only these of its
    input lengths)."""
    sim = BoxSim.build(tmp_path / "box")
    sim.install(monkeypatch, probe_image)
    standard = example().profiles[PROFILE].model_dump()
    # one request per level keeps the example's input lengths affordable on this machine's cores
    standard["prefill_ladder"]["requests_per_level"] = 1
    if ladder is not None:
        assert set(ladder) <= set(standard["prefill_ladder"]["input_tokens"]), ladder
        standard["prefill_ladder"]["input_tokens"] = ladder
    data = box_config(tmp_path, llama, model_path, sshd).model_dump()
    data["models"]["gemma"].update(model)
    data["profiles"][PROFILE] = standard
    config = StrixConfig.model_validate(data)
    lines: list[str] = []
    started = time.monotonic()
    result = run_benchmark(
        config,
        BenchmarkTarget(HOST, "llamacpp", "gemma", profile, image_record(llama)),
        run_id=run_id,
        log=lines.append,
        force=True,
        scenarios=scenarios,
    )
    print(f"run {run_id}: {time.monotonic() - started:.0f} s, {result.run.launch_command}")
    assert managed(run_id) == [], "the run left its engine container"
    r = result.run
    assert r.status == "ok", (r.status, r.failure_reason, lines[-20:])
    return config, result


@pytest.mark.timeout(1500)
def test_the_32k_level_is_measured_on_the_box_and_64k_recorded_as_beyond_the_models_context(
    llama, model_path, box_sshd, box_key, box_probe_image, tmp_path, monkeypatch
):
    """The example's ``standard`` ladder, planned for Gemma 3 270M with the context the example gives a
    model of the same native context, sends every level up to 32,768 tokens; a real llama-server on the
    simulated Box, over ssh://, serves its 32,768-token level (the engine's own prompt count), the
    engine's slots hold that context, and 65,536 is not sent but named as beyond the profile's context,
    in the run and the warehouse."""
    key, native = gguf_context(model_path)
    context = twin_context(native)
    ladder = example().profiles[PROFILE].prefill_ladder
    # llama-server caps a slot at the model's training context ("the slot context exceeds the training
    # context of the model - capping"), and Gemma 3 270M's is the 32K point itself, so a 32K prompt with
    # its BOS and output never fits it. Gemma is given the training context its profile needs; no RoPE
    # scaling is configured, so the override changes nothing else. A Box model whose GGUF says exactly
    # 32,768 meets the same cap, and its run names it (the next test).
    # the example's whole ladder, planned as the suite plans it: every level up to the native context
    # is sent, 64K is named beyond it and nothing replaces it
    planned, note = ladder_levels(ladder.input_tokens, context, ladder.output_tokens)
    assert planned == [n for n in ladder.input_tokens if n <= native] and 32768 in planned, planned
    assert note and note.startswith(f"prefill_ladder: 65536 > context {context}, not sent"), note
    longest = sorted(ladder.input_tokens)[-2:]
    assert longest == [32768, 65536], ladder.input_tokens
    run_id = RUN_PREFIX + "ladder"
    config, result = box_run(
        tmp_path,
        llama,
        model_path,
        box_sshd,
        box_probe_image,
        monkeypatch,
        run_id,
        ["prefill_ladder"],
        ladder=longest,
        context_length=context,
        extra_flags={"llamacpp": ["--override-kv", f"{key}=int:{context}"]},
    )
    r = result.run
    reason = r.failure_reason or ""
    measured = [q for q in result.requests if q.scenario == "prefill_ladder" and not q.warmup]
    for q in measured:
        print(f"prefill_ladder {q.level}: {q.input_tokens} tokens, e2e {q.e2e_ms:.0f} ms, ok {q.ok}")

    # every level sent up to the model's native context was served, at the length the engine counted
    served = {q.level: q for q in measured if q.ok}
    for n in (n for n in longest if n <= native):
        assert n in served, f"the {n}-token level was not measured (context {context}): {sorted(served)}"
        q = served[n]
        assert not q.input_tokens_estimated and q.input_tokens is not None
        assert abs(q.input_tokens - n) <= 2, (n, q.input_tokens)  # BOS, one merge where the text joins
        # the engine prefilled it, nothing came from a cache
        assert json.loads(q.server_timings or "{}").get("prompt_n", 0) >= n - 2, (n, q.server_timings)
    assert 32768 in served

    # 64K is beyond this model: not sent, named with the profile's context; the cap (33,756) is within
    # 5 % of the 32K level, which already measures it, so no second prefill as long is sent
    assert 65536 not in {q.level for q in measured}
    capped = re.search(
        rf"prefill_ladder: 65536 > context {context}, not sent: the 32768-token level is the longest "
        rf"that fits \((\d+)\)",
        reason,
    )
    assert capped, reason
    cap = int(capped.group(1))
    assert 32768 < cap < context and sorted(served) == [n for n in longest if n <= native], (
        cap,
        sorted(served),
    )

    # the engine was started so that every slot holds the profile's context (-c is shared by the slots)
    argv = shlex.split(r.launch_command or "")
    total, slots = int(argv[argv.index("-c") + 1]), int(argv[argv.index("-np") + 1])
    assert total == context * slots and total // slots >= native, argv
    assert "the server serves" not in reason  # its /props n_ctx per slot is the profile's, not less

    with Warehouse.open(config.warehouse_path()) as wh:
        wh.load_run(result)
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        rows = wh.query_df(
            "SELECT level, input_tokens FROM requests WHERE run_id = ? AND scenario = 'prefill_ladder' "
            "AND ok AND NOT warmup ORDER BY level",
            [run_id],
        ).to_dicts()
        run_row = wh.query_df("SELECT status, failure_reason FROM runs WHERE run_id = ?", [run_id]).to_dicts()
    assert [row["level"] for row in rows] == sorted(served)
    assert {row["level"]: row["input_tokens"] for row in rows}[32768] == served[32768].input_tokens
    assert run_row[0]["status"] == "ok" and capped.group(0) in run_row[0]["failure_reason"]


@pytest.mark.timeout(300)
def test_an_engine_serving_less_than_the_profiles_context_is_named_in_the_run(
    llama, model_path, box_sshd, box_key, box_probe_image, tmp_path, monkeypatch
):
    """The same profile context on the GGUF as it is: llama-server caps its slots at the model's 32,768
    tokens of training context, and the run names what it served against what the profile asked, so a
    ladder capped there is never taken for the 32K point silently."""
    _, native = gguf_context(model_path)
    context = twin_context(native)
    assert context > native
    _, result = box_run(
        tmp_path,
        llama,
        model_path,
        box_sshd,
        box_probe_image,
        monkeypatch,
        RUN_PREFIX + "as-is",
        ["smoke"],
        profile="tiny",
        context_length=context,
    )
    reason = result.run.failure_reason or ""
    assert f"context: the server serves {native} tokens per request, not {context}" in reason, reason
