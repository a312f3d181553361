"""SSE framing: however the bytes are cut into reads, the same events come out."""

from __future__ import annotations

import random

from strix_pipeline.loadgen.sse import SSEDecoder, decode_timed

STREAM = (
    b": keep-alive\n\n"
    b'data: {"a": 1}\n\n'
    b"event: message\r\ndata: two\r\ndata: lines\r\n\r\n"
    b"id: 7\rdata: cr-only\r\r"
    b"data:no-space\n\n"
    b":comment\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [b'{"a": 1}', b"two\nlines", b"cr-only", b"no-space", b"[DONE]"]


def decode_in_pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    dec = SSEDecoder()
    out: list[bytes] = []
    prev = 0
    for c in [*sorted(cuts), len(data)]:
        out += dec.feed(data[prev:c])
        prev = c
    return out + dec.close()


def test_whole_stream() -> None:
    assert decode_in_pieces(STREAM, []) == EXPECTED


def test_every_single_split_point() -> None:
    # Includes the cuts between CR and LF, and inside "data:".
    for i in range(len(STREAM) + 1):
        assert decode_in_pieces(STREAM, [i]) == EXPECTED, f"split at byte {i}"


def test_byte_by_byte_and_random_splits() -> None:
    assert decode_in_pieces(STREAM, list(range(len(STREAM)))) == EXPECTED
    rng = random.Random(7)
    for _ in range(200):
        cuts = rng.sample(range(len(STREAM)), rng.randint(1, 12))
        assert decode_in_pieces(STREAM, cuts) == EXPECTED


def test_missing_final_blank_line_is_delivered() -> None:
    assert decode_in_pieces(b"data: x\n\ndata: [DONE]", []) == [b"x", b"[DONE]"]
    assert decode_in_pieces(b"data: x\n\ndata: [DONE]\n", []) == [b"x", b"[DONE]"]
    assert decode_in_pieces(b"data: x\n\ndata: [DONE]\r", []) == [b"x", b"[DONE]"]


def test_line_over_128_kib_in_many_reads() -> None:
    payload = b"y" * (300 * 1024)
    data = b"data: " + payload + b"\n\ndata: after\n\n"
    cuts = list(range(1000, len(data), 65536))
    assert decode_in_pieces(data, cuts) == [payload, b"after"]


def test_comments_and_blank_lines_alone_make_no_event() -> None:
    assert decode_in_pieces(b": ping\n\n\n\n: ping\r\n\r\n", []) == []


def test_event_time_is_the_read_that_completed_it() -> None:
    chunks = [(10, b"data: a\n"), (20, b"\ndata: b\n\nda"), (30, b"ta: c\n\n"), (40, b"data: d")]
    assert list(decode_timed(chunks)) == [(20, b"a"), (20, b"b"), (30, b"c"), (40, b"d")]


def test_lf_only_stream_at_every_split_point() -> None:
    # The LF-only fast path (what llama.cpp, vLLM and SGLang send), mixed with a later CRLF event.
    lf = b': ping\n\ndata: {"a": 1}\n\ndata: two\ndata: lines\n\ndata: [DONE]\n\n'
    want = [b'{"a": 1}', b"two\nlines", b"[DONE]"]
    for i in range(len(lf) + 1):
        for j in range(i, len(lf) + 1, 7):
            assert decode_in_pieces(lf, [i, j]) == want, (i, j)
    mixed = lf[:-14] + b"data: crlf\r\n\r\n" + lf[-14:]
    for i in range(len(mixed) + 1):
        assert decode_in_pieces(mixed, [i]) == [*want[:2], b"crlf", b"[DONE]"], i
