"""The launcher's live view while the ranks run: ranks starting, rank 0's stage, the sweep's progress."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


class LaunchProgress:
    """The launcher's live view of the ranks starting, rank 0's stage and the sweep's progress.

    Drawn on its own console, stderr in the CLI: `ddpcheck allreduce | tee log` keeps it on the
    terminal while the report goes through the pipe.
    """

    def __init__(self, console: Console, enabled: bool, ranks: int) -> None:
        # A live display redraws with cursor escapes: only on a real terminal that allows
        # styles (not a pipe, even with FORCE_COLOR; not TERM=dumb; not NO_COLOR).
        isatty = getattr(console.file, "isatty", None)
        self.enabled = (
            enabled
            and console.is_interactive
            and console.color_system is not None
            and bool(isatty and isatty())
        )
        self.ranks = ranks  # this node's planned ranks
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._task: Any = None

    def __enter__(self) -> LaunchProgress:
        if self.enabled:
            self._progress.start()
            self._task = self._progress.add_task("starting ranks", total=self.ranks, count=f"0/{self.ranks}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._progress.stop()

    def update(self, status: dict[str, Any]) -> None:
        if not self.enabled:
            return
        progress = status.get("progress")
        if progress:
            label, done, total = progress["label"], progress["done"], progress["total"]
            count = f"{done}/{total}"
        else:
            label, done, total = status.get("stage"), status.get("ranks_started", 0), self.ranks
            count = f"{done}/{self.ranks} ranks started"
        self._progress.update(
            self._task, description=f"rank 0: {label}", completed=done, total=total, count=count
        )
