"""Shared CLI plumbing: typed errors become a red message and the error's exit code; a stop
by SIGTERM or SIGINT (edge_sdk.cli._stop) that reaches here exits 0, or 128 + the signal's
number when a second signal cut the cleanup short."""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable, TypeVar

import typer

from edge_sdk.errors import EdgeSdkError, Stopped
from edge_sdk.redact import redact

F = TypeVar("F", bound=Callable[..., Any])


def cli_errors(func: F) -> F:
    """Turn EdgeSdkError into `error: <message>` on stderr and a non-zero exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except EdgeSdkError as exc:
            typer.secho(f"error: {redact(str(exc))}", fg=typer.colors.RED, err=True)
            raise typer.Exit(exc.exit_code) from None
        except Stopped as exc:
            typer.secho(str(exc), fg=typer.colors.YELLOW, err=True)
            raise typer.Exit(128 + exc.signum if exc.forced else 0) from None
        except KeyboardInterrupt:
            typer.secho("interrupted", fg=typer.colors.YELLOW, err=True)
            raise typer.Exit(130) from None

    # Resolve postponed (string) annotations against the command's own module now: on Python
    # < 3.10 Typer reads the unevaluated strings (inspect.signature has no eval_str there),
    # misses the typer.Option metadata inside them, and the options lose their names and help.
    import inspect

    from typing_extensions import get_type_hints

    hints = get_type_hints(func, include_extras=True)
    sig = inspect.signature(func)
    wrapper.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()]
    )
    wrapper.__annotations__ = hints
    return wrapper  # type: ignore[return-value]


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
