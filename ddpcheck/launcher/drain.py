"""--drain: the culprit hosts' Slurm nodes drained on a failure, ddpcheck's own drains resumed on a pass.

Through `scontrol` (the tool an operator would type), run where the report is written.
A host is acted on only when it is a Slurm node (`scontrol show node NAME` succeeds). On a
pass, a drained node is resumed only when its reason begins `ddpcheck:`: a node an admin
drained stays drained whatever ddpcheck finds. Without scontrol or a controller that
answers, one line says so and the verdict (and the exit code) stays the run's.
"""

from __future__ import annotations

import shutil
import subprocess

from ddpcheck.report.fleet import culprit_hosts
from ddpcheck.report.model import Report, Verdict

PREFIX = "ddpcheck:"
# Slurm stores a reason of any length, but `sinfo -R` and `scontrol show node` are read by people:
# one line of at most this many characters says the check and its figure.
REASON_MAX = 256
SCONTROL_TIMEOUT_S = 20  # a controller that does not answer in this long is as good as none


def scontrol(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["scontrol", *args], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S, check=False
    )


def act_on(report: Report) -> list[str]:
    """Drain or resume as the verdict says; one line per node acted on, or one saying why none was."""
    if shutil.which("scontrol") is None:
        return ["--drain: could not drain: scontrol is not installed here (not a Slurm node)"]
    try:
        ping = scontrol(["ping"])
        if ping.returncode != 0:
            return [
                f"--drain: could not drain: no Slurm controller answers (scontrol ping: {_first_line(ping)})"
            ]
        if report.verdict == Verdict.PASS:
            return _resume(report)  # which says itself what scontrol failed to do
        hosts = culprit_hosts(report)
        if not hosts:
            return ["--drain: the run failed without naming a host: no node drained"]
        return [_drain(host, reason(report, host)) for host in hosts]
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"--drain: could not drain: scontrol failed ({exc})"]


def reason(report: Report, host: str) -> str:
    """'ddpcheck: allreduce hang: rank 1 on host h ...': the check and its figure, cut to REASON_MAX."""
    check = next(c for c in report.failing() if host in c.hosts)
    detail = " ".join(check.detail.split())
    text = f"{PREFIX} {report.command} {check.name}: {detail}"
    # scontrol reads the value as one word when quoted; a double quote inside would end it.
    text = text.replace('"', "'")
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 3] + "..."


def node_state(host: str) -> dict[str, str] | None:
    """`scontrol show node HOST` as a dict (State, Reason, ...), or None when HOST is not a Slurm node."""
    shown = scontrol(["show", "node", host, "--oneliner"])
    if shown.returncode != 0 or f"NodeName={host} " not in shown.stdout + " ":
        return None
    fields: dict[str, str] = {}
    text = shown.stdout.strip()
    # Reason=... runs to the end of its field and may hold spaces: split at the known keys.
    reason_at = text.find(" Reason=")
    if reason_at >= 0:
        rest = text[reason_at + len(" Reason=") :]
        # What follows the reason is ' [user@date]' and maybe more fields: the reason is up to ' ['.
        fields["Reason"] = rest.split(" [", 1)[0].strip()
        text = text[:reason_at]
    for word in text.split():
        key, _, value = word.partition("=")
        fields.setdefault(key, value)
    return fields


def _drain(host: str, why: str) -> str:
    if node_state(host) is None:
        return f"--drain: {host} is not a Slurm node here (scontrol show node failed): not drained"
    done = scontrol(["update", f"nodename={host}", "state=drain", f"reason={why}"])
    if done.returncode != 0:
        return f"--drain: could not drain {host}: {_first_line(done)}"
    return f"drained Slurm node {host} (reason: {why})"


def _resume(report: Report) -> list[str]:
    """A pass: resume each host of the run that ddpcheck drained (its reason begins 'ddpcheck:')."""
    hosts = list(dict.fromkeys(r.get("host") for r in report.ranks if isinstance(r, dict) and r.get("host")))
    lines = []
    try:
        for host in hosts:
            state = node_state(str(host))
            if state is None or "DRAIN" not in state.get("State", "").upper():
                continue  # not a Slurm node, or not drained
            if not state.get("Reason", "").startswith(PREFIX):
                lines.append(
                    f"--drain: {host} stays drained: an admin drained it ({state.get('Reason', 'no reason')})"
                )
                continue
            done = scontrol(["update", f"nodename={host}", "state=resume"])
            lines.append(
                f"resumed Slurm node {host} (ddpcheck had drained it; this run passed)"
                if done.returncode == 0
                else f"--drain: could not resume {host}: {_first_line(done)}"
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        lines.append(f"--drain: could not resume: scontrol failed ({exc})")
    return lines


def _first_line(done: subprocess.CompletedProcess[str]) -> str:
    text = (done.stderr or done.stdout or f"exit {done.returncode}").strip()
    return text.splitlines()[0] if text else f"exit {done.returncode}"
