"""Decode efficiency = decode tok/s x bytes per token / measured bandwidth: a figure in (0, 1] with its
inputs, and no figure at all (a problem saying which input is suspect) when it cannot be one."""

from __future__ import annotations

import math

import pytest

from strix_pipeline.memory.efficiency import Efficiency, decode_efficiency

GEMMA_GGUF_BYTES = 246_587_904 + 18_432 * 256  # weights + KV of 256 tokens of context


def test_a_plausible_decode_is_a_share_of_the_limit_with_its_inputs() -> None:
    e = decode_efficiency(23.0, GEMMA_GGUF_BYTES, 32e9)
    assert e.problem is None
    assert e.value == pytest.approx(23.0 * GEMMA_GGUF_BYTES / 32e9)
    assert e.value == pytest.approx(0.1806, abs=1e-4)
    assert (e.decode_tok_s, e.bytes_per_token, e.bandwidth_bytes_per_s) == (23.0, GEMMA_GGUF_BYTES, 32e9)
    assert e.as_dict() == {
        "value": e.value,
        "decode_tok_s": 23.0,
        "bytes_per_token": GEMMA_GGUF_BYTES,
        "bandwidth_bytes_per_s": 32e9,
        "problem": None,
    }
    # anyone can recompute it from what is stored
    d = e.as_dict()
    assert d["decode_tok_s"] * d["bytes_per_token"] / d["bandwidth_bytes_per_s"] == pytest.approx(d["value"])


def test_exactly_the_limit_is_still_a_figure() -> None:
    e = decode_efficiency(100.0, 2e8, 2e10)
    assert e.value == 1.0 and e.problem is None


def test_above_one_is_no_figure_but_a_problem_naming_the_inputs() -> None:
    # 200 tok/s x 250 MB/token = 50 GB/s read, against 32 GB/s measured
    e = decode_efficiency(200.0, 250e6, 32e9)
    assert isinstance(e, Efficiency)
    assert e.value is None
    assert e.problem is not None
    assert e.problem.startswith("above 1 (1.56): the weights may sit in a cache the probe does not measure")
    assert "or an input is wrong" in e.problem
    assert "decode_tok_s=200" in e.problem and "bytes_per_token=2.5e+08" in e.problem
    assert "50 GB/s read" in e.problem and "bandwidth_bytes_per_s=32 GB/s" in e.problem
    # the inputs are kept, so the suspect one can be found
    assert (e.decode_tok_s, e.bytes_per_token, e.bandwidth_bytes_per_s) == (200.0, 250e6, 32e9)


def test_just_above_one_is_caught_too() -> None:
    e = decode_efficiency(100.0, 2e8 * (1 + 1e-9), 2e10)
    assert e.value is None and e.problem and e.problem.startswith("above 1")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ((0.0, 2e8, 2e10), "decode_tok_s=0.0 is not positive"),
        ((-3.0, 2e8, 2e10), "decode_tok_s=-3.0 is not positive"),
        ((10.0, 0, 2e10), "bytes_per_token=0 is not positive"),
        ((10.0, 2e8, 0.0), "bandwidth_bytes_per_s=0.0 is not positive"),
        ((math.nan, 2e8, 2e10), "decode_tok_s=nan is not finite"),
        ((10.0, math.inf, 2e10), "bytes_per_token=inf is not finite"),
        ((10.0, 2e8, -math.inf), "bandwidth_bytes_per_s=-inf is not finite"),
        ((10.0, 2e8, None), "bandwidth_bytes_per_s=None is not a number"),
        ((True, 2e8, 2e10), "decode_tok_s=True is not a number"),
        ((10.0, "2e8", 2e10), "bytes_per_token='2e8' is not a number"),
    ],
)
def test_an_unusable_input_gives_no_figure_and_is_named(args: tuple, named: str) -> None:
    e = decode_efficiency(*args)
    assert e.value is None
    assert e.problem is not None and e.problem.startswith("an input is unusable")
    assert named in e.problem


def test_every_unusable_input_is_named_at_once() -> None:
    e = decode_efficiency(0.0, math.nan, -1.0)
    assert e.problem is not None
    assert "decode_tok_s=0.0" in e.problem and "bytes_per_token=nan" in e.problem
    assert "bandwidth_bytes_per_s=-1.0" in e.problem


def test_a_product_that_overflows_or_underflows_is_no_figure() -> None:
    over = decode_efficiency(1e300, 1e300, 1.0)
    assert over.value is None and over.problem and "not a positive finite number" in over.problem
    under = decode_efficiency(1e-200, 1e-200, 1e300)
    assert under.value is None and under.problem and "not a positive finite number" in under.problem
