"""What an operator of many nodes acts on: the culprit hosts as a Slurm hostlist, and the options.

`--hostlist PATH` writes the hosts named by the failing checks in Slurm's compressed syntax
(`gpu-a[001-004,017]`), ready for `sbatch --exclude=$(cat PATH)`, and an empty file on a pass;
`--prom PATH` writes node_exporter textfile metrics (report/formats/prometheus.py); `--drain` drains
the culprits' Slurm nodes (launcher/drain.py). Only the process that writes the report
writes these (launcher/finish.py): under torchrun or srun, rank 0's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpcheck.command import option

if TYPE_CHECKING:
    from ddpcheck.report.model import Report
    from ddpcheck.report.outputs import Files

FLEET = "Fleet"  # the help section


@dataclass(frozen=True, kw_only=True)
class FleetOptions:
    """--hostlist, --prom and --drain: every command that runs ranks takes them."""

    hostlist_path: str | None = option(
        None,
        flags=("--hostlist",),
        help="Write the failing checks' culprit hosts here as a Slurm hostlist (node[017,233]); "
        "an empty file on a pass. For sbatch --exclude=$(cat PATH).",
        panel=FLEET,
        metavar="PATH",
    )
    prom_path: str | None = option(
        None,
        flags=("--prom",),
        help="Write Prometheus metrics here (node_exporter's textfile collector), atomically.",
        panel=FLEET,
        metavar="PATH",
    )
    drain: bool = option(
        False,
        flags=("--drain",),
        help="Slurm: drain the culprit hosts' nodes on a failure (reason 'ddpcheck: ...'); "
        "on a pass, resume nodes that ddpcheck drained (never an admin's drain).",
        panel=FLEET,
    )

    def check(self, injected: bool) -> None:
        """Both files can be written, and --drain acts on hardware verdicts only, before anything starts."""
        from ddpcheck.errors import UsageError
        from ddpcheck.report.outputs import check_writable

        for path, flag in ((self.hostlist_path, "--hostlist"), (self.prom_path, "--prom")):
            if path == "-":
                raise UsageError(f"{flag} -: needs a file path (standard output is the terminal report)")
            check_writable(path, flag)
        if self.prom_path and not self.prom_path.endswith(".prom"):
            raise UsageError(
                f"--prom {self.prom_path}: node_exporter's textfile collector reads only files ending .prom"
            )
        if self.drain and injected:
            raise UsageError(
                "--drain with --inject: a planted fault is not a hardware verdict, and would drain a "
                "healthy node; run --drain without --inject"
            )

    def write(self, report: Report, files: Files) -> None:
        """The hostlist and the metrics, each written whole, or a line saying which one was lost and why."""
        from ddpcheck.report.formats.text import write_text  # not on --help's path

        if self.hostlist_path:
            hosts = culprit_hosts(report)
            path = self.hostlist_path
            named = f" ({compressed(hosts)})" if hosts else " (empty: no culprit host)"
            text = compressed(hosts) + "\n" if hosts else ""
            files.write("culprit hostlist", path, lambda: write_text(path, text), named)
        if self.prom_path:
            from ddpcheck.report.formats import prometheus

            prom = self.prom_path
            files.write("Prometheus metrics", prom, lambda: prometheus.write(report, prom))


def culprit_hosts(report: Report) -> list[str]:
    """The hosts the failing checks name, in the order they are first named.

    A check's `hosts` are its culprits' (a hang names the ranks that stopped, not those
    that waited for them), so the hosts that only waited are never here.
    """
    return list(dict.fromkeys(host for check in report.failing() for host in check.hosts if host))


def compressed(hosts: list[str]) -> str:
    """Slurm's hostlist syntax, by python-hostlist (the grammar Slurm's own tools read)."""
    import hostlist

    return hostlist.collect_hostlist(hosts) if hosts else ""
