"""Server-sent events framing, decoded after the stream has been received.

The client only timestamps raw chunks while a stream is live (see client.py); this decoder turns those
chunks into events afterwards, so JSON parsing never delays the timestamp of another stream. Framing
follows the WHATWG EventSource rules: lines end with CRLF, LF or CR; a line starting with ``:`` is a
comment (keep-alive); ``data:`` lines accumulate and a blank line dispatches the event. Unlike a
browser, a final event with no blank line after it is still delivered, because some servers close
the stream right after ``data: [DONE]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

_EOL = re.compile(rb"\r\n|\r|\n")


class SSEDecoder:
    """Incremental decoder: ``feed`` bytes as they came, get the data payloads of completed events."""

    __slots__ = ("_buf", "_data")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        out: list[bytes] = []
        if b"\r" not in chunk and b"\r" not in self._buf:
            # Fast path, LF-only streams (llama.cpp, vLLM, SGLang): split in C, keep the partial last line.
            data = bytes(self._buf) + chunk if self._buf else chunk
            lines = data.split(b"\n")
            self._buf = bytearray(lines.pop())
            for line in lines:
                self._line(line, out)
            return out
        self._buf += chunk
        buf = self._buf
        pos = 0
        end = len(buf)
        while True:
            m = _EOL.search(buf, pos)
            if m is None:
                break
            # A CR at the very end may be the first half of a CRLF split across two reads.
            if m.end() == end and m.end() - m.start() == 1 and buf[m.start()] == 0x0D:
                break
            self._line(bytes(buf[pos : m.start()]), out)
            pos = m.end()
        if pos:
            del buf[:pos]
        return out

    def close(self) -> list[bytes]:
        """End of stream: deliver a last line and event that had no terminator."""
        out: list[bytes] = []
        if self._buf:
            line = bytes(self._buf).rstrip(b"\r")
            self._buf.clear()
            self._line(line, out)
        if self._data:
            out.append(b"\n".join(self._data))
            self._data = []
        return out

    def _line(self, line: bytes, out: list[bytes]) -> None:
        if not line:
            if self._data:
                out.append(b"\n".join(self._data))
                self._data = []
            return
        if line[0] == 0x3A:  # ":" comment, used as keep-alive
            return
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        # "event", "id" and "retry" carry nothing an OpenAI-compatible stream needs.


def decode_timed(chunks: Iterable[tuple[int, bytes]]) -> Iterator[tuple[int, bytes]]:
    """Events with the arrival time of the read that completed them."""
    dec = SSEDecoder()
    last_t = 0
    for t, chunk in chunks:
        last_t = t
        for data in dec.feed(chunk):
            yield t, data
    for data in dec.close():
        yield last_t, data
