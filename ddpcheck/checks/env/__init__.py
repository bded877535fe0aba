"""The environment probe behind `ddpcheck env`, and the fingerprint every rank compares.

Two halves, as everywhere in ddpcheck (measure everywhere, judge in one pure function): the probe
collects plain, JSON-able facts with bounded external effects; the judges are
pure functions from facts to `Check`s, tested with synthetic facts. One module
per job:

- `probe.py`: facts about this host (torch, GPUs, nvidia-smi, host, shm,
  rlimits, network interfaces, InfiniBand).
- `master.py`: probing MASTER_ADDR / MASTER_PORT (resolve; bind here or connect there).
- `variables.py`: the distributed environment variables, collected already redacted.
- `redact.py`: which variable names hold secrets, and values made safe to show.
- `judge.py`: the `judge_*()` functions, facts -> `Check`s.
- `check.py`: `run()`, the `Report` of `ddpcheck env` and its tables.
- `bounded.py`: a subprocess under a timeout, a function in a thread with a bound.

This module declares the command; torch is imported inside functions only: importing this
package, as `ddpcheck --help` does, must not load it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpcheck.command import Command


@dataclass(kw_only=True)
class EnvOptions:
    """`ddpcheck env` takes only the output options every command has."""

    def validate(self) -> None:
        pass


COMMAND = Command(
    name="env",
    help="""Is this host set up for distributed training? A preflight in one process, no ranks.

    Collects what torch.utils.collect_env does plus NCCL, GPUs, topology,
    /dev/shm, ulimits, network, InfiniBand and the distributed environment
    (MASTER_*, RANK, SLURM_*, NCCL_*, ...), then judges it: the socket
    interfaces exist and are up, MASTER_ADDR resolves, MASTER_PORT is free
    or reachable, CUDA_VISIBLE_DEVICES and LOCAL_RANK name real GPUs,
    /dev/shm and locked memory are large enough. Secrets are redacted.
    Exits 1 only when something FAILs; warnings exit 0.
    """,
    # \b: click keeps these lines as written (one command a line, to copy).
    epilog=(
        "\b\nExamples:\n"
        "  ddpcheck env\n"
        "  ddpcheck env --json env.json  # attach it to a bug report: secrets are redacted\n"
        "  ddpcheck env --quiet --junit env.xml  # a CI gate\n"
        "  srun --ntasks-per-node=1 ddpcheck env --quiet  # every node of an allocation"
    ),
    options=EnvOptions,
    implementation="ddpcheck.checks.env.check",
    judges=("ddpcheck.checks.env.judge", "ddpcheck.checks.env.redact"),
    ranked=False,
)
