"""The calibration's progress bar (rich), or nothing when progress is off."""

from __future__ import annotations

from typing import Any

__all__ = ["CalibrationProgress"]


class CalibrationProgress:
    """A rich progress bar when asked for, else nothing."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.bar: Any = None
        if enabled:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn)
            self.bar = Progress(TextColumn("[bold]calibrate[/] {task.description:<34}"),
                                BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            self.bar.start()
            self.task = self.bar.add_task("", total=total)

    def step(self, desc: str, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=n, description=desc)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
