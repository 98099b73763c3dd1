"""Mutation pass over the maths and storage modules: do the tests catch plausible wrong maths?

Each mutant changes one operator or constant of one module (`+` <-> `-`, `*` <-> `/`, `**` -> `*`,
`<` <-> `<=`, `==` <-> `!=`, `and` <-> `or`, a dropped unary minus or `not`, `True` <-> `False`, a number
n -> n + 1) and runs the tests of that module's test files (`MODULE_TESTS`) that execute the changed
statement in a traced run of the unmutated code, fastest first, first failure stops (`-x`). A mutant is
killed when a test fails, errors or times out, and survives when every test passes (or none runs it).

The mutants are written into a scratch copy of the repository (/tmp/mut/<module>, never the working
tree), which comes first on sys.path. One parent process per module imports torch, pytest and the other
third-party packages once, then forks one child per mutant: the child imports the workbench afresh from
the scratch copy (so it sees the mutant) and runs pytest in-process, which saves the seconds of a torch
import per mutant. Bytecode caching is off, so a mutant never runs a stale .pyc.

    .venv/bin/python scripts/mutation_check.py --fraction 0.2    # a fifth of every module's mutants
    .venv/bin/python scripts/mutation_check.py --module flow/sde.py --no-doc      # every mutant of one module
    .venv/bin/python scripts/mutation_check.py --fraction 0.2 --again A.json --json B.json  # survivors only
    .venv/bin/python scripts/mutation_check.py --merge A.json B.json --fraction 0.2  # docs/mutation.md

Mutants listed in scripts/mutation_equivalents.py (each with its reason) are reported apart and left out of
the score.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import random
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

from mutation_equivalents import EQUIVALENT, EQUIVALENT_LINES  # the script's folder is on sys.path
from mutation_report import Mutant, held_out_section, print_score, report, score
from mutation_runner import ROOT, SCRATCH, LineTracer, _preload, make_scratch, run_child

# module (under workbench/) -> test files that cover it, fastest and most specific first.
MODULE_TESTS: dict[str, list[str]] = {
    "flow/dynamics.py": ["test_dynamics.py", "test_sampler.py"],
    "flow/policy.py": ["test_policy.py", "test_sampler.py", "test_credit.py"],
    "flow/sampler.py": ["test_flow_exact.py", "test_sampler.py", "test_sde_reference.py", "test_credit.py"],
    "flow/schedule.py": ["test_flow_exact.py", "test_sde.py", "test_sde_reference.py", "test_sampler.py",
                         "test_presets.py"],
    "flow/sde.py": ["test_sde.py", "test_sde_reference.py", "test_flow_exact.py", "test_sampler.py",
                    "test_objectives.py"],
    "flow/trajectory.py": ["test_flow_exact.py", "test_sampler.py", "test_credit.py", "test_credit_compare.py"],
    "rl/advantages.py": ["test_advantages.py", "test_properties.py", "test_presets.py"],
    "rl/chunking.py": ["test_chunking.py", "test_properties.py", "test_objectives.py"],
    "rl/credit.py": ["test_credit_by_hand.py", "test_credit.py", "test_properties.py", "test_credit_calibration.py"],
    "rl/credit_compare.py": ["test_credit_compare.py"],
    "rl/credit_estimators.py": ["test_credit_estimators.py", "test_credit.py"],
    "rl/credit_stats.py": ["test_credit_stats.py", "test_significance.py", "test_credit_compare.py",
                           "test_credit_calibration.py"],
    "rl/explain.py": ["test_objectives_by_hand.py", "test_explain.py"],
    "rl/objectives.py": ["test_objectives_by_hand.py", "test_objectives.py", "test_explain.py"],
    "rl/significance.py": ["test_significance.py", "test_credit_calibration.py"],
    "train/store.py": ["test_store_by_hand.py", "test_runs.py", "test_properties.py", "test_trainer.py"],
    "train/trainer.py": ["test_store_by_hand.py", "test_trainer.py", "test_runs.py"],
}

# Only these functions of a module are mutated (the rest belongs to other passes' scope).
ONLY_FUNCTIONS: dict[str, set[str]] = {
    "train/trainer.py": {"Trainer.__init__", "Trainer._setup", "Trainer.resume", "Trainer._checkpoint_to_resume",
                         "Trainer._restore", "Trainer._checkpoint"},
}

SWAP_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.Pow: ast.Mult,
            ast.FloorDiv: ast.Div, ast.Mod: ast.FloorDiv}
SWAP_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
SWAP_BOOL = {ast.And: ast.Or, ast.Or: ast.And}
SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**", ast.FloorDiv: "//",
          ast.Mod: "%", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
          ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in", ast.And: "and", ast.Or: "or"}


# Tensor-shape calls: a changed constant in their arguments only breaks a shape, which any test that runs
# the line catches; mutating them would only add slow, trivially killed mutants.
SHAPE_CALLS = {"view", "reshape", "expand", "expand_as", "unsqueeze", "squeeze", "flatten", "permute", "repeat",
               "view_as", "reshape_as", "transpose", "movedim"}


def _skipped(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Messages of raised errors, annotations, docstrings and tensor-shape arguments are never mutated."""
    child, node = node, parents.get(node)
    while node is not None:
        if isinstance(node, ast.Raise):
            return True
        if (isinstance(node, ast.Call) and child is not node.func and isinstance(node.func, ast.Attribute)
                and node.func.attr in SHAPE_CALLS):
            return True
        if isinstance(node, (ast.arg, ast.AnnAssign)) and child is node.annotation:
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and child is node.returns:
            return True
        child, node = node, parents.get(node)
    return False


def _changes(node: ast.AST) -> list[tuple[str, object]]:
    """The (description, how) pairs of one node; `how` is applied by `_apply`."""
    if isinstance(node, ast.BinOp) and type(node.op) in SWAP_BIN:
        new = SWAP_BIN[type(node.op)]
        return [(f"{SYMBOL[type(node.op)]} -> {SYMBOL[new]}", new)]
    if isinstance(node, ast.AugAssign) and type(node.op) in (ast.Add, ast.Sub, ast.Mult, ast.Div):
        new = SWAP_BIN[type(node.op)]
        return [(f"{SYMBOL[type(node.op)]}= -> {SYMBOL[new]}=", new)]
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in SWAP_CMP:
        new = SWAP_CMP[type(node.ops[0])]
        return [(f"{SYMBOL[type(node.ops[0])]} -> {SYMBOL[new]}", new)]
    if isinstance(node, ast.BoolOp):
        new = SWAP_BOOL[type(node.op)]
        return [(f"{SYMBOL[type(node.op)]} -> {SYMBOL[new]}", new)]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        return [("drop -" if isinstance(node.op, ast.USub) else "drop not", "drop")]
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return [(f"{node.value} -> {not node.value}", not node.value)]
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return [(f"{node.value!r} -> {node.value + 1!r}", node.value + 1)]
    return []


def _apply(tree: ast.Module, target: int, how: object) -> None:
    """Change the target-th node (in ast.walk order) of the tree in place."""
    node = list(ast.walk(tree))[target]
    if isinstance(node, (ast.BinOp, ast.AugAssign, ast.BoolOp)):
        node.op = how()
    elif isinstance(node, ast.Compare):
        node.ops = [how()]
    elif isinstance(node, ast.UnaryOp):
        parent = next(p for p in ast.walk(tree) for f, v in ast.iter_fields(p)
                      if v is node or (isinstance(v, list) and any(x is node for x in v)))
        for field, value in ast.iter_fields(parent):
            if value is node:
                setattr(parent, field, node.operand)
            elif isinstance(value, list):
                setattr(parent, field, [node.operand if x is node else x for x in value])
    else:
        node.value = how


def _statement_lines(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> tuple[int, int] | None:
    """Lines that run when the mutated node runs: its simple statement, or its part of a compound one.

    None when the node runs at import time (module or class level, default values, decorators).
    """
    child, parent = node, parents.get(node)
    while parent is not None and not isinstance(child, ast.stmt):
        child, parent = parent, parents.get(parent)
    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):  # a default value: the tests that call it
        return (child.body[0].lineno, child.end_lineno) if _within(node, child.args, parents) else None
    inside = parent
    while inside is not None and not isinstance(inside, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        inside = parents.get(inside)
    if inside is None:
        return None
    if isinstance(child, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
        return child.lineno, node.end_lineno
    return child.lineno, child.end_lineno


def _within(node: ast.AST, ancestor: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node is not None and node is not ancestor:
        node = parents.get(node)
    return node is ancestor


def _functions(tree: ast.Module) -> dict[ast.AST, str]:
    """Every node -> the qualified name of the function (or class body) it sits in ('' at module level)."""
    owner: dict[ast.AST, str] = {}

    def visit(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = name
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{name}.{child.name}" if name else child.name
            owner[child] = inner
            visit(child, inner)
    visit(tree, "")
    return owner


def mutants_of(module: str, source: str) -> list[tuple[Mutant, int, object]]:
    """Every mutant of a module's source, with the node position and change that make it."""
    tree = ast.parse(source)
    lines = source.splitlines()
    parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    owner = _functions(tree)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    only = ONLY_FUNCTIONS.get(module)
    found = []
    place = {n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)) for n in ast.walk(tree)}
    nodes = sorted(enumerate(ast.walk(tree)), key=lambda p: place[p[1]])
    for position, node in nodes:
        if id(node) in docstrings or not hasattr(node, "lineno") or _skipped(node, parents):
            continue
        function = owner.get(node, "")
        if only is not None and not any(function == f or function.startswith(f + ".") for f in only):
            continue
        for description, how in _changes(node):
            same = sum(m.line == node.lineno and m.mutation.split(" #")[0] == description for m, _, _ in found)
            description += f" #{same + 1}" if same else ""  # the second `1 -> 2` of a line is another mutant
            mutant = Mutant(module, len(found), node.lineno, function, lines[node.lineno - 1].strip(), description,
                            _statement_lines(node, parents))
            found.append((mutant, position, how))
    return found


def mutated_source(source: str, position: int, how: object) -> str:
    tree = ast.parse(source)
    _apply(tree, position, how)
    return ast.unparse(tree)


def baseline(module: str, scratch: Path, source: str) -> dict:
    """Run the module's tests on the unmutated source, tracing which test runs which line."""
    target = scratch / "workbench" / module
    files = [str(scratch / "tests" / t) for t in MODULE_TESTS[module]]
    outcome, seconds = run_child(files, 3600, scratch / "baseline.log", LineTracer(target), scratch / "coverage.json")
    if outcome != "survived":
        raise SystemExit(f"{module}: the tests fail without a mutant; see {scratch / 'baseline.log'}")
    coverage = json.loads((scratch / "coverage.json").read_text())
    print(f"{module}: tests {' '.join(MODULE_TESTS[module])} take {seconds:.0f} s traced, "
          f"{sum(coverage['seconds'].values()):.0f} s untraced", flush=True)
    return coverage


def tests_for(mutant: Mutant, module: str, scratch: Path, coverage: dict) -> list[str]:
    """The test ids (or files) to run on a mutant: those that run its statement, fastest first."""
    if mutant.lines is None or not coverage["lines"]:
        return [str(scratch / "tests" / t) for t in MODULE_TESTS[module]]
    first, last = mutant.lines
    ran = [t for t, lines in coverage["lines"].items() if any(first <= n <= last for n in lines)]
    return sorted(ran, key=lambda t: coverage["seconds"].get(t, 0.0))  # node ids, relative to the scratch copy


def check_module(module: str, fraction: float | None, seed: int, again: dict | None,
                 all_tests: bool = False, scratch_root: Path = SCRATCH) -> list[Mutant]:
    """Run every (or a sample of the) mutant(s) of one module; the unmutated source must pass first.

    again: the outcomes of an earlier pass over the same source; only its survivors are run again.
    all_tests: no traced baseline; every mutant runs all the module's test files (first failure stops).
    """
    scratch = make_scratch(module, scratch_root)
    target = scratch / "workbench" / module
    source = (ROOT / "workbench" / module).read_text()
    found = mutants_of(module, source)
    if fraction is not None:  # the same fraction of every module keeps the overall score unbiased
        found = sorted(random.Random(seed).sample(found, round(fraction * len(found))), key=lambda m: m[0].index)
    sys.path.insert(0, str(scratch))
    os.environ["PYTHONPATH"] = str(scratch)
    os.chdir(scratch)
    try:
        coverage = None
        print(f"{module}: {len(found)} mutants", flush=True)
        results = []
        for mutant, position, how in found:
            earlier = (again or {}).get((mutant.module, mutant.index))
            if earlier is not None and earlier["source_line"] != mutant.source_line:
                earlier = None  # the source changed since: run it
            if mutant.key in EQUIVALENT or mutant.key[:3] in EQUIVALENT_LINES:
                mutant.outcome = "equivalent"
            elif earlier is not None and earlier["outcome"] != "survived":
                mutant.outcome, mutant.tests, mutant.seconds = earlier["outcome"], earlier["tests"], 0.0
            else:
                if coverage is None:  # only once a mutant has to run
                    coverage = {"lines": {}, "seconds": {}} if all_tests else baseline(module, scratch, source)
                run_mutant(mutant, module, scratch, coverage, mutated_source(source, position, how))
            results.append(mutant)
            print(f"  {mutant.outcome:10s} {module}:{mutant.line} {mutant.mutation:14s} {mutant.source_line[:60]}"
                  f" ({mutant.tests} tests, {mutant.seconds:.0f} s)", flush=True)
    finally:
        target.write_text(source)
        sys.path.remove(str(scratch))
        os.chdir(ROOT)
    return results


def run_mutant(mutant: Mutant, module: str, scratch: Path, coverage: dict, mutated: str) -> None:
    """Write the mutant into the scratch copy and run the tests that reach its statement."""
    tests = tests_for(mutant, module, scratch, coverage)
    mutant.tests = len(tests)
    if not tests:
        mutant.outcome = "survived"
        return
    seconds = coverage["seconds"]
    budget = sum(seconds.values()) if mutant.lines is None else sum(seconds.get(t, 0.0) for t in tests)
    budget = budget or 600.0  # no baseline timings (--all-tests): a generous bound
    (scratch / "workbench" / module).write_text(mutated)
    importlib.invalidate_caches()
    mutant.outcome, mutant.seconds = run_child(tests, 3 * budget + 30, scratch / "mutant.log")
    if mutant.outcome == "survived":
        shutil.copy(scratch / "mutant.log", scratch / f"survived_{mutant.index}.log")


def load_outcomes(paths: list[str]) -> list[Mutant]:
    """The latest outcome of every mutant in these --json files (later files win), in MODULE_TESTS order."""
    latest: dict[tuple[str, int], Mutant] = {}
    current = {m: {x.index: x for x, _, _ in mutants_of(m, (ROOT / "workbench" / m).read_text())} for m in MODULE_TESTS}
    for path in paths:
        for row in json.loads(Path(path).read_text()):
            mutant = current[row["module"]].get(row["index"])
            if mutant is None or mutant.source_line != row["source_line"]:
                raise SystemExit(f"{path}: {row['module']} changed since mutant {row['index']} ran; run it again")
            mutant.outcome, mutant.tests, mutant.seconds = row["outcome"], row["tests"], row["seconds"]
            if mutant.key in EQUIVALENT or mutant.key[:3] in EQUIVALENT_LINES:
                mutant.outcome = "equivalent"
            latest[(mutant.module, mutant.index)] = mutant
    return sorted(latest.values(), key=lambda m: (list(MODULE_TESTS).index(m.module), m.index))


def merge(args: argparse.Namespace) -> int:
    """Report the outcomes of a pass run in parts (--merge) and of a held-out sample (--held-out)."""
    results = load_outcomes(args.merge)
    print_score(results)
    samples = [load_outcomes(paths) for paths in args.held_out or []]
    for n, held in enumerate(samples, 1):
        print(f"held-out sample {n}:")
        print_score(held)
    if not args.no_doc:
        command = "python scripts/mutation_check.py --merge " + " ".join(Path(p).name for p in args.merge)
        note = ("The pass ran in parts: each file holds a first pass over some modules or a rerun (`--again`) of "
                "its survivors after tests were added; the latest outcome of each mutant counts.")
        if args.first:
            k, n, p = score(load_outcomes(args.merge[:args.first]))
            note += (f" The first pass ({', '.join(Path(f).name for f in args.merge[:args.first])}) killed {k} of "
                     f"{n} ({p:.1f} %); tests were then written for the maths its survivors showed untested, so the "
                     "score above is biased upwards: the held-out samples at the end are the fair estimate.")
        text = report(results, command, None, args.fraction, MODULE_TESTS, note)
        for n, (held, paths) in enumerate(zip(samples, args.held_out), 1):
            total = sum(len(mutants_of(m, (ROOT / "workbench" / m).read_text())) for m in {x.module for x in held})
            afters = args.held_out_after or []
            after = load_outcomes(afters[n - 1]) if n <= len(afters) else None
            text += "\n".join(held_out_section(held, paths, total, after, n)) + "\n"
        (ROOT / args.doc).write_text(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--module", action="append", choices=sorted(MODULE_TESTS),
                        help="module under workbench/ to mutate (repeatable; default: all)")
    parser.add_argument("--fraction", type=float, default=None,
                        help="run this fraction of each module's mutants, drawn at random (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of --fraction")
    parser.add_argument("--list", action="store_true", help="print the mutants without running them")
    parser.add_argument("--doc", default="docs/mutation.md", help="where to write the result")
    parser.add_argument("--no-doc", action="store_true", help="print only; leave docs/mutation.md alone")
    parser.add_argument("--json", default=str(SCRATCH / "results.json"), help="every mutant and its outcome")
    parser.add_argument("--all-tests", action="store_true", help="skip the traced baseline and run every test "
                        "file of the module on each mutant (quicker with --again and few survivors)")
    parser.add_argument("--scratch", default=str(SCRATCH), help="folder of the scratch copies (one per module; "
                        "give concurrent passes different folders)")
    parser.add_argument("--first", type=int, default=0, help="with --merge: how many of its files are the first "
                        "pass (before tests were added); its score is reported too")
    parser.add_argument("--held-out", nargs="+", action="append", metavar="JSON", help="with --merge: the "
                        "--json files of a sample drawn with another seed, reported apart (repeatable)")
    parser.add_argument("--held-out-after", nargs="+", action="append", metavar="JSON", help="reruns of a "
                        "--held-out sample's survivors after tests were added (in the same order), reported beside")
    parser.add_argument("--merge", nargs="+", metavar="JSON", help="only report: the outcomes of earlier --json "
                        "files (later files win for the same mutant), e.g. a pass run in parts")
    parser.add_argument("--again", metavar="JSON", help="an earlier --json of the same sources: run only its "
                        "survivors again (after adding tests) and keep its other outcomes")
    args = parser.parse_args(argv)
    modules = args.module or list(MODULE_TESTS)
    if args.list:
        for module in modules:
            for mutant, _, _ in mutants_of(module, (ROOT / "workbench" / module).read_text()):
                print(f"{module}:{mutant.line} {mutant.mutation:14s} {mutant.source_line}")
        return 0
    if args.merge:
        return merge(args)
    sys.dont_write_bytecode = True
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # nbmake and the browser plugins cost seconds per start
    start = time.monotonic()
    _preload([ROOT / "tests" / "conftest.py", *sorted({ROOT / "tests" / t for m in modules for t in MODULE_TESTS[m]})])
    again = None
    if args.again:
        again = {(r["module"], r["index"]): r for r in json.loads(Path(args.again).read_text())}
    results = []
    for module in modules:
        try:
            results += check_module(module, args.fraction, args.seed, again, args.all_tests, Path(args.scratch))
        except SystemExit as err:  # the unmutated tests fail: say so and go on with the other modules
            print(err, flush=True)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps([asdict(m) for m in results], indent=1))
    print_score(results)
    if not args.no_doc:
        command = "python scripts/mutation_check.py " + " ".join(argv if argv is not None else sys.argv[1:])
        minutes = (time.monotonic() - start) / 60
        (ROOT / args.doc).write_text(report(results, command.strip(), minutes, args.fraction, MODULE_TESTS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
