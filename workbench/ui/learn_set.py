"""Learn's claim measured on a set of groups: what chunks change, over several held-out prompts, with its spread.

One example group is one instance; the claim "chunks lower the misattributed share" is a statement about many
groups. `measure_set` measures the Monte-Carlo credit of one group per held-out prompt (the settings of Learn's
example, with M=16 continuations and common random numbers, as docs/misattribution.md does) and re-chunks it
under a few schedules; the first 4 continuations of the same measurement give the rates at the example's M=4.
The result ships as workbench/data/learn_set.json, which this command regenerates:

    OMP_NUM_THREADS=1 python -m workbench.ui.learn_set            # 6 held-out prompts, about 4 minutes on one thread
    python -m workbench.ui.learn_set --prompts 2 --out /tmp/set.json

The groups, continuation seeds and numerics are those of experiments/misattribution.py's seed 0, so the M=16 rows
equal docs/misattribution.md's "Chunk schedules on determined cells" table.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.rl.credit import Z

SET_FILE = Path(__file__).resolve().parents[1] / "data" / "learn_set.json"
COMMAND = "python -m workbench.ui.learn_set"
SETTINGS = {"prompts": 6, "group": 8, "steps": 16, "noise_level": 0.7, "reward": "adherence", "continuations": 16,
            "crn": True, "precision": "float32", "z": Z}  # Learn's example at docs/misattribution.md's M and numerics
EXAMPLE_M = 4  # the example's continuations: the set's rates at this M come from its first 4 continuations
SCHEDULES = {"step": "every step its own chunk (step GRPO)", "uniform4": "chunks of 4",
             "temporal": "GCPO's temporal chunks 2,3,4,7", "one": "one chunk of all steps (GSPO)"}


def schedule_sizes(name: str, steps: int) -> list[int]:
    """The chunk sizes of one of SCHEDULES at T = steps."""
    from workbench.rl.chunking import CHUNKERS

    return {"step": [1] * steps, "uniform4": CHUNKERS.get("uniform")(steps, size=4),
            "temporal": CHUNKERS.get("temporal")(steps), "one": [steps]}[name]


def schedule_rates(credit, z: float = Z) -> dict:
    """{schedule: {misattributed, determined, cells, by_construction}} of one measured credit (no new sampling)."""
    out = {}
    for name in SCHEDULES:
        r = credit.rechunk(schedule_sizes(name, credit.num_steps)).rates(z).chunk
        out[name] = {"misattributed": None if r.misattributed != r.misattributed else float(r.misattributed),
                     "determined": int(r.determined_cells), "cells": int(r.cells),
                     "by_construction": bool(r.by_construction)}
    return out


def measure_set(policy, prompts: int = SETTINGS["prompts"], log=print) -> dict:
    """Credit of one group per held-out prompt (seed i for prompt i), its rates under SCHEDULES at M=16 and at the
    example's M=4 (the first 4 continuations), and the seconds each group took."""
    from workbench.flow.sampler import sample_group
    from workbench.flow.trajectory import SamplingConfig
    from workbench.rewards import build_reward
    from workbench.rl.credit import measure_credit
    from workbench.toyworld.world import split_scenes

    s = SETTINGS
    reward = build_reward(s["reward"])
    config = SamplingConfig(group=s["group"], steps=s["steps"], noise_level=s["noise_level"])
    rows = []
    for i, scene in enumerate(split_scenes()[1][:prompts]):
        start = time.perf_counter()
        group = sample_group(policy, scene.prompt(), replace(config, seed=i))
        credit = measure_credit(policy, group, reward, continuations=s["continuations"],
                                chunks=schedule_sizes("temporal", s["steps"]), seed=i, crn=s["crn"],
                                precision=s["precision"])
        small = replace(credit, continuation_rewards=credit.continuation_rewards[..., :EXAMPLE_M])  # nested M=4
        rows.append({"prompt": group.prompt, "seconds": time.perf_counter() - start,
                     "rates": {str(s["continuations"]): schedule_rates(credit, s["z"]),
                               str(EXAMPLE_M): schedule_rates(small, s["z"])}})
        log(f"  [{i + 1}/{prompts}] {rows[-1]['seconds']:5.0f} s  {group.prompt}")
    return {"settings": {**s, "prompts": prompts}, "command": COMMAND, "groups": rows}


@dataclass
class SetFigure:
    """One schedule's misattributed share over the set's groups at one M."""

    mean: float  # mean over the groups with a determined cell
    se: float  # standard error between groups
    low: float  # the smallest group's share
    high: float  # the largest
    groups: int  # groups with a determined cell
    by_construction: bool  # the schedule agrees with A by construction (one chunk of all steps)

    def text(self) -> str:
        if self.by_construction:
            return "0 % *by construction*"
        if self.groups == 0:
            return "– (no determined cell)"
        return (f"{100 * self.mean:.0f} % ± {100 * self.se:.0f} (groups {100 * self.low:.0f}-{100 * self.high:.0f} %)")


def figure(data: dict, schedule: str, m: int) -> SetFigure:
    """The set's figure for one schedule at M = m (the M=16 measurement or its first 4 continuations)."""
    cells = [g["rates"][str(m)][schedule] for g in data["groups"]]
    shares = [c["misattributed"] for c in cells if c["misattributed"] is not None]
    n = len(shares)
    mean = sum(shares) / n if n else math.nan
    se = math.sqrt(sum((x - mean) ** 2 for x in shares) / (n - 1) / n) if n > 1 else math.nan
    return SetFigure(mean, se, min(shares, default=math.nan), max(shares, default=math.nan), n,
                     all(c["by_construction"] for c in cells))


def load_set(path: Path = SET_FILE) -> dict:
    """The shipped set measurement, or an error that says how to remake it."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise WorkbenchError(f"the set of groups behind Learn's claim is missing or damaged ({path}: {err}); "
                             f"remake it with `{COMMAND}`") from None


def seconds_per_group(data: dict) -> float:
    """The mean seconds one of the set's groups took on the machine that measured it."""
    return sum(g["seconds"] for g in data["groups"]) / len(data["groups"])


def claim_text(data: dict) -> str:
    """Learn's headline: what chunks change over the set, at the set's M, with the spread between groups."""
    s, m = data["settings"], data["settings"]["continuations"]
    step, four, gcpo = (figure(data, name, m) for name in ("step", "uniform4", "temporal"))
    return (f"### What chunks change, measured over {len(data['groups'])} groups\n"
            f"Over {len(data['groups'])} held-out prompts (one group of G={s['group']} images, T={s['steps']} steps "
            f"each, M={m} continuations per state), the share of determined cells whose credit is against the "
            f"image's advantage is **{step.text()}** when every step is judged alone (step GRPO), "
            f"**{four.text()}** with chunks of 4 and **{gcpo.text()}** with GCPO's chunks 2,3,4,7 (± between "
            "groups; in brackets the lowest and highest group). Summed over a chunk, opposite-sign steps cancel, and "
            "fewer chunks push against what the image's reward says. One group can differ from this: the example "
            f"below is one group, measured with M={EXAMPLE_M} (`{data['command']}` remakes these figures).")


def example_against_set(example_step: float, example_chunk: float, sizes: str, data: dict) -> str:
    """One plain sentence: does the example group agree with the set? Rates are shares in 0..1 (nan: none)."""
    step, chunk = figure(data, "step", EXAMPLE_M), figure(data, "temporal", EXAMPLE_M)
    at_m = (f"Over the set at the same M={EXAMPLE_M}, step GRPO's share is {step.text()} and GCPO's chunks' "
            f"{chunk.text()}.")
    if example_step != example_step or example_chunk != example_chunk:
        return (f"**This group against the set.** Too few cells of this group are determined at M={EXAMPLE_M} to "
                f"compare steps and chunks here. {at_m}")
    if example_chunk < example_step:
        return (f"**This group against the set.** Here too the chunks {sizes} lower the share "
                f"({100 * example_step:.0f} % of steps, {100 * example_chunk:.0f} % of chunks). {at_m}")
    return (f"**This group against the set.** In this group the chunks {sizes} do *not* lower the share "
            f"({100 * example_step:.0f} % of steps, {100 * example_chunk:.0f} % of chunks), unlike most groups: "
            f"eight images valued with {EXAMPLE_M} continuations each are a noisy sample, and the claim is about "
            f"the set, not about every group. {at_m}")


def main() -> None:
    import torch

    from workbench.models.embedded import EmbeddedPolicy

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=SETTINGS["prompts"])
    p.add_argument("--out", type=Path, default=SET_FILE)
    args = p.parse_args()
    torch.set_num_threads(1)
    data = measure_set(EmbeddedPolicy.load(), args.prompts)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    for name, label in SCHEDULES.items():
        print(f"{label}: M=16 {figure(data, name, 16).text()}, M=4 {figure(data, name, EXAMPLE_M).text()}")


if __name__ == "__main__":
    main()
