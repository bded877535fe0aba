"""Removers: a shell outside a process's tree that removes what the process leaves once it is gone.

The process holds the write end of a pipe, never written, which closes only when the process ends,
however it ended (SIGKILL included: mpirun kills every other rank at once when one exits). The
shell reads the other end: end of file starts its script. It runs in a session of its own
(launchers end their ranks' process groups, not it), in the background of a shell that exits at
once, so it is no descendant of the process (a launcher that kills a task's whole tree, as Slurm's
proctrack/linuxproc does, would take it along). Where a scheduler kills a job's whole cgroup
(Slurm's proctrack/cgroup) it goes too; the next inline run on the host sweeps what is left.

Standard library only: an inline rank starts its job directory's remover before anything heavy loads.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

# The write ends of the pipes: held, never written, until this process ends (or release).
_held: list[int] = []


def start(script: str, args: list[str], *, stderr: bool = False) -> int | None:
    """Run `sh -c script args...` once this process is gone; `args[0]` is its $0, how it is told from
    other processes. `stderr`: its stderr is this process's (where the user reads what it says).

    Returns the handle release() takes (None: no shell could start, a process limit: the process's
    own removal stands alone)."""
    read_end, write_end = os.pipe()  # neither end is inherited by what this process execs later
    actions = [(os.POSIX_SPAWN_DUP2, read_end, 0), (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)]
    if not stderr:
        actions.append((os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0))
    try:
        shell = os.posix_spawn(
            "/bin/sh", ["sh", "-c", script, *args], os.environ, file_actions=actions, setsid=True
        )
    except OSError:
        os.close(write_end)
        return None
    finally:
        os.close(read_end)
    _held.append(write_end)
    os.waitpid(shell, 0)  # it exits as soon as it has put the remover in the background
    return write_end


def release(handle: int | None) -> None:
    """Let the remover act now: a process that launches many runs holds no pipe, and leaves no remover
    waiting, per run."""
    if handle is not None and handle in _held:
        _held.remove(handle)
        os.close(handle)


def remove_now(path: str | Path) -> None:
    """Remove a directory that a thread of this process (an inline rank's heartbeat) may still be
    writing a status file into: a file that appears mid-removal is taken by the next pass."""
    for _ in range(50):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            return
        time.sleep(0.01)


def script(name: str, **variables: str) -> str:
    """The shell script `name` beside this module (package data), its comment lines left out (they
    would fill `ps`), after `variables` set as shell variables."""
    text = Path(__file__).with_name(name).read_text()
    body = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    import shlex  # here: `ddpcheck --help` loads this module and nothing more than Typer

    preamble = " ".join(f"{key}={shlex.quote(value)}" for key, value in variables.items())
    return "\n".join([preamble, *body]) if variables else "\n".join(body)
