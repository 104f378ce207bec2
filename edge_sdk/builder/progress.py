"""What a build tells its user while it runs: messages, warnings (kept for the summary) and Rich
progress bars, all on stderr. Every build step takes a :class:`BuildProgress`; quiet under
``--json`` and in tests.

Not to be confused with :class:`edge_sdk.telemetry.reporter.Reporter`, which publishes a running
pipeline's telemetry over MQTT.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator, List


class BuildProgress:
    """Messages and Rich progress bars on stderr; silent when `quiet` (e.g. under --json)."""

    def __init__(self, quiet: bool = False) -> None:
        from rich.console import Console

        self.console = Console(stderr=True, quiet=quiet)
        self.quiet = quiet
        self.warnings: List[str] = []

    def info(self, message: str) -> None:
        from rich.markup import escape

        self.console.print(escape(message), highlight=False)  # messages name keys such as [input] color

    def warn(self, message: str) -> None:
        from rich.markup import escape

        self.warnings.append(message)
        self.console.print(f"[yellow]warning:[/yellow] {escape(message)}", highlight=False)

    @contextlib.contextmanager
    def task(self, description: str, total: int) -> Iterator[Callable[[int], None]]:
        """Yields `advance(n)`; a progress bar while the block runs."""
        if self.quiet:
            yield lambda n=1: None
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=self.console, transient=False) as progress:
            task_id = progress.add_task(description, total=total)
            yield lambda n=1: progress.advance(task_id, n)
