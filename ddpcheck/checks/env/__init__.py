"""The environment probe behind `ddpcheck env`, and the fingerprint every rank compares.

Two halves, as everywhere in ddpcheck (DESIGN.md, principle 1): the probe
collects plain, JSON-able facts with bounded external effects; the judges are
pure functions from facts to `Check`s, tested with synthetic facts. One module
per job:

- `probe.py`: facts about this host (torch, GPUs, nvidia-smi, host, shm,
  rlimits, network interfaces, InfiniBand).
- `master.py`: probing MASTER_ADDR / MASTER_PORT (resolve; bind here or connect there).
- `variables.py`: the distributed environment variables, collected already redacted.
- `redact.py`: which variable names hold secrets, and values made safe to show.
- `judge.py`: the `judge_*()` functions, facts -> `Check`s.
- `host_report.py`: `run_env()`, the `Report` of `ddpcheck env` and its tables.
- `agreement.py`: each rank's fingerprint, and the check that every node agrees.
- `bounded.py`: a subprocess under a timeout, a function in a thread with a bound.
- `units.py`: byte units and how sizes are shown.

Torch is imported inside functions only: importing this package, as
`ddpcheck --help` does, must not load it.
"""

from ddpcheck.checks.env.agreement import fingerprint_table, judge_agreement, rank_fingerprint
from ddpcheck.checks.env.host_report import run_env

__all__ = ["fingerprint_table", "judge_agreement", "rank_fingerprint", "run_env"]
