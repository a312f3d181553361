"""The GPU targets of a HIP library, read from its clang offload bundles -- compressed ones (CCOB) too.

A HIP library carries its device code as clang offload bundles whose entry ids name each target
(``hipv4-amdgcn-amd-amdhsa--gfx1151``). ROCm's ``--offload-compress`` wraps a bundle as ``CCOB``
(LLVM OffloadBundler.cpp, CompressedOffloadBundle): the ids are inside the compressed data, so a scan
for the plain text finds none there and an image built without gfx1151 would pass the architecture
gate unread. This reader decompresses each CCOB (zlib, or zstd where the image has a decoder); one it
cannot decompress is reported ``unreadable`` with why, and the gate refuses it rather than guess.

``READER`` is Python source: it runs *inside* the image (python3 -c READER FILE...), so it uses the
standard library only; the same text is executed here for the project's own use and tests.
"""

from __future__ import annotations

READER = r'''
import re, struct, subprocess, sys, zlib

_ID = re.compile(rb"amdgcn-amd-amdhsa--(gfx[0-9a-f]+)")
# CCOB header after the 4-byte magic: version (u16), method (u16), then by version the total size
# and the uncompressed size (v1: uncompressed u32 only; v2: u32 + u32; v3: u64 + u64), then a u64 hash
_LAYOUT = {1: ("<I", 0), 2: ("<II", 1), 3: ("<QQ", 1)}
_METHODS = {0: "zlib", 1: "zstd"}


def _zstd(data):
    try:
        from compression import zstd  # Python 3.14
        return zstd.decompress(data), None
    except ImportError:
        pass
    try:
        import zstandard
        return zstandard.ZstdDecompressor().decompressobj().decompress(data), None
    except ImportError:
        pass
    try:
        out = subprocess.run(["zstd", "-d", "-c", "-q"], input=data, capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None, (
            "zstd-compressed and the image has no zstd decoder "
            "(python3 compression.zstd, zstandard or the zstd command)"
        )
    # a bundle cut out of a library may carry trailing bytes: zstd still writes the whole frame
    return (out.stdout, None) if out.stdout else (None, "zstd could not decompress it")


def _inflate(data):
    try:
        return zlib.decompressobj().decompress(data), None
    except zlib.error as e:
        return None, "zlib could not decompress it (" + str(e) + ")"


def targets_of(data):
    """(targets, problem): every gfx target of the library's bundles, plain and compressed; problem
    names a compressed bundle that could not be read (None when all were)."""
    found = [m.decode() for m in _ID.findall(data)]
    problem = None
    at = data.find(b"CCOB")
    while at >= 0:
        head = at + 4
        if len(data) >= head + 4:
            version, method = struct.unpack_from("<HH", data, head)
            layout = _LAYOUT.get(version)
            if layout is None:
                problem = problem or "a compressed offload bundle (CCOB) of unknown version " + str(version)
            else:
                fmt, has_total = layout
                sizes = struct.unpack_from(fmt, data, head + 4)
                start = head + 4 + struct.calcsize(fmt) + 8
                end = at + sizes[0] if has_total else len(data)
                body = data[start:end]
                if method == 0:
                    plain, why = _inflate(body)
                elif method == 1:
                    plain, why = _zstd(body)
                else:
                    plain, why = None, "compressed with unknown method " + str(method)
                if plain is None:
                    problem = problem or (
                        "a compressed offload bundle (CCOB v"
                        + str(version)
                        + ", "
                        + _METHODS.get(method, "?")
                        + ") is "
                        + why
                    )
                else:
                    found += [m.decode() for m in _ID.findall(plain)]
        at = data.find(b"CCOB", at + 4)
    return sorted(set(found)), problem


def report(path, name=None):
    """One line for the architecture gate: ``name: targets`` or ``name: unreadable: why``."""
    with open(path, "rb") as f:
        targets, problem = targets_of(f.read())
    name = name or path
    if problem and not targets:
        print(name + ": unreadable: " + problem)
    elif problem:
        print(name + ": " + " ".join(targets) + " unreadable: " + problem)
    else:
        print(name + ": " + (" ".join(targets) or "none"))


if __name__ == "__main__":
    for _path in sys.argv[1:]:
        report(_path)
'''

_namespace: dict = {"__name__": "strix_pipeline.engines.offload_bundles.reader"}
exec(compile(READER, "offload_bundles.READER", "exec"), _namespace)  # noqa: S102 - our own text
targets_of = _namespace["targets_of"]
