"""What every command shares: a parser whose errors are one line, argument types that reject bad values
(non-finite numbers, out-of-range seeds, devices this machine lacks) naming their flag, the model flags, and
`run_command`, which turns any error into one `error: ...` line on stderr and exit status 2 (never a
traceback; set WORKBENCH_DEBUG=1 to see one for an unexpected error)."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys

from workbench.core.errors import WorkbenchError, one_line, shorten


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `error: argument --num: ... (see workbench sample --help)`, exit 2."""

    def error(self, message: str):
        print(f"error: {one_line(message)} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


NEGATIVE_VALUE = re.compile(r"^-(?:[\d.]|inf|nan)", re.IGNORECASE)  # '-1,5', '-0.5', '-inf': values, never flags


def negative_values_inline(argv: list[str]) -> list[str]:
    """['--chunks', '-1,5'] -> ['--chunks=-1,5'], so argparse reads a negative-looking value as the flag's value
    (and the flag's own check explains what is wrong with it) instead of as an unknown flag."""
    out: list[str] = []
    for arg in argv:
        if NEGATIVE_VALUE.match(arg) and out and out[-1].startswith("--") and "=" not in out[-1]:
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def integer(text: str, kind: str = "an integer") -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {kind}, got {shorten(text)}") from None


def number(text: str) -> float:
    """A finite float: 'nan', 'inf' and '1e999' are refused where they enter."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {shorten(text)}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {shorten(text)}")
    return value


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


def ranged_float(name: str):
    """A finite number within LIMITS[name] (`core.fields`, the table every way in reads), as an argparse type."""
    from workbench.core.fields import LIMITS

    low, high = LIMITS[name].range()

    def parse(text: str) -> float:
        value = number(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in {low:g}..{high:g}, got {value:g}")
        return value
    parse.__name__ = "number"
    return parse


def limited(name: str):
    """A whole number within LIMITS[name] (`core.fields`: the app's controls, links and API read the same table),
    as an argparse type: `--group 1000000` is refused where it enters, before any model loads."""
    from workbench.core.fields import LIMITS, shown

    low, high = LIMITS[name].range()

    def parse(text: str) -> int:
        value = integer(text, "a whole number")
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be a whole number in {shown(low)}..{shown(high)}, "
                                             f"got {shown(value)}")
        return value
    parse.__name__ = "whole number"
    return parse


def seed(text: str) -> int:
    """A seed in SEED_RANGE (0 .. 2^63 - 1): the same rule for every command."""
    from workbench.flow.trajectory import check_seed

    value = integer(text, "an integer seed")
    try:
        check_seed(value)
    except WorkbenchError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return value


def device(text: str) -> str:
    """cpu, cuda, cuda:N or mps, and only one this machine has."""
    from workbench.models.adapters import check_device

    try:
        return check_device(text)
    except WorkbenchError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_model_args(p: argparse.ArgumentParser, runs: bool = True) -> None:
    """--model and --device; runs: --model may also name a fine-tuning run or one of its checkpoints."""
    more = (", a run folder runs/<id> (its newest complete checkpoint) or one checkpoint "
            "runs/<id>/checkpoints/iter_N") if runs else ""
    p.add_argument("--model", default=None, help="local model folder (diffusers SD3/FLUX or embedded format)"
                   f"{more}; default: the embedded model")
    p.add_argument("--lora", default=None, metavar="ADAPTER",
                   help="a LoRA adapter folder applied to --model (an SD3 / FLUX base folder): diffusers' format "
                        "(pytorch_lora_weights.safetensors, what a LoRA run's checkpoints hold) or PEFT's "
                        "(adapter_config.json + adapter_model.safetensors, as Flow-GRPO saves them)")
    p.add_argument("--device", type=device, default=None, help="cuda, mps or cpu (default: the best available)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="weights of an SD3 / FLUX model (default float32; the sampler's maths stays float32)")
    p.add_argument("--resolution", type=positive_int, default=None,
                   help="image side in pixels for SD3 / FLUX (a multiple of 16; default: the model's own)")


OUT_OF_MEMORY = ("out of memory; if it happened while the model loaded, its weights do not fit: use --dtype bfloat16, "
                 "LoRA (--lora-rank) or a larger device; if during sampling or training, lower the sizes (--group, "
                 "--steps, --continuations, --prompts-per-iteration, --resolution) or set --micro-batch and "
                 "--gradient-checkpointing (`workbench train --dry-run` prints the estimate)")


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed command: any error becomes one `error:` line and exit 2, Ctrl-C exit 130."""
    try:
        return args.func(args)
    except WorkbenchError as err:
        message = str(err)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        message = OUT_OF_MEMORY
    except Exception as err:
        if os.environ.get("WORKBENCH_DEBUG"):
            raise
        text = str(err) or type(err).__name__
        if "out of memory" in text.lower() or "can't allocate memory" in text.lower():
            message = OUT_OF_MEMORY
        else:
            message = f"unexpected {type(err).__name__}: {text} (run with WORKBENCH_DEBUG=1 for the traceback)"
    print(f"error: {one_line(message)}", file=sys.stderr)
    return 2
