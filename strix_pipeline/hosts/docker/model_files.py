"""The files a model profile's path needs on a host, and how to put them there.

A split GGUF (gguf-split; gpt-oss-120b comes as three) is named ``<prefix>-00001-of-00003.gguf`` …
``<prefix>-00003-of-00003.gguf``. llama-server is given the first part and opens the others itself, by
that name pattern in the same directory (llama.cpp's ``llama_get_list_splits``); given a later part it
refuses ("model must be loaded with the first split"). So a profile's path names the first part, and
every part must be beside it -- a missing one would only show once production is stopped.

Everything here is pure (names in, names out): ``hosts/box/stop_checks.py`` looks for the files on the
host, ``strix doctor`` says where they go.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

from strix_pipeline.hosts.box.checks import model_host_path

# llama.cpp's llama_split_path: "%s-%05d-of-%05d.gguf"
_SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<no>[0-9]{5})-of-(?P<count>[0-9]{5})\.gguf$")


@dataclass(frozen=True)
class ModelFiles:
    path: str  # the path as the engine is given it
    files: tuple[str, ...]  # every file that must exist (a split GGUF's parts in order)
    problem: str | None = None  # why the path cannot work whatever is on the host
    # a relative path on a host without models_dir: the model ships in the engine's image, under its
    # /models (nothing of the host is mounted there), so there is nothing to look for on the host
    in_image: bool = False

    @property
    def directory(self) -> str:
        return str(PurePosixPath(self.path).parent)

    @property
    def names(self) -> list[str]:
        return [PurePosixPath(f).name for f in self.files]

    @property
    def split(self) -> bool:
        return len(self.files) > 1


def split_part_name(prefix: str, no: int, count: int) -> str:
    return f"{prefix}-{no:05d}-of-{count:05d}.gguf"


def required_files(path: str) -> ModelFiles:
    """The files ``path`` needs: every part of a split GGUF named by its first part, else the one file
    (or directory: a checkpoint's). A name that is a later part, or whose numbers no split has (part 0,
    0 parts, part 4 of 3), is a problem: llama.cpp would refuse it."""
    p = PurePosixPath(path)
    m = _SPLIT.match(p.name)
    if m is None:
        return ModelFiles(path, (path,))
    prefix, no, count = m["prefix"], int(m["no"]), int(m["count"])
    if not 1 <= no <= count:
        return ModelFiles(path, (path,), f"{p.name} names part {no} of {count}: no split GGUF has it")
    parts = tuple(str(p.parent / split_part_name(prefix, i, count)) for i in range(1, count + 1))
    if no != 1:
        first = PurePosixPath(parts[0]).name
        why = f"{p.name} is part {no} of {count}: llama-server must be given the first, {first}"
        return ModelFiles(path, parts, why)
    return ModelFiles(path, parts)


def on_host(path: str, models_dir: str | None) -> ModelFiles:
    """:func:`required_files` of a profile's path on a Docker host: a relative path is under the
    host's ``models_dir`` (the engine's own rule); on a host without one it is in the engine's image
    (``in_image``: the container's /models is the image's own). A split GGUF outside ``models_dir``
    is mounted part by part beside the first (DockerLauncher.volumes)."""
    found = required_files(model_host_path(path, models_dir))
    if found.problem:
        return found
    if not PurePosixPath(found.path).is_absolute():
        return ModelFiles(found.path, found.files, in_image=True)
    return found


def copy_hint(
    files: ModelFiles,
    absent: list[str],
    destination: str | None,
    *,
    port: int | None = None,
    make_dir: bool = False,
) -> str:
    """One command line that puts the ``absent`` files (host paths, of ``files``) where the engine
    looks: ``scp`` to ``destination`` (``user@box``, left unquoted so a ``"$VAR"@box`` expands) when
    the host is reached over ssh, else ``cp`` on it; ``make_dir`` first creates the directory."""
    names = [PurePosixPath(f).name for f in absent]
    # a name without .gguf is a checkpoint directory (vLLM, SGLang): copied with its contents
    recursive = ["-r"] if any(not n.endswith(".gguf") for n in names) else []
    where, into = shlex.quote(files.directory), shlex.quote(files.directory + "/")
    if destination:
        ssh_port, scp_port = (["-p", str(port)], ["-P", str(port)]) if port else ([], [])
        # ssh hands its command to the Box's shell: quoted once more for that shell
        mkdir = f"{shlex.join(['ssh', *ssh_port])} {destination} {shlex.quote(f'mkdir -p {where}')} && "
        copy = f"{shlex.join(['scp', *scp_port, *recursive, *names])} {destination}:{into}"
    else:
        mkdir = f"mkdir -p {where} && "
        copy = shlex.join(["cp", *recursive, *names, files.directory + "/"])
    cmd = (mkdir if make_dir else "") + copy
    if files.split:  # the command last: copied from the line as it is
        return f"all {len(files.files)} parts in one directory, the profile's path naming the first: {cmd}"
    return cmd
