"""The watcher's side of the replica fingerprints (fingerprints.py writes them inside the ranks).

Every READ_S the watcher's loop calls `Replicas.tick`: the files new in the watch directory's
fingerprints/ folder are read (written whole: a partial one is not there yet), the run so far is
judged by failure/replicas.py, and a new finding is one line on stderr. At the end, the
`replicas agree` check (and `first nan` when a rank made one) and the per-rank table go into the report.

One watcher per task (team.py): each reads its own ranks' files and shares them with its evidence
(`shared`): whole for its first and latest WHOLE_STEPS steps, by digest between (a replica that
drifted stays apart, so a later whole step names the parameter); task 0 alone judges and speaks.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ddpcheck.checks.watch import fingerprints
from ddpcheck.errors import say
from ddpcheck.failure import replicas
from ddpcheck.failure.replicas import Fingerprint, NonFinite
from ddpcheck.report.model import Report

READ_S = 1.0
# Replicas that agreed at fewer steps than this are a note, not a check: a short healthy job's
# verdict stays its one line, as the stragglers' "not judged" is.
MIN_STEPS_CHECKED = 2
WHOLE_STEPS = 16  # per rank, its first and its latest steps shared whole by a team's task


class Replicas:
    def __init__(self, watch_dir: Path, every: int) -> None:
        self.folder = Path(watch_dir) / fingerprints.FOLDER
        self.every = every
        self.prints: dict[tuple[int, int], Fingerprint] = {}  # by (rank, step)
        self.nonfinite: dict[int, NonFinite] = {}
        self.failures: dict[int, str] = {}  # a rank whose fingerprints stopped, and why
        self.unreplicated: set[str] = set()  # modules with no replica (fully sharded FSDP), said once
        self.read_names: set[str] = set()
        self.said: set[str] = set()  # each finding's line is said once
        self.speaking = True  # a team's task other than 0 only shares
        self.next_read = 0.0

    def read(self) -> None:
        """The files that appeared since the last read (a file is written once, whole)."""
        try:
            names = sorted(os.listdir(self.folder))
        except OSError:
            return
        for name in names:
            if name in self.read_names or name.endswith(".partial"):
                continue
            try:
                record = json.loads((self.folder / name).read_text())
            except (OSError, ValueError):
                continue  # gone, or not whole: read again next time
            self.read_names.add(name)
            with contextlib.suppress(KeyError, TypeError, ValueError):
                if name.endswith(fingerprints.SUFFIX):
                    found = replicas.fingerprint_from_record(record)
                    self.prints[(found.rank, found.step)] = found
                elif name.endswith(fingerprints.NONFINITE_SUFFIX):
                    nan = replicas.nonfinite_from_record(record)
                    self.nonfinite[nan.rank] = nan
                elif name.endswith(fingerprints.UNREPLICATED_SUFFIX):
                    self.unreplicated.update(str(note) for note in record["notes"])
                elif name.endswith(".failed"):
                    self.failures[int(record["rank"])] = str(record["error"])

    def tick(self, now: float) -> None:
        """Read what is new; say a new finding once (task 0 or a watcher alone)."""
        if now < self.next_read:
            return
        self.next_read = now + READ_S
        self.read()
        if self.speaking:
            self._say()

    def judgement(self) -> replicas.Judgement:
        return replicas.judge(self.prints.values(), self.nonfinite.values())

    def _say(self) -> None:
        line = replicas.line(self.judgement())
        for new in (line or "").splitlines():
            if new not in self.said:
                self.said.add(new)
                say(new)

    # ------------------------------------------------------------ one watcher per task
    def shared(self) -> dict[str, Any]:
        """This task's ranks' records for task 0: whole at each rank's first and latest steps, digests
        between."""
        steps: dict[int, list[int]] = {}
        for rank, step in self.prints:
            steps.setdefault(rank, []).append(step)
        whole = {
            (rank, step)
            for rank, found in steps.items()
            for step in sorted(found)[:WHOLE_STEPS] + sorted(found)[-WHOLE_STEPS:]
        }
        return {
            "prints": [replicas.to_record(p, key in whole) for key, p in sorted(self.prints.items())],
            "nonfinite": [asdict(n) for n in self.nonfinite.values()],
            "failures": {str(r): e for r, e in self.failures.items()},
            "unreplicated": sorted(self.unreplicated),
        }

    def take(self, shared: dict[str, Any]) -> None:
        """Another task's records (task 0), beside this task's own."""
        for record in shared.get("prints") or []:
            found = replicas.fingerprint_from_record(record)
            self.prints.setdefault((found.rank, found.step), found)
        for record in shared.get("nonfinite") or []:
            nan = replicas.nonfinite_from_record(record)
            self.nonfinite.setdefault(nan.rank, nan)
        for rank, error in (shared.get("failures") or {}).items():
            self.failures.setdefault(int(rank), str(error))
        self.unreplicated.update(str(note) for note in shared.get("unreplicated") or [])

    # ------------------------------------------------------------ the report
    def add_to(self, report: Report) -> Report:
        """The checks and the table; a note when no replica was fingerprinted (no DDP module seen), and
        one per module that has no replica (a fully sharded FSDP module: nothing to compare)."""
        self.read()
        judgement = self.judgement()
        for rank, error in sorted(self.failures.items()):
            report.notes.append(f"rank {rank}'s fingerprints stopped: {error}")
        report.notes.extend(f"replicas: {note}" for note in sorted(self.unreplicated))
        if not self.prints and not self.nonfinite:
            if not self.unreplicated:  # those modules' notes say why already
                report.notes.append(
                    f"replicas not compared: no DistributedDataParallel or HSDP module was seen "
                    f"(--fingerprint-every {self.every}; docs/diverges.md)"
                )
            return report
        if self.speaking:
            self._say()  # a team's task 0 says it here, once every task's records are in
        if judgement.agree and not judgement.nan_found and len(judgement.steps) < MIN_STEPS_CHECKED:
            steps = ", ".join(str(s) for s in judgement.steps) or "none"
            report.notes.append(
                f"replicas compared at too few steps for the check ({steps}; "
                f"--fingerprint-every {self.every}): {len(judgement.ranks)} ranks identical"
                + (" within their replica groups" if len(judgement.groups) > 1 else "")
            )
            return report
        hosts = {r.get("rank"): r.get("host") for r in report.ranks if isinstance(r, dict)}
        for check in replicas.checks(judgement, self.every):
            check.hosts = sorted({str(hosts[r]) for r in check.ranks if hosts.get(r)})
            report.checks.append(check)
        table = replicas.table(judgement, self.prints.values())
        for row in table.rows:
            row["host"] = hosts.get(row["rank"]) or ""
        report.tables.append(table)
        return report
