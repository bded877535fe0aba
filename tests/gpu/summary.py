"""The GPU run's table: each step's exit code, and for each report its verdict and first finding.

`python3 tests/gpu/summary.py WORK` (tests/gpu/run.sh calls it), where WORK holds NAME.rc and
NAME.json per step. The watch and postmortem steps on the NCCL jobs also say whether the report
holds what it must (EXPECTED): the hung job's never-started collective, the crash's error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# step -> (the exit code it must end with, words one of its failing findings must hold)
EXPECTED = {
    "watch-hang": (3, "all_reduce"),
    "postmortem-hang": (None, "never started"),
    "watch-oom": (3, "out of memory"),
    "postmortem-oom": (None, "OutOfMemoryError"),
}


def first_finding(report: dict) -> str:
    failing = [c for c in report.get("checks", []) if c.get("status") in ("FAIL", "ERROR", "WARN")]
    if not failing:
        return "-"
    check = failing[0]
    return f"{check['name']}: {check.get('detail', '')}"


def holds(report: dict, words: str) -> bool:
    text = json.dumps([c for c in report.get("checks", []) if c.get("status") != "PASS"])
    return words.lower() in text.lower()


def main(work: Path) -> None:
    print(f"{'step':<22} {'exit':>4}  {'verdict':<7}  {'as expected':<11}  first finding")
    for rc_file in sorted(work.glob("*.rc")):
        name = rc_file.stem
        code = rc_file.read_text().strip()
        report_path = work / f"{name}.json"
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
        verdict = report.get("verdict", "-")
        expected = "-"
        if name in EXPECTED:
            want_code, words = EXPECTED[name]
            ok = (want_code is None or code == str(want_code)) and holds(report, words)
            expected = "yes" if ok else f"NO ({words!r})"
        print(f"{name:<22} {code:>4}  {verdict:<7}  {expected:<11}  {first_finding(report)[:140]}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
