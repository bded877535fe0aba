"""The page: verdict, checks, charts and tables assembled into one self-contained HTML file.

Self-contained by construction: no <script>, no <link>, no web font; the charts are inline SVG
(their raster parts data: URIs), and a Content-Security-Policy forbids the browser any fetch,
so the file opens offline and phones home to nobody even if a detail quoted a URL.
"""

from __future__ import annotations

import datetime
import html
from typing import Any

from ddpcheck import __version__
from ddpcheck.commands import kept_line
from ddpcheck.report.html.chart import Chart
from ddpcheck.report.model import Report, Status, Table
from ddpcheck.report.naming import counted
from ddpcheck.report.rows import TAILS, left_out_line, shown_rows

FOLDED_ROWS = 200  # a longer table starts folded: the charts stay at the top of the page
# Rows a table shows at most (the rest in the JSON report): the page of a 1,000-node run stays small.
HTML_ROWS = 256
STATUSES = {status.value for status in Status}  # a cell that says one is coloured as it

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em auto; max-width: 1100px; padding: 0 1em; }
h1 { font-size: 1.25em; padding: .5em .7em; border-radius: 4px; }
h1.pass { background: #e6f4ea; } h1.fail { background: #fce8e6; } h1.error { background: #f3e5f5; }
h2 { font-size: 1.1em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0; font-size: 13px; }
th, td { padding: 2px 8px; text-align: left; border-bottom: 1px solid #eee; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.PASS { color: #137333; font-weight: bold; } .FAIL { color: #c5221f; font-weight: bold; }
.WARN { color: #b06000; font-weight: bold; } .ERROR { color: #8e24aa; font-weight: bold; }
.SKIP { color: #777; }
svg.chart { width: 100%; max-width: 900px; height: auto; display: block; }
svg.chart g[id^="link-"] > path, svg.chart g[id^="straggler-"] > path { pointer-events: all; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; font-size: 12px; }
.wide { overflow-x: auto; } .meta { color: #555; } ul.findings li { color: #c5221f; }
p.injected { background: #fff4ce; border: 1px solid #e0b000; padding: .5em .7em; font-weight: bold; }
"""
POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def cell_text(value: Any) -> str:
    """A cell as the terminal writes it (report/terminal.py), so the page and the screen read alike."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}" if abs(value) < 1e6 else f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


def table_html(table: Table) -> str:
    columns = table.columns
    numeric = {k for k in columns if any(isinstance(r.get(k), (int, float)) for r in table.rows)}
    head = "".join(f"<th>{_e(h)}</th>" for h in columns.values())
    body = []
    rows = shown_rows(table.rows, HTML_ROWS)
    for row in rows:
        cells = []
        for key in columns:
            text = cell_text(row.get(key))
            css = "num" if key in numeric else (text if text in STATUSES else "")
            cells.append(f'<td class="{css}">{_e(text)}</td>' if css else f"<td>{_e(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    inner = (
        f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'
    )
    if len(rows) < len(table.rows):
        inner += f'<p class="meta">{_e(left_out_line(len(rows), len(table.rows)))}</p>'
    if len(table.rows) > FOLDED_ROWS:
        return f"<details><summary>{_e(counted(len(table.rows), 'row'))}</summary>{inner}</details>"
    return inner


def _checks(report: Report) -> str:
    rows = [
        f'<tr><td>{_e(c.name)}</td><td class="{c.status.value}">{c.status.value}</td>'
        f"<td>{_e(', '.join(map(str, c.ranks)) or '-')}</td><td>{_e(', '.join(c.hosts) or '-')}</td>"
        f"<td>{_e(c.detail)}</td></tr>"
        for c in report.checks
    ]
    head = "<tr><th>check</th><th>status</th><th>ranks</th><th>hosts</th><th>detail</th></tr>"
    return f'<h2>Checks</h2><table id="checks"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def _chart(chart: Chart) -> str:
    parts = [f'<section class="figure"><h2>{_e(chart.title)}</h2>', chart.svg]
    if chart.notes:
        parts.append('<ul class="findings">' + "".join(f"<li>{_e(n)}</li>" for n in chart.notes) + "</ul>")
    parts.append(f"<h3>{_e(chart.table.title)}</h3>{table_html(chart.table)}</section>")
    return "".join(parts)


def _tables(report: Report) -> str:
    parts = []
    for table in report.tables:
        if table.name == "stderr":
            for row in table.rows:
                where = f" on {row['host']}" if row.get("host") else ""
                who = f"rank {_e(row.get('rank'))}{_e(where)}"
                parts += [
                    f"<h2>{who}: {what}</h2><pre>{_e(row[key])}</pre>" for key, what in TAILS if row.get(key)
                ]
        elif table.columns:  # as on the terminal: a table without columns is for the JSON only
            parts.append(f'<h2 id="table-{_e(table.name)}">{_e(table.title)}</h2>{table_html(table)}')
    return "".join(parts)


def _option(value: Any) -> str:
    """An option's value as the command line writes it: lists comma-separated, no Python repr."""
    if isinstance(value, (list, tuple)):
        return ",".join(map(_option, value))
    if isinstance(value, dict):
        return ",".join(f"{k}:{_option(v)}" for k, v in value.items())
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _meta(report: Report) -> str:
    world = report.world
    facts = [f"ddpcheck {_e(report.command)}"]
    if world.get("size"):
        facts.append(
            f"{counted(world['size'], 'rank')}, {_e(world.get('backend'))}, {_e(world.get('device'))}"
        )
    if world.get("hosts"):
        facts.append("hosts: " + _e(", ".join(world["hosts"])))
    if world.get("torch"):
        facts.append(f"torch {_e(world['torch'])}")
    lines = [" · ".join(facts)]
    shown = [f"{k}={_option(v)}" for k, v in report.options.items() if v is not None and v != []]
    if shown:
        lines.append("options: " + _e(", ".join(shown)))
    lines += [_e(n) for n in report.notes]
    if report.log_dir:
        lines.append(_e(kept_line(report.command, report.log_dir)))
    return "".join(f'<p class="meta">{line}</p>' for line in lines)


def assemble(report: Report, verdict: str, charts: list[Chart]) -> str:
    """The whole page as text. `verdict` is the terminal's verdict line, word for word."""
    made = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(verdict)}</title><style>{CSS}</style></head><body>"
        f'<h1 id="verdict" class="{report.verdict.value}">{_e(verdict)}</h1>'
        + (f'<p id="injected" class="injected">{_e(report.injected_line())}</p>' if report.injected else "")
        + _meta(report)
        + _checks(report)
        + "".join(_chart(c) for c in charts)
        + _tables(report)
        + f'<p class="meta">written by ddpcheck {_e(__version__)} on {_e(made)}</p>'
        + "</body></html>\n"
    )
