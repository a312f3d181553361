"""A systemd-style production on the Box simulator: a stand-in ``systemctl`` first on the ssh session's
PATH (support/sshd.py's ``Sshd.bin_dir``) that shows, starts and stops one unit whose ``ExecStart``
and ``Environment`` are files the test writes. It answers what the pipeline asks of systemd --
``systemctl show -p ExecStart -p Environment UNIT`` in systemd's own format (one ``ExecStart={ path=… ;
argv[]=… ; … }`` line, ``Environment=`` space-separated), and production's ``stop_command`` /
``start_command`` -- and nothing more (a real-systemd simulator image is another test's).

``start`` runs ExecStart detached with the unit's environment, as systemd would, and ``stop`` runs the
unit's ExecStop (a ``docker rm -f NAME`` for a ``docker run`` unit), then ends what ``start`` ran.

Use::

    unit = FakeUnit.install(box_sshd, "llama.service")
    exec_start = ["docker", "run", "--rm", "--name", NAME, ..., image, "-m", ...]
    unit.set(exec_start, stop=["docker", "rm", "-f", NAME],
             env=["GGML_VK_VISIBLE_DEVICES=0"])
    unit.start()  # here, as the test's user; the pipeline's stop/start run it over ssh as the Box's user
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from support.sshd import Sshd

SYSTEMCTL = """#!/bin/sh
# stand-in systemctl of one unit (tests/support/fake_systemd.py); its state in {state}
S={state}
cmd="$1"; shift
unit=""
for a in "$@"; do unit="$a"; done
if [ "$unit" != "{unit}" ]; then echo "Unit $unit could not be found." >&2; exit 5; fi
case "$cmd" in
  show)
    argv=$(cat $S/exec_start)
    set -- $argv
    echo "ExecStart={{ path=$1 ; argv[]=$argv ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; \\
pid=0 ; code=(null) ; status=0/0 }}"
    echo "Environment=$(cat $S/environment)"
    ;;
  start)
    env $(cat $S/environment) setsid sh -c "exec $(cat $S/exec_start)" > $S/log 2>&1 < /dev/null &
    echo $! > $S/pid
    ;;
  stop)
    [ -s $S/exec_stop ] && sh -c "$(cat $S/exec_stop)" >> $S/log 2>&1
    [ -s $S/pid ] && kill $(cat $S/pid) 2>/dev/null
    : > $S/pid
    ;;
  *) echo "systemctl (stand-in): $cmd is not simulated" >&2; exit 1 ;;
esac
"""


@dataclass
class FakeUnit:
    name: str
    state: Path  # written by the test and by the Box's user alike
    tool: Path

    @classmethod
    def install(cls, sshd: Sshd, name: str) -> FakeUnit:
        state = Path(tempfile.mkdtemp(prefix="strix-unit-"))
        state.chmod(0o777)
        for f in ("exec_start", "exec_stop", "environment", "pid", "log"):
            (state / f).write_text("")
            (state / f).chmod(0o666)
        tool = sshd.bin_dir / "systemctl"
        tool.write_text(SYSTEMCTL.format(state=state, unit=name))
        tool.chmod(0o755)
        return cls(name, state, tool)

    def set(self, exec_start: list[str], *, env: Sequence[str] = (), stop: list[str] | None = None) -> None:
        """The unit's ExecStart (words without spaces, as systemd shows them), Environment and ExecStop."""
        assert all(" " not in a for a in exec_start), exec_start
        (self.state / "exec_start").write_text(" ".join(exec_start))
        (self.state / "environment").write_text(" ".join(env))
        (self.state / "exec_stop").write_text(shlex.join(stop) if stop else "")

    def systemctl(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.tool), *args, self.name], capture_output=True, text=True, timeout=60, check=True
        )
        return done.stdout

    def start(self) -> None:
        self.systemctl("start")

    def stop(self) -> None:
        self.systemctl("stop")

    def log(self) -> str:
        return (self.state / "log").read_text(errors="replace")

    def remove(self) -> None:
        self.stop()
        self.tool.unlink(missing_ok=True)
        shutil.rmtree(self.state, ignore_errors=True)
