"""A small image with python3 and numpy for Docker tests (a Box's efficiency probe image), assembled from
this machine with ``docker import``: nothing is downloaded.

- the interpreter the project's venv was made from (``sys.base_prefix``): its binary, ``libpython``
  and the standard library without ``site-packages``, ``test``, ``idlelib``, ``tkinter`` and the
  static library, at its host path (the interpreter finds its library from where it lies);
- numpy and the libraries its wheel bundles (``numpy.libs``, found by ``$ORIGIN``) from the venv,
  placed in the interpreter's own ``site-packages``, so a plain ``python3`` imports it: no venv,
  no ``PYTHONPATH``, and nothing of the project;
- every library ``ldd`` resolves for those ELF files (libc, libm, ...), and ``/usr/bin/python3``
  linked to the interpreter, on a ``PATH`` of ``/usr/local/bin:/usr/bin:/bin``.

:func:`python_numpy_image` builds it, checks that ``python3`` in it imports the venv's numpy, and
removes it on exit. Callers request the ``docker_engine`` fixture of conftest.py first.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from support.infra import remove_image
from support.vllm_image import RootFs, image_size, import_image, ldd_closure

TAG = "strix-test/python-numpy:1"
PATH = "/usr/local/bin:/usr/bin:/bin"
# of the interpreter's prefix: the binary, libpython and the standard library (relative to the prefix)
_KEEP = r"bin|bin/python3(\.\d+)?|lib|lib/libpython3[^/]*|lib/python3\.\d+(/.*)?"
_LEFT_OUT = (
    r"^lib/python3\.\d+/"
    r"(site-packages/.+|test|idlelib|tkinter|turtledemo|ensurepip|lib2to3|config-[^/]+)(/|$)"
)
_SKIP = re.compile(rf"^(?!(?:{_KEEP})$)|{_LEFT_OUT}")


@dataclass(frozen=True)
class PythonParts:
    base_prefix: Path  # the interpreter's installation
    version: str  # "3.11"
    numpy_dir: Path  # the venv's numpy package
    numpy_libs: Path | None  # the wheel's bundled libraries beside it
    numpy_version: str

    @property
    def interpreter(self) -> Path:
        return self.base_prefix / "bin" / f"python{self.version}"

    @property
    def site_packages(self) -> Path:
        """The interpreter's own site-packages, where numpy goes in the image."""
        return self.base_prefix / "lib" / f"python{self.version}" / "site-packages"


def python_parts() -> PythonParts | None:
    """This test run's interpreter and numpy, or None when numpy is not installed."""
    try:
        import numpy
    except ImportError:
        return None
    numpy_dir = Path(numpy.__file__).parent
    libs = numpy_dir.parent / "numpy.libs"
    return PythonParts(
        base_prefix=Path(sys.base_prefix),
        version=f"{sys.version_info.major}.{sys.version_info.minor}",
        numpy_dir=numpy_dir,
        numpy_libs=libs if libs.is_dir() else None,
        numpy_version=numpy.__version__,
    )


def _add_tree_at(fs: RootFs, src: Path, dest: Path) -> None:
    """Every file and link under ``src`` at the same place under ``dest`` in the image."""
    for dirpath, dirnames, filenames in os.walk(src):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = Path(dirpath, name)
            fs.entries[str(dest / path.relative_to(src))] = path


def python_rootfs(parts: PythonParts, links: Path) -> RootFs:
    """The image's files; ``links`` is a directory of this machine for the symlinks made here."""
    fs = RootFs()
    for top in ("bin", "lib", "lib64", "sbin"):  # merged /usr: keep the same links
        if os.path.islink(f"/{top}"):
            fs.entries[f"/{top}"] = Path(f"/{top}")
    fs.add_tree(parts.base_prefix, _SKIP)
    _add_tree_at(fs, parts.numpy_dir, parts.site_packages / "numpy")
    if parts.numpy_libs is not None:
        _add_tree_at(fs, parts.numpy_libs, parts.site_packages / "numpy.libs")
    # numpy's bundled libraries resolve through $ORIGIN inside the image: only the system's are added
    venv_side = (str(parts.numpy_dir), str(parts.numpy_libs or parts.numpy_dir))
    have = {str(p) for p in fs.host_files()}
    for lib in ldd_closure(fs.host_files(), have):
        if not str(lib).startswith(venv_side):
            fs.add_host(lib)
            fs.add_host(Path(os.path.realpath(lib)))  # the file a versioned link points at
    python3 = links / "python3"
    python3.symlink_to(parts.interpreter)
    fs.entries["/usr/bin/python3"] = python3
    fs.entries["/etc/passwd"] = b"root:x:0:0:root:/root:/bin/sh\n"
    fs.entries["/etc/group"] = b"root:x:0:\n"
    return fs


def imports_numpy(tag: str) -> str:
    """The numpy version ``python3`` in the image imports (offline, as the probe runs)."""
    out = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            tag,
            "python3",
            "-c",
            "import numpy; print(numpy.__version__)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"python3 in {tag} does not import numpy: {out.stderr[-1000:]}")
    return out.stdout.strip()


@contextmanager
def python_numpy_image(parts: PythonParts, tag: str = TAG, progress=print) -> Iterator[str]:
    """Build the image (a local tag: nothing to pull), check its numpy, yield the tag; removed on exit."""
    try:
        with tempfile.TemporaryDirectory(prefix="strix-python-image-") as d:
            fs = python_rootfs(parts, Path(d))
            import_image(
                tag,
                fs,
                labels={"org.opencontainers.image.title": "python3 + numpy (strix tests)"},
                env={"PATH": PATH},
            )
        found = imports_numpy(tag)
        if found != parts.numpy_version:
            raise RuntimeError(
                f"python3 in {tag} imports numpy {found}, not the venv's {parts.numpy_version}"
            )
        progress(f"[python-image] {tag}: {image_size(tag) / 1e6:.0f} MB, numpy {found}")
        yield tag
    finally:
        remove_image(tag)
