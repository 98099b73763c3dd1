"""Where a test run's CPU goes, by test file, test and imported package: py-spy samples of every Python process.

scripts/cpu_by_process.py says which processes used the CPU (chromium, the xdist workers, notebook kernels...);
this says what the Python ones did with it. py-spy samples the stacks of the command's Python processes (not
chromium's) `--rate` times a second while they run on a CPU; each sample is 1/rate CPU-seconds of the test, fixture
or import on its stack. Sampling slows the run (a whole `make test` by about half here) and is approximate: rank
and compare, do not add to the cores' seconds.

    .venv/bin/pip install py-spy                                # not a dependency of the workbench
    python3 scripts/cpu_by_test.py -- bash scripts/test.sh      # runs the suite under py-spy, prints the tables
    python3 scripts/cpu_by_test.py --raw FILE.txt               # the tables of an earlier run's samples

Used for docs/perf-data/epyc/README.md ("Where the suite's CPU goes, by test").
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_by_process import kind  # the same process kinds as that script's

PROCESS = re.compile(r'process \d+:"((?:[^"]|"(?!;))*)"')  # py-spy's frame naming a process and its command line
TEST = re.compile(r"^(\w+) \(((?:test_\w+|conftest)\.py):\d+\)")  # a test function or fixture in a test file
# Stacks that end in a blocking wait: py-spy's idle detection lets some through (a thread in epoll_wait or on a
# condition), so they are dropped as not CPU.
WAITS = re.compile(r"^(\w*Selector\.select|Condition\.wait|Event\.wait|Thread\._wait_for_tstate_lock|sleep|select|poll)"
                   r" \(")
PHASES = {"pytest_runtest_setup": "setup", "pytest_runtest_call": "call", "pytest_runtest_teardown": "teardown"}


def read_samples(text: str) -> list[tuple[list[str], str, int]]:
    """(frames, command line of the sampled process, samples) per stack of py-spy's raw output, blocking waits
    left out. A command line may hold ';' or a newline, so stacks are split where a line starts a process frame."""
    out = []
    for chunk in re.split(r"\n(?=process \d+:)", text.strip()):
        found = re.match(r"(?s)(.*) (\d+)$", chunk.strip())
        if not found:
            continue
        stack, count = found.group(1), int(found.group(2))
        commands = PROCESS.findall(stack)
        frames = PROCESS.sub("process", stack).split(";")
        if WAITS.match(frames[-1]):
            continue
        out.append((frames, " ".join(commands[-1].split()) if commands else "?", count))
    return out


def where(frames: list[str], command: str) -> tuple[str, str]:
    """(test file or process kind, test or fixture and its phase) a stack's CPU goes to."""
    for frame in frames:
        found = TEST.match(frame)
        if found:
            phase = next((PHASES[f.split(" ")[0]] for f in frames if f.split(" ")[0] in PHASES), "collection")
            return found.group(2), f"{found.group(1)} ({phase})"
    name = kind(command)
    if name == "xdist workers":  # a stack in no test: a browser test's app server (its own threads), or start-up
        if any("(workbench/ui/" in frame for frame in frames):
            return name, "the browser tests' app servers: handlers"
        if imported(frames) is not None:
            return name, "imports outside a test (start-up, collection, a server's first use)"
        return name, "the rest outside a test (pytest, xdist, the app servers' event loops and encoding)"
    return name, command[:110]


def imported(frames: list[str]) -> str | None:
    """The package whose module body a stack is executing during an import (the innermost module below the first
    import: torch, diffusers, peft, ...), or None outside imports."""
    first = next((i for i, frame in enumerate(frames) if frame.startswith("_find_and_load")), None)
    if first is None:
        return None
    module = next((frame for frame in reversed(frames[first:]) if frame.startswith("<module> (")), None)
    if module is None:
        return "(the import machinery)"
    path = module[len("<module> ("):].split(":")[0]
    return path.split("/")[0] if "/" in path else path.removesuffix(".py")


def tables(samples: list[tuple[list[str], str, int]], rate: float, top: int) -> dict:
    total = sum(count for _, _, count in samples)
    files, tests, kinds, imports = (collections.Counter() for _ in range(4))
    for frames, command, count in samples:
        seconds = count / rate
        place, detail = where(frames, command)
        files[place] += seconds
        tests[f"{place}: {detail}"] += seconds
        kinds[kind(command)] += seconds
        package = imported(frames)
        if package is not None:
            imports[package] += seconds
    return {"sampled_s": total / rate, "rate": rate, "by_kind": dict(kinds.most_common()),
            "by_file": dict(files.most_common(top)), "by_test": dict(tests.most_common(top)),
            "imports_s": sum(imports.values()), "imports_by_package": dict(imports.most_common(top))}


def show(result: dict) -> None:
    total = result["sampled_s"]

    def rows(title: str, values: dict) -> None:
        print(f"\n{title}")
        for name, seconds in values.items():
            print(f"{seconds:8.1f} s {100 * seconds / total:5.1f} %  {name}")

    print(f"{total:.1f} CPU-seconds sampled in the Python processes ({result['rate']:g} samples a second)")
    rows("By process kind", result["by_kind"])
    rows("By test file (or, outside a test, process kind)", result["by_file"])
    rows("By test or fixture", result["by_test"])
    rows(f"Imports: {result['imports_s']:.1f} s ({100 * result['imports_s'] / total:.0f} %), by the package whose "
         "module body runs", result["imports_by_package"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", default=None, help="read py-spy's raw samples from this file instead of running")
    parser.add_argument("--keep", default="test-artifacts/cpu-by-test.txt", help="where a run keeps its raw samples")
    parser.add_argument("--rate", type=float, default=50, help="samples a second per process (py-spy's --rate)")
    parser.add_argument("--top", type=int, default=30, help="rows per table")
    parser.add_argument("--json", default=None, help="also write the tables to this file")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS ...]")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    code = 0
    if args.raw is None:
        if not command:
            parser.error("give the command to run after --, or --raw FILE")
        venv = Path(__file__).resolve().parent.parent / ".venv" / "bin"
        spy = shutil.which("py-spy") or shutil.which("py-spy", path=f"{Path(sys.executable).parent}:{venv}")
        if spy is None:
            parser.error("py-spy is not installed: .venv/bin/pip install py-spy")
        Path(args.keep).parent.mkdir(parents=True, exist_ok=True)
        code = subprocess.run([spy, "record", "--subprocesses", "--nonblocking", "--rate", f"{args.rate:g}",
                               "--format", "raw", "--output", args.keep, "--", *command]).returncode
        args.raw = args.keep
    result = tables(read_samples(Path(args.raw).read_text(errors="replace")), args.rate, args.top)
    show(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return code


if __name__ == "__main__":
    sys.exit(main())
