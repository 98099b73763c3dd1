"""Write docs/performance.md from the figures of `python bench/all.py --json FILE [--tests]`.

    .venv/bin/python bench/all.py --json /tmp/bench.json --tests   # ~15 minutes on 2 quiet cores
    .venv/bin/python bench/browser.py --lesson --json /tmp/lesson.json    # the lesson's memory (~7 min quiet)
    .venv/bin/python bench/report.py /tmp/bench.json --lesson /tmp/lesson.json  # -> docs/performance.md

`--app APP.json` reports a separate `bench/browser.py --json APP.json` run (say, the one made next to the
baseline) instead of the browser figures of `bench/all.py`, and keeps those beside it.

`--sampling S.json [S2.json ...]` (from `workbench bench sampling --json S.json`) pools the alternating pairs of
further sampling runs with bench/all.py's: one run's median of 21 pairs moves by several points with the load.

`--heap-default HEAP.json` (from `WORKBENCH_HEAP=default workbench bench credit --json HEAP.json`) adds
the credit figure under glibc's own allocator settings (workbench/core/heap.py).

`--baseline OLD.json --baseline-commit SHA` adds the browser figures of an earlier commit measured on the same
machine right after, with this commit's benchmark (`git worktree add /tmp/old SHA; cd /tmp/old;
python /path/to/this/checkout/bench/browser.py --json OLD.json`):
this machine's speed drifts by tens of percent between hours, so a figure is compared with its baseline of the
same hour, not with an older page. `--baseline-sampling S.json [S2.json ...]` adds the baseline commit's
`workbench bench sampling` runs (this commit's bench copied in), pooled, beside this commit's. `--lesson-commit SHA`
says which commit the lesson's memory was measured on when it is older than the rest.

Every number in the page comes from those files; the page says how each was measured and on which machine. The
JSON inputs are not kept in the repository: rerun the commands above to measure this checkout again (`--out` writes
another page, as docs/performance-xeon.md was written for the machine class's other processor).
"""

from __future__ import annotations

import argparse
import json
import statistics
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def machine(f: dict) -> str:
    """The machine the figures were taken on, as `workbench bench` recorded it; a file from before it did is
    described by this machine (which rendering it on another machine would get wrong: the page says so)."""
    if f.get("machine"):
        return f["machine"]
    from workbench.cli.bench import machine as this_machine

    return f"{this_machine()} (read when the page was written: the figures' file did not record its machine)"


def row(name: str, value: float | None, unit: str, target: float, how: str, lower: bool = True) -> str:
    """A Markdown table row: figure, value, target, whether it holds, how it was measured."""
    if value is None:
        return f"| {name} | not measured | {target:g} {unit} | – | {how} |"
    holds = value <= target if lower else value >= target
    shown = f"{value:.0f}" if abs(value) >= 100 else f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"
    return f"| {name} | {shown} {unit} | {'≤' if lower else '≥'} {target:g} {unit} | {'yes' if holds else '**no**'} " \
           f"| {how} |"


def median(values: list[float] | None) -> float | None:
    return statistics.median(values) if values else None


def presses(app: dict) -> list[float]:
    """Every timed press of Measure credit in a bench/browser.py run (one before it timed three) or in pooled runs."""
    if "rounds" in app:
        return [s for run in app["rounds"] for s in presses(run)]
    return [app["credit_s"], *app.get("credit_again_s", ())] if "credit_s" in app else []


def credit_presses(app: dict) -> float | None:
    """The browser's credit figure: the median of the presses of Measure credit."""
    return median(presses(app))


def presses_note(app: dict) -> str:
    runs = app.get("rounds", [app])
    if not presses(app):
        return "not measured"
    firsts = ", ".join(f"{run['credit_s']:.1f}" for run in runs)
    opened = [run["attribution_open_s"] for run in runs if "attribution_open_s" in run]
    tab = (f"; the Attribution tab's first render before it, timed apart: "
           f"{', '.join(f'{s:.1f}' for s in opened)} s" if opened else "")
    cpu = [run["credit_cpu_per_s"] for run in runs if "credit_cpu_per_s" in run]
    app_cpu, chromium = ("/".join(f"{c[name]:.2f}" for c in cpu) for name in ("app", "chromium"))
    spent = (f"; CPU-seconds per second while the later presses computed: the app {app_cpu}, chromium {chromium}"
             if cpu else "")
    return (f"median of {len(presses(app))} presses in {len(runs)} run(s) (first press of each run {firsts} s, "
            f"the rest {min(presses(app)):.1f}-{max(presses(app)):.1f} s{tab}{spent})")


def processor(run: dict) -> str:
    """The processor a fresh-clone run ran on, where bench/tests.sh recorded it (this machine class has two)."""
    return f", on {run['cpu']}" if run.get("cpu") else ""


def setup_part(run: dict) -> str:
    """The seconds of the run's set-up (scripts/setup.sh on the fresh clone), where bench/tests.sh recorded them."""
    return f"set-up {run['setup_s']} s, " if run.get("setup_s") is not None else ""


def other_runs(tests: dict) -> str:
    """The other fresh-clone runs given (`--tests` with several files), each with its time and exit status."""
    others = tests.get("other_runs", [])
    shown = [f"{run['make_test_s']} s (" + (f"commit {run['commit']}, " if run.get("commit") else "")
             + setup_part(run) + f"exit {run.get('exit', '?')}: {run.get('summary', '')}{processor(run)})"
             for run in others]
    return "; other runs: " + ", ".join(shown) if shown else ""


def same_commit_runs(tests: dict) -> list[dict]:
    """The passing fresh-clone runs of the first run's commit (the page's code), the first run included."""
    runs = [tests, *tests.get("other_runs", [])]
    return [run for run in runs if "make_test_s" in run and run.get("commit") == tests.get("commit")
            and not run.get("exit")]


def tests_median(tests: dict) -> float | None:
    """The median `make test` seconds of the page's commit over its passing runs (the first run's alone if one)."""
    runs = same_commit_runs(tests)
    return statistics.median(run["make_test_s"] for run in runs) if runs else tests.get("make_test_s")


def median_part(tests: dict) -> str:
    runs = same_commit_runs(tests)
    if len(runs) < 2:
        return ""
    return (f"median of {len(runs)} runs of commit {tests.get('commit')} ("
            + ", ".join(f"{run['make_test_s']} s" for run in runs) + "); the first: ")


SPLITS = ("edit_split_ms", "click_split_ms", "map_click_split_ms")  # bench/browser.py's readings in three parts


def pooled(paths: list[str]) -> dict:
    """Several bench/browser.py runs (rounds) as one: their edits, clicks and presses together, the memory of the
    first."""
    runs = [json.loads(Path(path).read_text()) for path in paths]
    if len(runs) == 1:
        return runs[0]
    out = {**runs[0], "rounds": runs}
    for key in ("edit_ms", "click_ms", "map_click_ms", *SPLITS):
        out[key] = [v for run in runs for v in run.get(key, [])]
    out["generate_s"] = median([run["generate_s"] for run in runs if "generate_s" in run])
    return out


def pooled_sampling(first: dict, paths: list[str]) -> dict:
    """bench/all.py's sampling run and further `workbench bench sampling --json` runs as one figure: the median and
    quartiles of every alternating pair of every run (one run's median moves by several points with this
    machine's load), with each run's own median kept."""
    runs = [first, *(json.loads(Path(path).read_text())["sampling"] for path in paths)]
    if any("pair_overheads" not in run for run in runs):
        raise SystemExit("a sampling run without its pairs (`pair_overheads`): rerun it with this commit's bench")
    pairs = sorted(p for run in runs for p in run["pair_overheads"])
    return {**first, "overhead": median(pairs), "repeats": len(pairs),
            "overhead_quartiles": (pairs[len(pairs) // 4], pairs[(3 * len(pairs)) // 4]),
            "run_medians": [run["overhead"] for run in runs],
            "recorded_first": sum("order" not in run for run in runs),
            **{key: median(values) for key in ("recorder_ms_per_step", "recorder_share")
               if (values := [run[key] for run in runs if key in run])}}


def recorder_part(sampling: dict) -> str:
    """The recorder's own work, timed with the transformer replaced by v = 0 (`workbench bench sampling`, from
    this page's commit on; median of the runs that have it); empty for older runs."""
    if "recorder_share" not in sampling:
        return ""
    return (f"; without the model (v = 0) the recorder's own work is {sampling['recorder_ms_per_step']:.2f} ms per "
            f"step, {100 * sampling['recorder_share']:.1f} % of the plain loop's time with it")


def fixed_order(sampling: dict) -> str:
    """A note where sampling runs timed the recorder first in every pair (`workbench bench` before 53fc09e; its runs
    carry no "order"); empty where every run alternated which ran first."""
    if not sampling:
        return ""
    fixed = sampling.get("recorded_first", int("order" not in sampling))
    runs = len(sampling.get("run_medians", ())) or 1
    if not fixed:
        return ""
    which = "the run" if runs == 1 else f"{fixed} of the {runs} runs"
    return f"; {which} timed the recorder first in every pair (before `workbench bench` alternated the order)"


def round_medians(app: dict, key: str) -> str:
    """Each round's median of `key`, as "a / b / c" (empty for a single run)."""
    runs = app.get("rounds")
    if not runs:
        return ""
    values = [median(run[key]) if key.endswith("_ms") else
              (median(presses(run)) if key == "credit" else run[key]) for run in runs
              if key == "credit" or key in run]  # a round made before the figure was timed has none
    return " (rounds: " + " / ".join(f"{v:.0f}" if key.endswith("_ms") else f"{v:.1f}" for v in values) + ")"


def memory_split(app: dict) -> str:
    """What the memory row's figure is made of, where the run recorded it: the app's own allocations and the pages of
    files it maps (mostly shared libraries), which follow the machine's page cache (bench/browser.py
    `memory_mb`)."""
    split = app.get("memory_mb", {}).get("generate_credit", {})
    if "anon" not in split or "file" not in split:
        return ""
    return (f" ({split['anon']:.0f} MB allocated by the app, {split['file']:.0f} MB of pages of files it maps, "
            "mostly shared libraries: that part follows the machine's page cache)")


def rows(f: dict) -> list[str]:
    app, tests = f.get("app", {}), f.get("tests", {})
    rss = app.get("rss_mb", {})
    sampling, credit, threads = f.get("sampling", {}), f.get("credit", {}), f.get("threads", {})
    one = f.get("app_one_thread", {})
    out = [
        row("Chunk edit, Enter to updated plots (median)", median(app.get("edit_ms")), "ms", 150,
            "bench/browser.py: chromium types a spec; the page times from the Enter key's event to the first "
            "frame showing the status, the curve's title and the chunk map's lines (until commit 40e00e3 Python "
            "timed it, polling the page over CDP on every frame)" + round_medians(app, "edit_ms")),
        row("Curve click to updated plots (median)", median(app.get("click_ms")), "ms", 150,
            "bench/browser.py: a click on the L1_rel curve toggles a boundary, timed in the page from the "
            "button's release (the click) to the same frame" + round_medians(app, "click_ms")),
        row("Objectives map click to updated cell (median)", median(app.get("map_click_ms")), "ms", 150,
            "bench/browser.py: a click on a cell of an objective's map (G=8, T=16, 40 maps), timed in the page "
            "from the button's release to the first frame showing the cell's status, formula and outline"
            + round_medians(app, "map_click_ms")),
        row("App memory after Generate + credit", rss.get("generate_credit"), "MB", 700,
            "bench/browser.py: the app's VmRSS after G=8, T=16 and credit at M=4" + memory_split(app)),
        row("App memory after a lesson run from the app", rss.get("lesson"), "MB", 1024,
            "bench/browser.py --lesson: the crosses lesson started and watched from the Fine-tune tab"
            + (f" ({f['app']['lesson_s'] / 60:.0f} minutes)" if "lesson_s" in f.get("app", {}) else "")
            + (f"; measured on commit {app['lesson_commit']}" if app.get("lesson_commit") else "")),
        row("Credit at the defaults in the browser", credit_presses(app), "s", 6,
            "bench/browser.py: Measure credit pressed to status (G=8, T=16, M=4); threads as the app chooses; "
            + presses_note(app)),
        row("Credit at the defaults in the browser, app on one thread", credit_presses(one), "s", 6,
            "bench/browser.py --threads 1: the same, the app limited to one torch thread (issue 24's target); "
            + presses_note(one)),
        row("Credit at the defaults, library", credit.get("credit_s"), "s", 6,
            f"workbench bench credit: measure_credit alone, median of runs, continuations in "
            f"{credit.get('precision', 'float32')}"),
        row("Training next to a busy process / quiet (auto threads)", threads.get("slowdown_auto"), "x", 2,
            "bench/train_threads.py: one `while True` process beside bench/train_speed.py"),
        row("Sampling overhead vs a plain diffusers Euler loop (median)",
            100 * sampling["overhead"] if "overhead" in sampling else None, "%", 5,
            f"workbench bench sampling: {sampling.get('repeats', '?')} alternating pairs"
            + (f" of {len(sampling['run_medians'])} runs pooled (the runs' own medians "
               + " / ".join(f"{100 * m:+.1f}" for m in sampling["run_medians"]) + " %)"
               if len(sampling.get("run_medians", ())) > 1 else "") + ", quartiles "
            + ("/".join(f"{100 * q:+.1f} %" for q in sampling.get("overhead_quartiles", ())) or "–")
            + fixed_order(sampling) + recorder_part(sampling)),
        row("make test on a fresh clone (install included)" + (" **(tests failed)**" if tests.get("exit") else ""),
            tests_median(tests) if not tests.get("exit") else None, "s", 300,
            "bench/tests.sh: " + median_part(tests) + (f"commit {tests['commit']}, " if tests.get("commit")
                                                               else "")
            + setup_part(tests) + tests.get("summary", "") + processor(tests) + other_runs(tests)),
    ]
    return out


def baseline_lines(f: dict) -> list[str]:
    """The browser figures beside an earlier commit's, measured in the same hour (empty without a baseline)."""
    base = f.get("baseline")
    if not base:
        return []
    app = f.get("app", {})
    lines = ["## Against the previous commit, same hour", "",
             f"This commit's `bench/browser.py`, run on commit {f['baseline_commit']} "
             + (f"in {len(base['rounds'])} runs in the same hour as this page's (the inputs' README gives their "
                "order), all edits, clicks and presses of a commit pooled" if "rounds" in base
                else "right after this page's run")
             + " (so both are timed the same way):", "",
             "| Figure | This commit | Commit " + f["baseline_commit"] + " |", "|---|---|---|"]
    one, base_one = f.get("app_one_thread", {}), f.get("baseline_one_thread", {})
    for name, now_app, then_app, key, unit in (
            ("Chunk edit (median)", app, base, "edit_ms", "ms"), ("Curve click (median)", app, base, "click_ms", "ms"),
            ("Objectives map click (median)", app, base, "map_click_ms", "ms"),
            ("Generate G=8, T=16", app, base, "generate_s", "s"), ("Credit at the defaults (median of presses)", app,
                                                                    base, "credit", "s"),
            ("Credit, app on one thread (median of presses)", one, base_one, "credit", "s")):
        now, then = ((credit_presses(a) if key == "credit" else median(v) if isinstance(v := a.get(key), list) else v)
                     for a in (now_app, then_app))
        if now is not None and then is not None:
            digits = 0 if unit == "ms" else 2
            lines.append(f"| {name} | {now:.{digits}f} {unit}{round_medians(now_app, key)} | "
                         f"{then:.{digits}f} {unit}{round_medians(then_app, key)} |")
    return [*lines, *sampling_against(f.get("sampling", {}), f.get("baseline_sampling")), ""]


def split_cell(app: dict, key: str) -> str:
    """'152 ms (24 / 21 / 106)': the median of a kind of reading and the medians of its three parts (the page before
    its request, the request, the page after its reply; `bench/browser.py` `split_ms`)."""
    value = median(app.get(f"{key}_ms"))
    if value is None:
        return "–"
    parts = [split for split in app.get(f"{key}_split_ms", []) if split]
    return f"{value:.0f} ms" + (" (" + " / ".join(f"{median(list(part)):.0f}" for part in zip(*parts)) + ")"
                                if parts else "")


def slow_page_lines(f: dict) -> list[str]:
    """The page's edits and clicks with its main thread slowed (`bench/browser.py --slow-page F`), beside the same
    runs at full speed; empty without such runs."""
    groups = f.get("slow_page_runs")
    if not groups:
        return []
    lines = ["## The page of a slower processor, emulated", "",
             "`bench/browser.py --slow-page F` runs the page's main thread F times slower (chromium's CPU "
             "throttling, as DevTools offers it); the app and chromium's other threads keep this machine's speed. "
             "Each cell: the median of the readings of the row's runs pooled, and in brackets the medians of their "
             "three parts: the page before its request, the request to its reply, the page after the reply (ms). "
             "Target 150 ms (issue 24). A slowed page's credit presses are not a slower processor's: the throttling "
             "takes CPU from the app.", "",
             "| Runs | Page slowed | Chunk edit | Curve click | Objectives map click |", "|---|---|---|---|---|"]
    for label, app in groups:
        lines.append(f"| {label} ({len(app.get('rounds', [app]))} runs) | {app.get('slow_page', 1):g}x | "
                     + " | ".join(split_cell(app, key) for key in ("edit", "click", "map_click")) + " |")
    return [*lines, ""]


def sampling_against(now: dict, then: dict | None) -> list[str]:
    """Rows of the sampling figures beside the baseline commit's (`--baseline-sampling`: its runs of `workbench
    bench sampling`, this commit's benchmark, alternated with this commit's runs); empty without them."""
    if not then or "overhead" not in now:
        return []

    def overhead(s: dict) -> str:
        return (f"{100 * s['overhead']:+.2f} % over {s['repeats']} pairs (quartiles "
                + " / ".join(f"{100 * q:+.1f}" for q in s["overhead_quartiles"]) + " %)")

    rows = [f"| Sampling overhead (`workbench bench sampling`, pairs of its runs pooled) | {overhead(now)} | "
            f"{overhead(then)} |"]
    if "recorder_ms_per_step" in now and "recorder_ms_per_step" in then:
        rows.append("| The recorder's own work without the model (median of runs) | "
                    + " | ".join(f"{s['recorder_ms_per_step']:.2f} ms per step, {100 * s['recorder_share']:.1f} % of "
                                 "the plain loop" for s in (now, then)) + " |")
    return rows


def credit_lines(credit: dict, default_heap: dict | None = None) -> list[str]:
    """What a credit measurement at the defaults costs, and the two settings that set it (`default_heap`: the
    same benchmark under glibc's own allocator settings)."""
    if not credit:
        return ["Not measured.", ""]
    before = "" if not default_heap else (
        f": with its defaults (`WORKBENCH_HEAP=default workbench bench credit`) the same measurement faulted in "
        f"{default_heap['credit_page_faults']:,} pages")
    return [f"`workbench bench credit`: {credit['credit_s']:.2f} s with continuations in "
            f"{credit.get('precision', 'float32')}, {credit.get('credit_page_faults', '?')} page faults in one "
            f"measurement; ode estimator {credit['ode_s']:.2f} s, x0 {credit['x0_s']:.2f} s; re-chunk "
            f"{credit['rechunk_ms']:.1f} ms.", "",
            "Two settings set this figure. The continuations run in bfloat16 where the CPU or GPU computes it "
            "natively (`precision=auto`, docs/methods.md \"Continuation numerics\": about half the time; "
            "`experiments/precision.py` measures what it changes). And glibc reuses freed memory instead of "
            f"faulting fresh pages in for every temporary tensor (`workbench/core/heap.py`){before}.", ""]


def app_note(f: dict) -> list[str]:
    """Where the browser figures come from when `--app` replaced those of `bench/all.py`, with both runs' figures."""
    inner = f.get("app_bench_all")
    if not inner:
        return []
    where = ", made next to the baseline below" if f.get("baseline") else ""
    return [f"The browser figures above are from separate `bench/browser.py` runs{where}; the same script "
            f"inside `bench/all.py` gave chunk edit {median(inner.get('edit_ms')):.0f} ms, "
            f"curve click {median(inner.get('click_ms')):.0f} ms, credit {credit_presses(inner) or 0:.2f} s (median of "
            f"its presses; the first {inner.get('credit_s', 0):.2f} s). Both are kept: the spread between them is this "
            "machine's, not the code's.", ""]


def speed_line(f: dict) -> list[str]:
    """How fast the machine ran when these figures were taken. This machine class comes on an AMD EPYC or a 2 GHz
    Intel Xeon (the loop below: 50-70 trajectories/s on the EPYC, 26-28 on the Xeon, 2026-12-02) and drifts by tens
    of percent between hours; every timed figure moves with it, so pages compare only at a like speed."""
    plain = f.get("sampling", {}).get("plain_traj_per_s")
    if plain is None:
        return []
    return [f"Machine speed during these runs: the plain diffusers Euler loop of `bench sampling` (G=16, T=16, "
            f"the same code every time) made {plain:.1f} trajectories/s; every timed figure below scales with it."]


def watching_lines(f: dict) -> list[str]:
    """The crosses lesson started and watched from the Fine-tune tab (`bench/browser.py --lesson`): its minutes
    and the CPU that the app, the trainer and chromium spent meanwhile, beside an earlier commit's when given."""
    now = f.get("app", {})
    runs = [(commit, app) for commit, app in ((now.get("lesson_commit") or "this commit", now),
                                              *((now.get("lesson_commit") or "this commit", more)
                                                for more in f.get("lesson_also", ())),
                                              *((f.get("lesson_baseline_commit"), base)
                                                for base in f.get("lesson_baseline", ())))
            if "lesson_cpu_s" in app]
    if not runs:
        return []
    lines = ["The two cores as a learner uses them: the crosses lesson started from the Fine-tune tab and watched "
             "there to its end (`bench/browser.py --lesson`; CPU-seconds per second of the lesson, read from "
             "/proc every 0.5 s):", "",
             "| Commit | Lesson | App | Trainer | Chromium |", "|---|---|---|---|---|"]
    for commit, app in runs:
        cpu, span = app["lesson_cpu_s"], app["lesson_s"]
        lines.append(f"| {commit} | {span:.0f} s | " + " | ".join(f"{cpu[k] / span:.2f}" for k in
                                                                 ("app", "trainer", "chromium")) + " |")
    return [*lines, ""]


def render(f: dict) -> str:
    per = f.get("threads", {}).get("seconds_per_iteration", {})
    lines = [
        "# Performance",
        "",
        "Generated by `bench/report.py` from `python bench/all.py --json FILE --tests` "
        f"({f.get('date') or 'page written ' + date.today().isoformat()}). Machine: {machine(f)}; "
        f"{f.get('cores')} cores, torch {f.get('torch')}.",
        "Targets are issue 24's. Rerun the two commands in the script's docstring to refresh this page; "
        "figures taken while other work runs on the machine are not comparable.",
        *speed_line(f),
        "",
        "| Figure | Measured | Target | Holds | How |",
        "|---|---|---|---|---|",
        *rows(f),
        "",
        *app_note(f),
        *baseline_lines(f),
        *slow_page_lines(f),
        "## Sharing two cores with a fine-tune",
        "",
        "Seconds per training iteration (median, `bench/train_threads.py`):",
        "",
        "| Case | s / iteration |",
        "|---|---|",
        *[f"| {k.replace('_', ', ')} | {'timed out' if v is None else f'{v:.2f}'} |" for k, v in per.items()],
        "",
        "`auto` is the default of `workbench train` and of the app's fine-tunes: threads from the cores other "
        "processes leave free, re-measured every iteration (`workbench/core/threads.py`), and OpenMP threads that "
        "sleep rather than spin while they wait (`OMP_WAIT_POLICY=PASSIVE`). `cores` is the old default: one "
        "spinning thread per core.",
        "",
        *watching_lines(f),
        "## Credit",
        "",
        *credit_lines(f.get("credit", {}), f.get("credit_default_heap")),
        "## Training",
        "",
    ]
    train = f.get("train", {})
    if train:
        lines.append(f"`bench/train_speed.py`: {train['seconds_per_iteration']:.2f} s per chunk_grpo iteration "
                     f"(threads {'/'.join(map(str, train.get('threads', [])))}), trainer / raw compute "
                     f"{train['ratio']:.2f}.")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("figures", help="the JSON file of `python bench/all.py --json`")
    p.add_argument("--lesson", default=None, help="the JSON of `bench/browser.py --lesson` (its memory after "
                   "the lesson and the lesson's duration)")
    p.add_argument("--app-one-thread", nargs="+", default=None, help="the JSON of `bench/browser.py --threads 1` "
                   "(several: rounds, pooled)")
    p.add_argument("--baseline-one-thread", nargs="+", default=None, help="the same on the baseline commit")
    p.add_argument("--tests", nargs="+", default=None, help="the JSON of `bench/tests.sh OUT.json` (several: "
                   "the first names the page's commit; the figure is the median of that commit's passing runs, the "
                   "others are listed beside it)")
    p.add_argument("--baseline", nargs="+", default=None, help="the JSON of `bench/browser.py` on an earlier "
                   "commit (several: runs of the same hour as --app's, pooled)")
    p.add_argument("--baseline-commit", default="?", help="that commit")
    p.add_argument("--lesson-commit", default=None, help="the commit the lesson's memory was measured on, if older")
    p.add_argument("--lesson-also", nargs="+", default=(), help="the JSON of further `bench/browser.py "
                   "--lesson` runs of the lesson's commit: their CPU in rows of their own")
    p.add_argument("--lesson-baseline", nargs="+", default=(), help="the JSON of `bench/browser.py --lesson` "
                   "on an earlier commit (this commit's bench/browser.py): its lessons' CPU beside this one's")
    p.add_argument("--lesson-baseline-commit", default="?", help="that commit")
    p.add_argument("--app", nargs="+", default=None, help="the JSON of a separate `bench/browser.py` run to "
                   "report instead of bench/all.py's (its figures are kept beside; several: rounds, pooled)")
    p.add_argument("--heap-default", default=None, help="the JSON of `WORKBENCH_HEAP=default workbench bench credit "
                   "--json FILE` (glibc's own allocator settings)")
    p.add_argument("--sampling", nargs="+", default=None, help="the JSON of further `workbench bench sampling "
                   "--json` runs: their pairs are pooled with bench/all.py's")
    p.add_argument("--baseline-sampling", nargs="+", default=None, help="the JSON of `workbench bench sampling "
                   "--json` runs on the baseline commit (this commit's bench), pooled beside this commit's")
    p.add_argument("--slow-page", nargs="+", action="append", default=[], metavar="LABEL JSON",
                   help="a row of the slowed page's table: its label, then the JSON of `bench/browser.py "
                        "[--slow-page F]` runs pooled (repeat the option for each row)")
    p.add_argument("--out", default=str(ROOT / "docs" / "performance.md"))
    args = p.parse_args()
    figures = json.loads(Path(args.figures).read_text())
    if args.app:
        figures["app_bench_all"] = figures.get("app", {})
        figures["app"] = pooled(args.app)
    if args.lesson:
        lesson = json.loads(Path(args.lesson).read_text())
        app = figures.setdefault("app", {})
        app.setdefault("rss_mb", {})["lesson"] = lesson["rss_mb"]["lesson"]
        app["lesson_s"] = lesson["lesson_s"]
        app["lesson_commit"] = args.lesson_commit
        if "lesson_cpu_s" in lesson:
            app["lesson_cpu_s"] = lesson["lesson_cpu_s"]
    figures["lesson_also"] = [json.loads(Path(path).read_text()) for path in args.lesson_also]
    if args.lesson_baseline:
        figures["lesson_baseline"] = [json.loads(Path(path).read_text()) for path in args.lesson_baseline]
        figures["lesson_baseline_commit"] = args.lesson_baseline_commit
    if args.app_one_thread:
        figures["app_one_thread"] = pooled(args.app_one_thread)
    if args.baseline_one_thread:
        figures["baseline_one_thread"] = pooled(args.baseline_one_thread)
    if args.tests:
        runs = [json.loads(Path(path).read_text()) for path in args.tests]
        figures["tests"] = {**runs[0], "other_runs": runs[1:]}
    if args.baseline:
        figures["baseline"] = pooled(args.baseline)
        figures["baseline_commit"] = args.baseline_commit
    if args.sampling:
        figures["sampling"] = pooled_sampling(figures["sampling"], args.sampling)
    if args.baseline_sampling and not args.baseline:
        raise SystemExit("--baseline-sampling goes in the table of --baseline: give the baseline's browser runs too")
    if args.baseline_sampling:
        first, *rest = args.baseline_sampling
        figures["baseline_sampling"] = pooled_sampling(json.loads(Path(first).read_text())["sampling"], rest)
    if args.heap_default:
        figures["credit_default_heap"] = json.loads(Path(args.heap_default).read_text())["credit"]
    for label, *paths in args.slow_page:
        if not paths:
            raise SystemExit(f"--slow-page {label!r}: give the label, then the JSON of its runs")
        figures.setdefault("slow_page_runs", []).append((label, pooled(paths)))
    Path(args.out).write_text(render(figures))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
