"""The thread policy for shared cores (workbench/core/threads.py): its rule, its measurement, where it is used."""

from __future__ import annotations

import subprocess
import sys
import threading
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from workbench.core import threads as th
from workbench.core.threads import ThreadGovernor, threads_for


@pytest.mark.parametrize("cores, busy, maximum, expected", [
    (2, 0.0, None, 2), (2, 1.0, None, 1), (2, 0.3, None, 2), (2, 0.6, None, 1), (2, 2.0, None, 1),
    (2, 5.0, None, 1), (8, 2.6, None, 5), (8, 2.6, 4, 4), (1, 0.0, None, 1), (4, -1.0, None, 4)])
def test_threads_for_takes_the_cores_others_leave_free(cores, busy, maximum, expected):
    assert threads_for(cores, busy, maximum) == expected


class FakeClock:
    """/proc/stat and os.times() of a machine where 'others' busy cores run beside this process's work."""

    def __init__(self):
        self.t, self.machine, self.own = 100.0, 0.0, 0.0

    def advance(self, seconds: float, others: float, own: float) -> None:
        self.t += seconds
        self.machine += seconds * (others + own)
        self.own += seconds * own


def test_governor_follows_the_other_processes_load(monkeypatch):
    clock, applied = FakeClock(), []
    monkeypatch.setattr(th, "_cpu_seconds", lambda: (clock.machine, clock.own))
    monkeypatch.setattr(th.time, "monotonic", lambda: clock.t)
    monkeypatch.setattr(th.time, "sleep", lambda s: clock.advance(s, 0.0, 0.0))
    governor = ThreadGovernor(cores=2, apply=applied.append)
    assert governor.threads == 2 and applied == [2]
    clock.advance(3.0, others=1.0, own=1.0)  # a busy neighbour appears: 1 core of others
    assert governor.update() == 1 and applied == [2, 1]
    clock.advance(3.0, others=0.9, own=1.0)  # still there: no new call into torch
    assert governor.update() == 1 and applied == [2, 1]
    clock.advance(3.0, others=0.1, own=1.9)  # it went quiet: take the second core back; own work never counts
    assert governor.update() == 2 and applied == [2, 1, 2]


def test_governor_without_proc_stat_keeps_its_threads(monkeypatch):
    monkeypatch.setattr(th, "_cpu_seconds", lambda: None)
    governor = ThreadGovernor(cores=2, apply=lambda n: None)
    assert governor.threads == 2 and governor.update() == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat")
def test_others_busy_sees_a_real_busy_process():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert ThreadGovernor.others_busy(0.5) > 0.5  # one core spinning (more if the machine is loaded)
    finally:
        busy.kill()
        busy.wait()


def test_train_flag_threads(capsys):
    """A run's thread count is a setting (TrainConfig.threads), a whole number: no `auto` that follows the load."""
    from workbench.cli.main import main

    assert main(["train", "--threads", "0", "--iterations", "1"]) == 2
    assert "threads must be in 1..1024, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--threads", "auto", "--iterations", "1"])
    assert "--threads: expected an integer, got 'auto'" in capsys.readouterr().err


def test_the_app_yields_cores_to_its_fine_tune(tmp_path, monkeypatch):
    from workbench.ui.workbench import Workbench

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    wb = Workbench(device="cpu", runs_root=str(tmp_path))
    seen = []

    def handler():  # Gradio runs handlers in worker threads; the setting is per thread under OpenMP
        seen.append(wb.share_cores())
        seen.append(torch.get_num_threads())

    wb.jobs.training = lambda: True
    t = threading.Thread(target=handler)
    t.start()
    t.join()
    wb.jobs.training = lambda: False
    t = threading.Thread(target=handler)
    t.start()
    t.join()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # an explicit limit holds when no fine-tune runs too
    t = threading.Thread(target=handler)
    t.start()
    t.join()
    assert seen == [1, 1, th.app_threads(), th.app_threads(), 1, 1]


def test_the_app_leaves_one_core_to_its_browser():
    assert [th.app_threads(cores) for cores in (1, 2, 4, 16)] == [1, 1, 3, 15]
    assert th.app_threads() == max(1, th.cpu_count() - 1)
    assert [th.app_threads(cores, batched=True) for cores in (1, 2, 4, 16)] == [1, 2, 4, 16]  # the credit's passes


def in_threads(*steps) -> list:
    """Run each callable in a fresh thread, as Gradio runs a handler (and each step of a generator handler)."""
    out = []
    for step in steps:
        t = threading.Thread(target=lambda step=step: out.append(step()))
        t.start()
        t.join()
    return out


@pytest.fixture
def four_cores(tmp_path, monkeypatch):
    """A Workbench on a machine of 4 cores, so that every count differs (3 for handlers, 4 batched, 1 training)."""
    from workbench.ui.workbench import Workbench

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(th, "cpu_count", lambda: 4)
    return Workbench(device="cpu", runs_root=str(tmp_path))


def test_the_credit_computes_on_every_core_and_the_thread_returns_to_its_share(four_cores, monkeypatch):
    import workbench.rl.credit as credit_module
    from workbench.ui import handlers as h
    from workbench.ui.state import Session

    wb, seen = four_cores, []
    wb.policy = lambda key=None: wb.share_cores() and None  # as the real one: it sets the handlers' count

    def measure(*args, **kwargs):
        seen.append(torch.get_num_threads())
        raise RuntimeError("measured")  # the handler's status says so; the count is restored all the same

    monkeypatch.setattr(credit_module, "measure_credit", measure)
    session = Session(group=SimpleNamespace(config=SimpleNamespace(seed=0)), reward_spec="adherence")

    def press():
        h.attribute(wb, 4, session)
        return torch.get_num_threads()

    after = in_threads(press)
    wb.jobs.training = lambda: True  # a fine-tune of this app runs: the credit takes one core
    after += in_threads(press)
    assert seen == [4, 1] and after == [3, 1]


def test_no_handler_lowers_the_count_while_a_batched_computation_runs(four_cores):
    # part of torch's count is the process's (MKL's): another handler setting its own count lower would slow the
    # batched computation in flight to about one thread (140b72a:docs/perf-data/epyc/README.md)
    wb, inside, done = four_cores, threading.Event(), threading.Event()

    def credit():
        with wb.batched_threads():
            inside.set()
            done.wait(10)
        return torch.get_num_threads()

    running = threading.Thread(target=credit)
    running.start()
    assert inside.wait(10)
    during = in_threads(wb.share_cores, wb.share_cores)
    done.set()
    running.join()
    assert during == [4, 4] and in_threads(wb.share_cores) == [3]


def test_each_refinement_round_computes_on_every_core_in_its_own_thread(four_cores):
    from workbench.ui import handlers as h

    wb = four_cores

    def rounds():
        for k in range(3):
            yield k, torch.get_num_threads()  # the count this round computed with, in the thread that asked

    items = h._batched(wb, rounds())
    steps = in_threads(*[lambda: (next(items), torch.get_num_threads())] * 3)
    assert steps == [((k, 4), 3) for k in range(3)]
    assert in_threads(lambda: next(items, "done")) == ["done"]


def test_training_processes_get_passive_waiting(tmp_path, monkeypatch):
    from workbench.ui.jobs import JobManager

    captured = {}

    class Stop(Exception):
        pass

    def popen(argv, **kw):
        captured.update(kw["env"])
        raise Stop

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.setattr(subprocess, "Popen", popen)
    from workbench.train.config import TrainConfig

    with pytest.raises(Stop):
        JobManager(tmp_path, "cpu").start(TrainConfig(iterations=1))
    assert captured["OMP_WAIT_POLICY"] == "PASSIVE" and captured["GOMP_SPINCOUNT"] == "10000"


def test_the_look_ahead_computes_on_every_core_and_the_critic_on_the_handlers_share(four_cores, monkeypatch):
    import workbench.train.step_compare as sc

    wb, seen = four_cores, {}
    t = 4
    group = SimpleNamespace(config=SimpleNamespace(sde_mask=lambda: torch.ones(t, dtype=torch.bool)))

    def critic(*args, **kwargs):
        seen["critic"] = torch.get_num_threads()
        return torch.zeros(3, t), "fitted"

    def look_ahead(self, grp, rewards):
        seen["look-ahead"] = torch.get_num_threads()
        return torch.zeros(3, t + 1), 0

    monkeypatch.setattr(sc, "critic_advantages", critic)
    monkeypatch.setattr(sc.LookaheadCredit, "values", look_ahead)

    def handler():
        wb.share_cores()
        out = sc.per_step_advantages(None, group, torch.zeros(3), ["ppo", "dense_grpo"], None,
                                     batched=wb.batched_threads)
        return sorted(out), torch.get_num_threads()

    assert in_threads(handler) == [(["dense_grpo", "ppo"], 3)]
    assert seen == {"critic": 3, "look-ahead": 4}


def test_the_objectives_and_the_advantage_comparison_hand_the_look_ahead_the_batched_threads(four_cores,
                                                                                           monkeypatch):
    import workbench.train.step_compare as sc
    from workbench.ui import objectives as ob
    from workbench.ui import step_handlers as sh
    from workbench.ui.state import Session

    wb, given = four_cores, []
    wb.policy = lambda key=None: None
    import workbench.train.explained as ex

    per_step = lambda *args, **kwargs: given.append(kwargs["batched"]) or {}  # noqa: E731
    monkeypatch.setattr(sc, "per_step_advantages", per_step)
    monkeypatch.setattr(ex, "per_step_advantages", per_step)  # the Objectives tab's advantages (train.explained)
    monkeypatch.setattr(sc, "compare_step_advantages", lambda *args, **kwargs: given.append(kwargs["batched"]) or 1 / 0)
    monkeypatch.setattr(ex, "gfpo_scores", lambda group: None)
    session = Session(group=SimpleNamespace(config=SimpleNamespace(seed=0)), reward_spec="adherence",
                      reference=object())
    ob._advantages(wb, session.group, replace(session, rewards=torch.tensor([0.0, 1.0])), ["step_grpo"])
    sh.compare_advantages(wb, None, session)  # the stub's ZeroDivisionError: the handler's status reports it
    assert given == [wb.batched_threads, wb.batched_threads]
