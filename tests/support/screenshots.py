"""Make docs/html-*.png, the screenshots the docs show: `python -m tests.support.screenshots [DIR]`.

Real small runs for allreduce, collectives, train, profile (with rank 1 slowed) and env (the
tests' runs); a synthetic report for links: 16 ranks on 2 hosts with one slow link, which one
machine cannot make without network namespaces (tests/test_links_netns.py makes a slow host).
Each shot is the top of the page (verdict, checks, the first chart), scaled so that the PNG stays
small. Also prints the size of a 64-rank links page.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from ddpcheck.report.html import render_html
from ddpcheck.report.html import write as write_html
from tests.support.headless import Browser
from tests.support.saved_reports import RUNS, run_ddpcheck
from tests.support.synthetic_reports import links_report

# CSS pixels from the top of each page: enough for the verdict, the checks and the chart.
HEIGHTS = {"allreduce": 1000, "train": 1000, "profile": 1000, "env": 900, "links": 1150, "collectives": 1000}
SCALE = 0.7


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wt16-shots-") as work:
        pages = {}
        # The profile shot shows how a straggler is marked: rank 1 made slow on purpose.
        runs = {**RUNS, "profile": [*RUNS["profile"], "--inject", "slow@1"]}
        for name, args in runs.items():
            if name == "links":
                continue  # synthetic, below
            page = Path(work) / f"{name}.html"
            proc = run_ddpcheck(*args, "--html", str(page))
            print(f"{name}: exit {proc.returncode}")
            pages[name] = page
        pages["links"] = Path(work) / "links.html"
        write_html(links_report(16, per_host=8, slow=(3, 12)), str(pages["links"]))
        with Browser() as browser:
            for name, path in pages.items():
                opened = browser.open(path)
                shot = out / f"html-{name}.png"
                opened.screenshot(shot, height=min(HEIGHTS[name], opened.height), scale=SCALE)
                opened.close()
                print(f"{shot}: {shot.stat().st_size / 1024:.0f} KiB")
    size = len(render_html(links_report(64, per_host=8, slow=(13, 42))).encode())
    print(f"a 64-rank links page (4032 links): {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs"))
