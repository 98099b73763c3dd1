"""docs/performance.md is rendered from the benchmark's JSON: every figure in its row, targets judged."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from pytest import approx

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "performance_report.py"


def load(script: Path = SCRIPT):
    spec = importlib.util.spec_from_file_location(script.stem, script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rows_carry_the_figures_and_judge_the_targets():
    report = load()
    page = report.render({
        "cores": 2, "torch": "2.13.0",
        "app": {"edit_ms": [120.0, 140.0, 300.0], "click_ms": [180.0, 190.0, 200.0], "credit_s": 5.5,
                "map_click_ms": [130.0, 160.0, 170.0], "rss_mb": {"generate_credit": 650.0},
                "memory_mb": {"generate_credit": {"rss": 650.0, "anon": 500.0, "file": 150.0}}},
        "sampling": {"overhead": 0.031, "overhead_quartiles": (0.01, 0.05), "repeats": 9, "plain_traj_per_s": 55.04},
        "threads": {"slowdown_auto": 1.4, "seconds_per_iteration": {"quiet_auto": 2.0, "busy_cores": None}},
        "tests": {"make_test_s": 290, "setup_s": 15, "summary": "720 passed in 200s",
                  "cpu": "Intel(R) Xeon(R) Processor"}})
    lines = {line.split(" | ")[0].lstrip("| "): line for line in page.splitlines() if line.startswith("| ")}
    assert "| 140 ms | ≤ 150 ms | yes |" in lines["Chunk edit, Enter to updated plots (median)"]
    assert "| 190 ms | ≤ 150 ms | **no** |" in lines["Curve click to updated plots (median)"]
    assert "| 160 ms | ≤ 150 ms | **no** |" in lines["Objectives map click to updated cell (median)"]
    assert "| 650 MB | ≤ 700 MB | yes |" in lines["App memory after Generate + credit"]
    assert "(500 MB allocated by the app, 150 MB of pages of files it maps" in lines[
        "App memory after Generate + credit"]  # the split the run recorded
    assert "not measured" in lines["App memory after a lesson run from the app"]
    assert "| 3.10 % | ≤ 5 % | yes |" in lines["Sampling overhead vs a plain diffusers Euler loop (median)"]
    assert "+1.0 %/+5.0 %" in lines["Sampling overhead vs a plain diffusers Euler loop (median)"]
    assert "| 1.40 x | ≤ 2 x | yes |" in lines["Training next to a busy process / quiet (auto threads)"]
    assert "| busy, cores | timed out |" in page
    assert "set-up 15 s, 720 passed in 200s, on Intel(R) Xeon(R) Processor" in page  # the processor the run had
    assert "Euler loop of `bench sampling` (G=16, T=16, the same code every time) made 55.0 trajectories/s" in page


def test_a_baseline_commit_gets_its_own_table_of_the_same_hour():
    report = load()
    page = report.render({"cores": 2, "torch": "2.13.0",
                          "app": {"edit_ms": [200.0, 210.0, 220.0], "click_ms": [230.0], "credit_s": 8.0,
                                  "generate_s": 5.0},
                          "baseline": {"edit_ms": [250.0, 260.0], "click_ms": [270.0], "credit_s": 8.4},
                          "baseline_commit": "1887f9b"})
    assert "## Against the previous commit, same hour" in page
    assert "| Chunk edit (median) | 210 ms | 255 ms |" in page
    assert "| Curve click (median) | 230 ms | 270 ms |" in page
    assert "| Credit at the defaults (median of presses) | 8.00 s | 8.40 s |" in page
    assert "Generate G=8, T=16" not in page, "a figure the baseline lacks got a row"
    assert "same hour" not in report.render({"cores": 2, "torch": "2.13.0"})


def test_rounds_are_pooled_and_every_press_of_credit_counts(tmp_path):
    report = load()
    runs = [{"edit_ms": [100.0, 110.0, 120.0], "click_ms": [140.0], "credit_s": 6.5, "credit_again_s": [5.0, 5.2],
             "generate_s": 4.0, "rss_mb": {"generate_credit": 620.0}},
            {"edit_ms": [130.0, 140.0, 150.0], "click_ms": [160.0], "credit_s": 5.8, "credit_again_s": [4.8, 5.1],
             "generate_s": 5.0, "rss_mb": {"generate_credit": 640.0}, "map_click_ms": [90.0, 110.0]}]
    paths = []
    for n, run in enumerate(runs):
        paths.append(tmp_path / f"run{n}.json")
        paths[-1].write_text(__import__("json").dumps(run))
    app = report.pooled([str(p) for p in paths])
    assert app["edit_ms"] == [100.0, 110.0, 120.0, 130.0, 140.0, 150.0] and app["rss_mb"] == runs[0]["rss_mb"]
    assert report.presses(app) == [6.5, 5.0, 5.2, 5.8, 4.8, 5.1] and report.credit_presses(app) == 5.15
    assert report.round_medians(app, "edit_ms") == " (rounds: 110 / 140)"
    assert report.round_medians(app, "credit") == " (rounds: 5.2 / 5.1)"
    assert app["map_click_ms"] == [90.0, 110.0] and report.round_medians(app, "map_click_ms") == " (rounds: 100)"
    assert "first press of each run 6.5, 5.8 s" in report.presses_note(app)
    assert "first render" not in report.presses_note(app)  # runs from before bench_app timed the tab apart
    opened = report.pooled([str(p) for p in paths[:1]]) | {"attribution_open_s": 2.04}
    assert report.presses_note(opened).endswith("the Attribution tab's first render before it, timed apart: 2.0 s)")
    spent = report.pooled([str(p) for p in paths[:1]]) | {"credit_cpu_per_s": {"app": 0.964, "chromium": 0.215}}
    assert report.presses_note(spent).endswith("while the later presses computed: the app 0.96, chromium 0.21)")
    assert "CPU-seconds" not in report.presses_note(app)  # runs from before bench_app read it
    assert report.pooled([str(paths[0])]) == runs[0]  # one run stays as it is
    lines = {line.split(" | ")[0].lstrip("| "): line for line in report.render(
        {"cores": 2, "torch": "2.13.0", "app": app}).splitlines() if line.startswith("| ")}
    assert "| 125 ms | ≤ 150 ms | yes |" in lines["Chunk edit, Enter to updated plots (median)"]
    assert "| 5.15 s | ≤ 6 s | yes |" in lines["Credit at the defaults in the browser"]


def test_sampling_runs_are_pooled_pair_by_pair(tmp_path):
    report = load()
    first = {"overhead": 0.02, "pair_overheads": [0.0, 0.02, 0.04], "repeats": 3}
    other = tmp_path / "sampling.json"
    other.write_text(__import__("json").dumps({"sampling": {"overhead": 0.07, "pair_overheads": [0.06, 0.07, 0.08],
                                                            "repeats": 3}}))
    sampling = report.pooled_sampling(first, [str(other)])
    assert sampling["overhead"] == approx(0.05) and sampling["repeats"] == 6 and sampling["run_medians"] == [0.02, 0.07]
    assert sampling["overhead_quartiles"] == (0.02, 0.07)  # of the six pairs, not a median of medians
    line = next(line for line in report.render({"cores": 2, "torch": "2.13.0", "sampling": sampling}).splitlines()
                if line.startswith("| Sampling overhead"))
    assert "| 5.00 % | ≤ 5 % | yes |" in line
    assert "6 alternating pairs of 2 runs pooled (the runs' own medians +2.0 / +7.0 %), quartiles +2.0 %/+7.0 %" in line


def test_make_test_is_the_median_of_the_pages_commit():
    report = load()
    runs = [{"make_test_s": 304, "commit": "new"}, {"make_test_s": 290, "commit": "old"},
            {"make_test_s": 288, "commit": "new"}, {"make_test_s": 250, "commit": "new", "exit": 1},
            {"make_test_s": 301, "commit": "new"}]
    page = report.render({"cores": 2, "torch": "2.13.0", "tests": {**runs[0], "other_runs": runs[1:]}})
    line = next(line for line in page.splitlines() if line.startswith("| make test"))
    assert "| 301 s | ≤ 300 s | **no** |" in line  # 288, 301, 304: the old commit's and the failed run left out
    assert "median of 3 runs of commit new (304 s, 288 s, 301 s)" in line


def test_a_failing_make_test_is_no_figure():
    report = load()
    page = report.render({"cores": 2, "torch": "2.13.0",
                          "tests": {"make_test_s": 280, "exit": 2, "summary": "1 failed, 956 passed"}})
    line = next(line for line in page.splitlines() if line.startswith("| make test"))
    assert "**(tests failed)** | not measured |" in line and "1 failed, 956 passed" in line


def test_the_page_names_the_machine_and_day_the_figures_recorded():
    report = load()
    recorded = report.render({"cores": 2, "torch": "2.13.0", "machine": "AMD EPYC, 24 GiB memory, Linux 6.18",
                              "date": "2026-12-02"})
    assert "(2026-12-02). Machine: AMD EPYC, 24 GiB memory, Linux 6.18; 2 cores" in recorded
    older = report.render({"cores": 2, "torch": "2.13.0"})  # a file from before bench recorded its machine
    assert "(read when the page was written: the figures' file did not record its machine)" in older
    assert "(page written 20" in older  # nor its day


def test_bench_records_its_machine_and_day(monkeypatch):
    from workbench.cli import bench

    monkeypatch.setattr(bench.ThreadGovernor, "others_busy", staticmethod(lambda window_s: 0.0))
    monkeypatch.setattr(bench.torch, "set_num_threads", lambda threads: None)  # this test process's threads stay
    figures = bench.run("none", policy=None)
    assert figures["machine"] == bench.machine() and figures["machine"].split(",")[0].strip()
    assert len(figures["date"]) == 10 and figures["date"].startswith("20")


def test_the_memory_row_splits_only_what_a_run_recorded():
    report = load()
    assert report.memory_split({"rss_mb": {"generate_credit": 640.0}}) == ""  # a run from before the split
    assert report.memory_split({"memory_mb": {"generate_credit": {"rss": 640.0}}}) == ""  # psutil only: no split
    split = report.memory_split({"memory_mb": {"generate_credit": {"rss": 643.0, "anon": 501.4, "file": 141.6}}})
    assert split.startswith(" (501 MB allocated by the app, 142 MB of pages of files it maps"), split


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="the split is read from /proc")
def test_bench_app_splits_the_memory_it_reads():
    memory = load(SCRIPT.parent / "bench_app.py").memory_mb(os.getpid())  # this process, as bench_app reads the app
    assert memory["rss"] > 10 and memory["anon"] > 0 and memory["file"] > 0, memory
    assert memory["anon"] + memory["file"] == approx(memory["rss"], abs=memory["rss"] * 0.05)  # + shared memory


def test_bench_app_prints_the_medians_of_each_part_of_an_edit():
    parts = load(SCRIPT.parent / "bench_app.py").parts
    line = parts([[10.0, 30.0, 50.0], [14.0, 20.0, 70.0], None, [12.0, 25.0, 60.0]])  # None: no request seen
    assert line.strip() == ("of which (medians): the page before its request 12 ms, the request to its reply 25 ms, "
                            "the page after the reply 60 ms")
    assert "not split" in parts([None]) and "not split" in parts(None)  # a run from before the split


def test_the_slowed_page_table_pools_runs_and_gives_each_reading_in_three_parts(tmp_path):
    report = load()
    runs = []
    for n, (edits, splits) in enumerate((([140.0, 150.0], [[20.0, 20.0, 100.0], [24.0, 22.0, 104.0]]),
                                         ([160.0], [[28.0, 21.0, 111.0]]))):
        path = tmp_path / f"slow-{n}.json"
        path.write_text(json.dumps({"slow_page": 2.0, "edit_ms": edits, "edit_split_ms": splits,
                                    "click_ms": [170.0], "click_split_ms": [None]}))  # a click with no request seen
        runs.append(str(path))
    slowed = report.pooled(runs)
    assert slowed["edit_split_ms"] == [[20.0, 20.0, 100.0], [24.0, 22.0, 104.0], [28.0, 21.0, 111.0]]
    lines = report.slow_page_lines({"slow_page_runs": [("commit abc", slowed)]})
    assert "| commit abc (2 runs) | 2x | 150 ms (24 / 21 / 104) | 170 ms | – |" in lines
    assert report.slow_page_lines({}) == []  # no slowed runs: no section


def test_the_sampling_row_says_which_runs_timed_the_recorder_first(tmp_path):
    report = load()
    first = {"overhead": 0.05, "pair_overheads": [0.04, 0.05, 0.06]}  # bench all's run, before the order alternated
    later = tmp_path / "sampling.json"
    later.write_text('{"sampling": {"overhead": 0.02, "pair_overheads": [0.01, 0.02, 0.03], "order": "alternating"}}')
    pooled = report.pooled_sampling(first, [str(later)])
    assert report.fixed_order(pooled) == ("; 1 of the 2 runs timed the recorder first in every pair (before "
                                          "`workbench bench` alternated the order)")
    assert report.fixed_order({**first, "order": "alternating"}) == ""  # one run that alternated
    assert report.fixed_order(first).startswith("; the run timed the recorder first")
    assert report.fixed_order({}) == ""  # no sampling figure at all


def test_the_sampling_row_gives_the_recorders_own_work_of_the_runs_that_timed_it(tmp_path):
    report = load()
    first = {"overhead": 0.03, "pair_overheads": [0.03], "order": "alternating"}  # a run from before the figure
    later = [tmp_path / f"s{k}.json" for k in range(2)]
    for path, ms, share in zip(later, (0.2, 0.4), (0.01, 0.03)):
        path.write_text(__import__("json").dumps({"sampling": {"overhead": 0.02, "pair_overheads": [0.02],
                                                               "order": "alternating", "recorder_ms_per_step": ms,
                                                               "recorder_share": share}}))
    sampling = report.pooled_sampling(first, [str(p) for p in later])
    assert sampling["recorder_ms_per_step"] == approx(0.3) and sampling["recorder_share"] == approx(0.02)
    line = next(line for line in report.render({"cores": 2, "torch": "2.13.0", "sampling": sampling}).splitlines()
                if line.startswith("| Sampling overhead"))
    assert line.endswith("recorder's own work is 0.30 ms per step, 2.0 % of the plain loop's time with it |")
    assert report.recorder_part({"overhead": 0.03}) == ""


def test_the_baseline_table_gives_both_commits_sampling_figures():
    report = load()
    run = {"overhead": 0.03, "repeats": 4, "overhead_quartiles": (0.01, 0.05), "recorder_ms_per_step": 0.4,
           "recorder_share": 0.018}
    old = {**run, "overhead": 0.04, "recorder_ms_per_step": 0.6, "recorder_share": 0.027}
    page = report.render({"cores": 2, "torch": "2.13.0", "sampling": run, "baseline": {"edit_ms": [90]},
                          "app": {"edit_ms": [80]}, "baseline_commit": "abc1234", "baseline_sampling": old})
    lines = [line for line in page.splitlines() if line.startswith("| Sampling overhead (`workbench")
             or line.startswith("| The recorder's own work")]
    assert lines == ["| Sampling overhead (`workbench bench sampling`, pairs of its runs pooled) | +3.00 % over 4 "
                     "pairs (quartiles +1.0 / +5.0 %) | +4.00 % over 4 pairs (quartiles +1.0 / +5.0 %) |",
                     "| The recorder's own work without the model (median of runs) | 0.40 ms per step, 1.8 % of the "
                     "plain loop | 0.60 ms per step, 2.7 % of the plain loop |"]
    assert report.sampling_against(run, None) == []


def test_baseline_sampling_without_the_baseline_stops_with_a_message(tmp_path, monkeypatch):
    report = load()
    figures = tmp_path / "bench.json"
    figures.write_text('{"cores": 2, "sampling": {"overhead": 0.03, "pair_overheads": [0.03]}}')
    out = tmp_path / "page.md"
    monkeypatch.setattr("sys.argv", ["performance_report.py", str(figures), "--baseline-sampling", str(figures),
                                     "--out", str(out)])
    with pytest.raises(SystemExit, match="--baseline-sampling goes in the table of --baseline"):
        report.main()
    assert not out.exists()


def test_the_lesson_watched_from_the_app_gives_each_process_its_cpu_share():
    report = load()
    assert report.watching_lines({"app": {"lesson_s": 400.0}}) == []  # a lesson run from before the CPU was read
    lines = report.watching_lines({
        "app": {"lesson_s": 400.0, "lesson_cpu_s": {"app": 20.0, "trainer": 640.0, "chromium": 60.0}},
        "lesson_also": [{"lesson_s": 380.0, "lesson_cpu_s": {"app": 19.0, "trainer": 570.0, "chromium": 57.0}}],
        "lesson_baseline": [{"lesson_s": 500.0, "lesson_cpu_s": {"app": 170.0, "trainer": 600.0, "chromium": 120.0}}],
        "lesson_baseline_commit": "d68c350"})
    assert lines[-4:] == ["| this commit | 400 s | 0.05 | 1.60 | 0.15 |",
                          "| this commit | 380 s | 0.05 | 1.50 | 0.15 |",
                          "| d68c350 | 500 s | 0.34 | 1.20 | 0.24 |", ""]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="CPU time is read from /proc")
def test_bench_app_counts_the_cpu_of_the_app_and_of_what_it_starts():
    import subprocess
    import sys
    import time

    bench = load(SCRIPT.parent / "bench_app.py")
    with bench.CpuWatch(os.getpid()) as cpu:  # this process stands for the app
        child = subprocess.Popen([sys.executable, "-c", "import time\nwhile time.process_time() < 1: pass"])
        start = time.process_time()
        while time.process_time() - start < 0.5:
            pass
        child.wait()
    # the child's last half second can fall after the last reading
    assert cpu.seconds["app"] >= 0.45 and 0.45 <= cpu.seconds["trainer"] <= 1.2, cpu.seconds
