"""The buttons' time estimates come from this machine's own timings (`ui.timing`), never from a guess."""

from __future__ import annotations

from workbench.rl.credit_estimators import continuation_cost, grid_rows
from workbench.ui import timing
from workbench.ui.learn import LEARN, example_text


def test_an_estimate_is_the_work_times_the_rate_measured_here(wb, sampled):
    wb.timing = None
    assert "not measured on this machine yet" in example_text(True, wb)  # nothing assumed before a timing
    timing.probe(wb)
    per_eval, how = wb.timing
    assert per_eval > 0 and how == "timed as the model loaded"
    timing.record(wb, sampled.credit)  # a credit measurement made here: its own seconds per evaluation
    per_eval, how = wb.timing
    assert per_eval == sampled.credit.cost["seconds"] / sampled.credit.cost["nfe"]
    evals = timing.evaluations(LEARN["group"], LEARN["steps"], LEARN["continuations"])
    assert evals == 8 * 16 + continuation_cost(grid_rows(8, range(1, 16), range(4)), 16)
    text = example_text(True, wb)
    assert f"({evals} image evaluations at {1000 * per_eval:.1f} ms each, from the last credit measurement here" in text
    seconds = evals * per_eval
    assert (f"about {seconds:.0f} s on this machine" if seconds < 90 else f"about {seconds / 60:.1f} minutes") in text
