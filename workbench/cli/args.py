"""What every command shares: argument types that reject bad values with one line, the model flags, and
`run_command`, which turns a WorkbenchError into `error: ...` on stderr and exit status 2 (never a traceback)."""

from __future__ import annotations

import argparse
import sys

from workbench.core.errors import WorkbenchError


def integer(text: str, kind: str = "an integer") -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def positive_int(text: str) -> int:
    value = integer(text, "a positive integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def non_negative_float(text: str) -> float:
    value = number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="local model folder (diffusers SD3/FLUX or embedded format); "
                   "default: the embedded model")
    p.add_argument("--device", default=None, help="cuda, mps or cpu (default: the best available)")


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed command: a WorkbenchError becomes one `error:` line and exit 2, Ctrl-C exit 130."""
    try:
        return args.func(args)
    except WorkbenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
