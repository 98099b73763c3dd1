"""How long a fine-tuning run will take on this machine, said in the Fine-tune tab before Start.

The run's work is counted from its settings (`train.run_cost`: image evaluations of the rollouts and held-out
evaluations, trained transitions of the updates) and multiplied by three rates measured on this machine:

- from the newest run of this app's model on disk with timed iterations: its own seconds per rollout image
  evaluation (`time/iteration_s` less `time/update_s`, so its rewards and bookkeeping are in), per trained
  transition (`time/update_s`) and per held-out image evaluation (`time/eval_s`), the timings the running ETA
  (`ui.eta`) reads too;
- before any run: the rates the app times as the model loads (`ui.timing`): one sampled image evaluation
  (`probe`) for the rollouts and evaluations, one inner update of the Objectives tab (`probe_objectives`) for a
  trained transition;
- before either (a real model the app has not timed yet): the figure shipped for the crosses lesson, labelled as
  such, or that the machine is not timed yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.core.errors import WorkbenchError
from workbench.train.config import TrainConfig
from workbench.train.run_cost import RunWork, run_work
from workbench.ui.eta import RECENT  # a run's last iterations whose timings give its rates: the running ETA's
from workbench.ui.guard import escape
from workbench.ui.timing import shown

SHIPPED = {"crosses": "about 6 minutes on a fast 2-core laptop and 13 on one half as fast (270 CPU-s of training "
                      "and 30 of evaluations on one thread, docs/crosses.md), measured before the lesson's KL term, "
                      "which adds about a fifth"}
# the CPU-s by experiments/crosses.py; the minutes by bench/browser.py --lesson on this machine class's two
# processors, an AMD EPYC and a 2 GHz Intel Xeon (docs/performance.md, docs/performance-xeon.md)


@dataclass
class Rates:
    """Seconds of each unit of a run's work on this machine, and where they were measured."""

    rollout: float  # per image evaluation of a rollout
    update: float  # per trained transition (a forward and a backward)
    evaluation: float  # per image evaluation of a held-out evaluation
    how: str


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def run_rates(wb, runs: list | None = None) -> Rates | None:
    """The rates of the newest run of this app's model whose iterations are timed, or None."""
    from workbench.train.store import list_runs

    try:
        runs = list_runs(wb.jobs.root) if runs is None else runs
    except WorkbenchError:
        return None
    for run in runs:
        if run.config.get("model") != wb.model_path:
            continue
        timed = [r for r in run.metrics if isinstance(r.get("iteration"), int) and r["iteration"] > 0
                 and all(isinstance(r.get(k), (int, float)) for k in ("time/iteration_s", "time/update_s"))][-RECENT:]
        evals = [r["time/eval_s"] for r in run.metrics if isinstance(r.get("time/eval_s"), (int, float))]
        if not timed or not evals:
            continue
        try:
            config = TrainConfig.from_dict(run.config)
            work = run_work(config)
        except (WorkbenchError, TypeError, ValueError):  # an older or damaged config: the next run
            continue
        if work.uncounted:  # its iterations hold work no rate here stands for (a critic, look-aheads, refills)
            continue
        per_iteration = work.sampled / config.iterations, work.trained / config.iterations
        rollout = _mean([r["time/iteration_s"] - r["time/update_s"] for r in timed]) / per_iteration[0]
        update = _mean([r["time/update_s"] for r in timed]) / max(per_iteration[1], 1)
        evaluation = _mean(evals) / max(work.evaluated / max(work.evaluations, 1), 1)
        return Rates(rollout, update, evaluation, f"from the timings of run {escape(run.name)} here")
    return None


def app_rates(wb) -> Rates | None:
    """The rates the app timed as the model loaded or since (`ui.timing`), or None before both are timed."""
    timing, objectives = getattr(wb, "timing", None), getattr(wb, "objectives_timing", None) or {}
    if timing is None or "update" not in objectives:
        return None
    update = objectives["update"][0]
    return Rates(timing[0], update, timing[0], f"{timing[1]}: {1000 * timing[0]:.1f} ms per image evaluation, "
                                               f"{1000 * update:.1f} ms per trained transition; no run timed here yet")


def run_seconds(work: RunWork, rates: Rates) -> float:
    """Seconds of a run's work at `rates`."""
    rollout_evals = work.sampled  # the KL reference's evaluations run beside the update, at the rollout's pace
    return rollout_evals * rates.rollout + work.trained * rates.update + work.evaluated * rates.evaluation


def run_time(wb, config: TrainConfig, lesson: str | None = None, runs: list | None = None) -> str:
    """'about N minutes on this machine (how)', or the shipped figure of a lesson labelled as such, or that the
    machine is not timed yet (read after 'Time: '). runs: the runs on disk, where the caller has listed them."""
    rates = run_rates(wb, runs) or app_rates(wb)
    if rates is None:
        if lesson in SHIPPED and as_shipped(config, lesson):
            return f"not measured on this machine yet; the figure shipped with the lesson: {SHIPPED[lesson]}"
        return "not measured on this machine yet (the app times the model as it loads: reload the page)"
    work = run_work(config)
    left_out = f"; not counted: {', '.join(work.uncounted)}" if work.uncounted else ""
    return (f"**about {shown(run_seconds(work, rates))}** on this machine for {config.iterations} iterations and "
            f"{work.evaluations} held-out evaluations ({rates.how}; plus a few seconds to start{left_out}; a busier "
            "machine takes longer)")


def as_shipped(config: TrainConfig, lesson: str) -> bool:
    """Whether `config` does the work of the lesson's preset, the run the shipped figure timed."""
    from workbench.train import preset

    return run_work(config) == run_work(preset(lesson))
