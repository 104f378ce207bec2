"""Shared CLI plumbing: typed errors become a red message and the error's exit code."""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable, TypeVar

import typer

from edge_sdk.errors import EdgeSdkError

F = TypeVar("F", bound=Callable[..., Any])


def cli_errors(func: F) -> F:
    """Turn EdgeSdkError into `error: <message>` on stderr and a non-zero exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except EdgeSdkError as exc:
            typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            typer.secho("interrupted", fg=typer.colors.YELLOW, err=True)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
