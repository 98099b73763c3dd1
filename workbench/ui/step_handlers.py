"""Attribution tab, "Per-step advantages": the session's group under GRPO's uniform A_i, ppo's GAE and dense_grpo's
look-ahead gains, beside its Monte-Carlo credit (`train/step_compare.py`). Handlers follow `handlers`:
`fn(wb, *inputs, session)`, last output a status line.
"""

from __future__ import annotations

import gradio as gr

from workbench.core.errors import WorkbenchError
from workbench.ui.guard import guarded, ok
from workbench.ui.state import Session
from workbench.ui.workbench import Workbench

FIT = "fit a critic on this group"  # the critic choice that needs no run
NO_COMPARISON = ("Measure Monte-Carlo credit above (estimator **mc**), then press **Compare advantages** to set "
                 "ppo's and dense_grpo's per-step advantages beside it.")


def critic_choices(wb: Workbench) -> list[tuple[str, str]]:
    """The critic menu: fit on the group, or any run or checkpoint (a ppo run's critic.pt is read)."""
    return [(FIT, FIT), *[(label, key) for label, key in wb.sources()[1:]]]


def _run_critic(wb: Workbench, key: str):
    """(critic state, its run's TrainConfig) of the checkpoint a picker key names."""
    from workbench.train.config import TrainConfig
    from workbench.train.store import RunStore, load_checkpoint

    source = wb.source(key)
    if source.run is None or source.checkpoint is None:
        raise WorkbenchError(f"{key} is not a run or one of its checkpoints: pick a ppo run, or fit a critic on "
                             "the group")
    critic = load_checkpoint(source.checkpoint).critic
    if critic is None:
        raise WorkbenchError(f"{source.checkpoint} holds no critic: only ppo runs train one (critic.pt); pick a ppo "
                             "run, or fit a critic on the group")
    return critic, TrainConfig.from_dict(RunStore(source.run).config())


def _table(cmp) -> str:
    lines = ["| advantage | same sign as the credit: determined cells | all cells | correlation | from |",
             "|---|---|---|---|---|"]
    for row in cmp.table():
        lines.append(f"| {row['method']} | {row['sign_agreement_determined']:.0%} of {row['determined_cells']} | "
                     f"{row['sign_agreement']:.0%} of {row['cells']} | {row['correlation']:+.2f} | {row['source']} |")
    return "\n".join(lines) + ("\n\nAgreement is measured on the trained steps of trajectories with A(i) ≠ 0; an x "
                               "marks a cell whose sign is against a determined credit.")


def empty_view() -> tuple:
    """(figure, text) of the section before any comparison."""
    from workbench.viz.plots import empty_figure

    return empty_figure("Per-step advantages", "measure credit, then compare advantages"), NO_COMPARISON


@guarded(3)
def step_advantages_view(wb: Workbench, session: Session):
    """Attribution opened, credit measured or refined -> (figure, agreement table, status): the session's comparison
    of the group's current credit, or the empty section (the last one showed another group's or measurement's
    numbers beside this one's, a new group with T = 2 beside a plot of 16 steps)."""
    from workbench.viz.step_advantages import step_advantage_figure

    cmp = session.step_comparison()
    return (*(empty_view() if cmp is None else (step_advantage_figure(cmp), _table(cmp))), gr.skip())


@guarded(4)
def compare_advantages(wb: Workbench, critic_from: str | None, session: Session, progress=gr.Progress()):
    """Compare advantages button -> (figure, agreement table, session, status)."""
    from dataclasses import replace

    from workbench.rewards import build_reward
    from workbench.train.config import TrainConfig
    from workbench.train.step_compare import compare_step_advantages
    from workbench.viz.step_advantages import step_advantage_figure

    if session.group is None:
        raise WorkbenchError("no group yet: generate one in the Generate tab first")
    if session.reference is None:
        raise WorkbenchError("no Monte-Carlo credit for this group yet: measure credit with the mc estimator first")
    critic, config = (None, TrainConfig()) if (critic_from or FIT) == FIT else _run_critic(wb, critic_from)
    policy = wb.policy(session.source)
    try:
        cmp = compare_step_advantages(policy, session.group, build_reward(session.reward_spec), session.reference,
                                      replace(config, seed=session.group.config.seed), critic,
                                      batched=wb.batched_threads)
    except (RuntimeError, KeyError) as err:  # a critic of another model: its shapes do not fit
        raise WorkbenchError(f"that run's critic does not fit this model ({str(err).splitlines()[0][:120]}); "
                             "pick a ppo run of the same model, or fit a critic on the group") from None
    where = cmp.notes["ppo"]
    session = replace(session, steps_compared=(session.reference.continuation_rewards, cmp))
    return step_advantage_figure(cmp), _table(cmp), session, ok(f"compared per-step advantages (ppo: {where})")
