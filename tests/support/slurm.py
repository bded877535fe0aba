"""A real Slurm on this machine: slurmctld and slurmd started by the test, for real srun steps.

`slurm_daemons()` starts both (auth/none, so munge is not needed) and yields the environment
srun needs; the `slurm` fixture (module scope) wraps it, skips with the reason where Slurm
cannot start here, and proves no daemon is left running afterwards.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.netns import free_port

SLURM_CONF = """\
ClusterName=ddpcheck{tag}
SlurmctldHost={host}
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
FirstJobId={first_job}
SlurmdParameters=config_overrides
NodeName={host} CPUs=8 State=UNKNOWN
PartitionName=ddpcheck Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


def first_job_id() -> int:
    """Where this cluster's job ids start: apart from those of another test cluster on the machine.

    An srun step's ranks derive their store's port from the job id (launcher/slurm.py): two
    clusters that both start at job 1 would hand their steps the same port, and one step's
    ranks would join the other's store.
    """
    return random.randrange(1_000, 1_000_000)


class SlurmUnavailable(Exception):
    """Slurm cannot run here; the message says why."""


@contextlib.contextmanager
def slurm_daemons() -> Iterator[dict[str, str]]:
    """slurmctld and slurmd on this machine (auth/none: no munge), for real srun steps.

    Yields the environment (SLURM_CONF) that srun needs; stops both daemons and removes
    their state directory on the way out.
    """
    missing = [tool for tool in ("slurmctld", "slurmd", "srun", "sinfo") if shutil.which(tool) is None]
    if missing:
        raise SlurmUnavailable(f"Slurm is not installed ({', '.join(missing)} missing; Debian: slurm-wlm)")
    if os.geteuid() != 0:
        raise SlurmUnavailable("starting slurmd needs root")
    directory = Path(tempfile.mkdtemp(prefix="ddpcheck-slurm-"))
    (directory / "state").mkdir()
    (directory / "spool").mkdir()
    conf = directory / "slurm.conf"
    host = socket.gethostname()
    conf.write_text(
        SLURM_CONF.format(
            tag=os.getpid(),
            host=host,
            ctld_port=free_port(),
            d_port=free_port(),
            dir=directory,
            first_job=first_job_id(),
        )
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    daemons = [
        subprocess.Popen([daemon, "-D", "-f", str(conf), *extra], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
        for daemon, extra in (("slurmctld", ["-c"]), ("slurmd", []))
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        state = ""
        while time.monotonic() < deadline and "idle" not in state:
            probe = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True)
            state = probe.stdout.strip()
            if any(d.poll() is not None for d in daemons):
                break
            time.sleep(0.5)
        if "idle" not in state:
            logs = " | ".join((directory / n).read_text()[-300:] for n in ("slurmctld.log", "slurmd.log")
                              if (directory / n).exists())  # fmt: skip
            raise SlurmUnavailable(f"slurmctld/slurmd did not come up here (node state {state!r}): {logs}")
        yield {"SLURM_CONF": str(conf)}
    finally:
        # Let the last steps' slurmstepd report to the daemons first: stopped daemons leave them
        # waiting (measured); then end the daemons, and whatever slurmstepd is still there.
        deadline = time.monotonic() + 5
        while _step_daemons(conf) and time.monotonic() < deadline:
            time.sleep(0.2)
        for daemon in daemons:
            daemon.terminate()
        for daemon in daemons:
            try:
                daemon.wait(timeout=3)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        stepds = _step_daemons(conf)
        for stepd in stepds:
            with contextlib.suppress(psutil.Error):
                stepd.kill()
        psutil.wait_procs(stepds, timeout=3)
        shutil.rmtree(directory, ignore_errors=True)


def _step_daemons(conf: Path) -> list[psutil.Process]:
    """The slurmstepd processes of this test's cluster: those writing to its slurmd.log.

    Not by environment: slurmd starts slurmstepd with an environment of its own, without the
    SLURM_CONF slurmd was given (measured: matching on it found none, and a step still ending
    when the daemons stopped outlived the test). Each slurmstepd keeps SlurmdLogFile open.
    """
    directory = str(conf.parent) + os.sep
    found = []
    for proc in psutil.process_iter(["name"]):
        try:
            if (proc.info["name"] or "").startswith("slurmstepd") and any(
                f.path.startswith(directory) for f in proc.open_files()
            ):
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.fixture(scope="module")
def slurm() -> Iterator[dict[str, str]]:
    conf = ""
    try:
        with slurm_daemons() as env:
            conf = env["SLURM_CONF"]
            yield env
    except SlurmUnavailable as exc:
        pytest.skip(str(exc))
    # This cluster's daemons only: another cluster on the machine (a soak's, a benchmark's) is not ours.
    left = [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if str(Path(conf).parent) in " ".join(p.info["cmdline"] or [])
    ]
    left += [p.pid for p in _step_daemons(Path(conf))]
    assert left == [], f"Slurm daemons left running: {left}"
