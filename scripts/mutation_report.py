"""Outcomes of scripts/mutation_check.py: the mutant record, the score with its interval, docs/mutation.md."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

from mutation_equivalents import EQUIVALENT, EQUIVALENT_LINES


@dataclass
class Mutant:
    """One single-point change of a module's source."""

    module: str
    index: int  # position among the module's mutants (stable for a given source)
    line: int
    function: str
    source_line: str
    mutation: str  # e.g. "+ -> -", "0.5 -> 1.5", "drop -"
    lines: tuple[int, int] | None = None  # statement lines whose tests run it; None = runs at import (all)
    outcome: str = ""  # killed / survived / timeout / equivalent
    tests: int = 0  # tests run on it (0 when no test runs its line: it survives)
    seconds: float = 0.0

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.module, self.function, self.source_line, self.mutation)


def score(results: list[Mutant]) -> tuple[int, int, float]:
    """(killed, counted, percent) over the non-equivalent mutants."""
    counted = [m for m in results if m.outcome != "equivalent"]
    killed = sum(m.outcome in ("killed", "timeout") for m in counted)
    return killed, len(counted), 100.0 * killed / max(len(counted), 1)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson interval of a proportion k / n (the score of a random sample of mutants)."""
    if n == 0:
        return float("nan"), float("nan")
    p, d = k / n, 1 + z * z / n
    mid, half = (p + z * z / (2 * n)) / d, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return 100 * (mid - half), 100 * (mid + half)


def report(results: list[Mutant], command: str, minutes: float | None, fraction: float | None,
           module_tests: dict[str, list[str]], note: str = "") -> str:
    """docs/mutation.md: the score per module, every survivor and every excluded equivalent mutant."""
    killed, counted, percent = score(results)
    low, high = wilson(killed, counted)
    sample = ("every mutant of every module" if fraction is None else
              f"a random {100 * fraction:.0f} % of each module's mutants, so the score is an estimate: "
              f"95 % interval {low:.1f} to {high:.1f} % (Wilson)")
    out = ["# Mutation pass", "",
           f"Last run: `{command}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
           + (f", {minutes:.0f} min" if minutes is not None else "") + f"); {sample}.", "",
           "Each mutant changes one operator or constant of one module (`+` <-> `-`, `*` <-> `/`, `**` -> `*`,",
           "`<` <-> `<=`, `==` <-> `!=`, `and` <-> `or`, a dropped `-` or `not`, `True` <-> `False`, n -> n + 1) and",
           "runs the tests of that module (`MODULE_TESTS` in scripts/mutation_check.py) that execute the mutated",
           "statement in an unmutated, traced run (with `--all-tests`: every test file of the module); killed =",
           "a test fails, errors or times out. Messages of raised errors, annotations, docstrings and the arguments",
           "of tensor-shape calls (`view`, `reshape`, ...) are not mutated; of train/trainer.py only the resume path",
           "is (`ONLY_FUNCTIONS`).", "",
           f"**Score: {killed} of {counted} non-equivalent mutants killed ({percent:.1f} %).**", "",
           *([note, ""] if note else []),
           "| module | tests | mutants | equivalent | killed | survived | score |", "|---|---|---|---|---|---|---|"]
    for module in dict.fromkeys(m.module for m in results):
        mine = [m for m in results if m.module == module]
        k, c, p = score(mine)
        eq = sum(m.outcome == "equivalent" for m in mine)
        out.append(f"| {module} | {', '.join(module_tests[module])} | {len(mine)} | {eq} | {k} | {c - k} | {p:.0f} % |")
    out += ["", "## Surviving mutants", ""]
    out += [f"- `{m.module}:{m.line}` ({m.function or 'module'}) `{m.mutation}` in `{m.source_line}`"
            for m in results if m.outcome == "survived"] or ["None."]
    out += ["", "## Equivalent mutants left out of the score", ""]
    out += [f"- `{m.module}:{m.line}` `{m.mutation}` in `{m.source_line}`: "
            f"{EQUIVALENT.get(m.key) or EQUIVALENT_LINES[m.key[:3]]}"
            for m in results if m.outcome == "equivalent"] or ["None."]
    return "\n".join(out) + "\n"


def print_score(results: list[Mutant]) -> None:
    killed, counted, percent = score(results)
    low, high = wilson(killed, counted)
    print(f"\nscore: {killed} of {counted} non-equivalent mutants killed ({percent:.1f} %, 95 % interval "
          f"{low:.1f} to {high:.1f} % when the mutants are a sample)")
    for m in results:
        if m.outcome == "survived":
            print(f"  survived {m.module}:{m.line} {m.mutation:14s} {m.source_line}")


def held_out_section(held: list[Mutant], paths: list[str], total: int, after: list[Mutant] | None = None,
                     number: int = 1) -> list[str]:
    """A second sample, drawn with another seed and run only after the tests were written: an estimate
    free of the selection that finding and killing the first sample's survivors brings. `after`: the same
    mutants once tests were added for what its survivors showed (reported beside, never instead)."""
    killed, counted, percent = score(held)
    low, high = wilson(killed, counted)
    out = ["", f"## Held-out sample {number}", "",
           f"`--held-out {' '.join(Path(p).name for p in paths)}`: {len(held)} of the {total} mutants of the same "
           "modules, drawn with another seed and run once, after every test written before it"
           + (" (the ones written for held-out sample 1's survivors included)" if number > 1 else "") + ".", "",
           f"**Held-out score: {killed} of {counted} non-equivalent mutants killed ({percent:.1f} %, 95 % interval "
           f"{low:.1f} to {high:.1f} %).**", "", "Its survivors:", ""]
    later = {(m.module, m.index): m.outcome for m in after or []}
    out += [f"- `{m.module}:{m.line}` ({m.function or 'module'}) `{m.mutation}` in `{m.source_line}`"
            + (" (killed by a test written afterwards)" if later.get((m.module, m.index)) in ("killed", "timeout")
               else "") for m in held if m.outcome == "survived"] or ["None."]
    if after:
        rerun = {(x.module, x.index): x for x in after}
        k, n, p = score([rerun.get((m.module, m.index), m) for m in held])
        out += ["", f"With the tests written afterwards for what these survivors showed untested: {k} of {n} "
                f"({p:.1f} %); the held-out score above stays the estimate."]
    return out
