"""Which charts a report gets: its command names the chart makers (Command.html_charts).

Each maker is a module (those here, beside this one) with `charts(report) -> list[Chart]`, reading the
tables it knows by name: `collectives` writes `bandwidth` rows as `allreduce` does and names the
same maker; a table nobody charts is still shown as a table.
"""

from __future__ import annotations

import importlib

from ddpcheck.commands import COMMANDS
from ddpcheck.report.html.chart import Chart
from ddpcheck.report.model import Report


def charts_for(report: Report) -> list[Chart]:
    command = COMMANDS.get(report.command)
    makers = command.html_charts if command else ()
    return [chart for maker in makers for chart in importlib.import_module(maker).charts(report)]
