"""Experiment trackers as subscribers of the trainer's events, chosen with `--report-to` as in diffusers'
training scripts: TensorBoard (torch's SummaryWriter: every metric and the rollout grids) and trackio (when
it is installed). They write beside the run store, in `<run>/tensorboard/` and trackio's own local database.

    tensorboard --logdir runs/          # every run's curves and sample grids in the browser
    trackio show                        # the same, for runs that reported to trackio
"""

from __future__ import annotations

import importlib.util

import numpy as np

from workbench.core.errors import WorkbenchError

TRACKERS = ("tensorboard", "trackio")


def parse_report_to(spec: str) -> list[str]:
    """'tensorboard,trackio' / 'all' / 'none' -> the tracker names; unknown or uninstalled ones are errors."""
    names = [n.strip() for n in (spec or "").split(",") if n.strip()]
    if names in (["none"], []):
        return []
    if names == ["all"]:
        return [n for n in TRACKERS if _installed(n)]
    for name in names:
        if name in ("none", "all"):
            raise WorkbenchError(f"report_to '{name}' stands alone; give '{name}' or a list of trackers "
                                 f"({', '.join(TRACKERS)}), not both (got {spec!r})")
        if name not in TRACKERS:
            raise WorkbenchError(f"unknown tracker '{name}' in report_to; valid: {', '.join(TRACKERS)}, all, none")
        if not _installed(name):
            raise WorkbenchError(f"report_to names '{name}' but it is not installed; pip install {name} "
                                 "or drop it from --report-to")
    return names


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


class TensorBoardTracker:
    """Writes every logged metric as a scalar and every rollout grid as an image (SummaryWriter)."""

    def __init__(self, log_dir):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))

    def __call__(self, event) -> None:
        if event.kind == "started":
            self.writer.add_text("config", str(event.data["config"]), event.iteration)
        elif event.kind == "iteration":
            for key, value in event.data.items():
                if key != "iteration" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.writer.add_scalar(key, value, event.iteration)
        elif event.kind in ("samples", "eval_samples"):
            self.writer.add_image(event.kind, np.asarray(event.data["grid"]), event.iteration, dataformats="HWC")
        elif event.kind in ("finished", "stopped", "failed"):
            self.writer.flush()
            self.writer.close()
        else:
            return
        self.writer.flush()


class TrackioTracker:
    """Logs every metric to trackio (a local, wandb-compatible tracker), one trackio run per run folder."""

    def __init__(self, name: str, project: str = "chunk-grpo-workbench"):
        self.name, self.project, self.run = name, project, None

    def __call__(self, event) -> None:
        import trackio

        if event.kind == "started":
            self.run = trackio.init(project=self.project, name=self.name, config=event.data["config"],
                                    resume="allow")
        elif event.kind == "iteration" and self.run is not None:
            trackio.log({k: v for k, v in event.data.items() if isinstance(v, (int, float))}, step=event.iteration)
        elif event.kind in ("finished", "stopped", "failed") and self.run is not None:
            trackio.finish()
            self.run = None


def make_trackers(config, store) -> list:
    """The subscribers `config.report_to` asks for; they need a run folder (none without a store)."""
    if store is None:
        return []
    names = parse_report_to(config.report_to)
    made = []
    if "tensorboard" in names:
        made.append(TensorBoardTracker(store.path / "tensorboard"))
    if "trackio" in names:
        made.append(TrackioTracker(store.path.name))
    return made
