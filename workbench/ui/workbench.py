"""What every session of the app shares: the model (loaded once, lazily), cached L1_rel curves and the
training jobs. The tab handlers (`handlers`, `run_handlers`) receive it as their first argument."""

from __future__ import annotations

import threading

from workbench.flow.trajectory import SamplingConfig
from workbench.ui.jobs import TRAIN_COMMAND, JobManager
from workbench.ui.state import DEFAULT_STEPS

CURVE_PROMPTS = 8  # default number of prompts the L1_rel curve averages over (2 trajectories each)


class Workbench:
    """What all sessions share: the model (loaded once, lazily), cached L1_rel curves, the training jobs."""

    def __init__(self, model: str | None = None, device: str | None = None, runs_root: str = "runs",
                 train_command=TRAIN_COMMAND, curve_prompts: int = CURVE_PROMPTS):
        from workbench.models.adapters import default_device

        self.model_path, self.explicit_device, self.curve_prompts = model, device, curve_prompts
        self.device = device or default_device()
        self.jobs = JobManager(runs_root, self.device, train_command)
        self._policy = None
        self._curves: dict[tuple[int, float], object] = {}
        self._lock, self._curve_lock = threading.Lock(), threading.Lock()

    def policy(self):
        """The FlowPolicy, loaded on first use (WorkbenchError if the model folder is bad)."""
        with self._lock:
            if self._policy is None:
                from workbench.models.adapters import load_policy

                self._policy = load_policy(self.model_path, device=self.device)
            return self._policy

    def warm_up(self) -> threading.Thread:
        """In the background: load the model and compute the default L1_rel curve (the first forward passes
        are slow in a fresh process), so the page is interactive before the model is."""
        def load():
            try:
                self.curve(DEFAULT_STEPS, 0.7)
            except Exception:  # noqa: BLE001 - reported again, as a message, on first use
                pass
        thread = threading.Thread(target=load, name="load-model", daemon=True)
        thread.start()
        return thread

    def curve(self, steps: int, noise_level: float):
        """The L1_rel DynamicsCurve over `curve_prompts` prompts at T = steps (computed once per (T, noise))."""
        key = (steps, round(noise_level, 4))
        with self._curve_lock:
            if key not in self._curves:
                self._curves[key] = self._measure_curve(steps, noise_level)
            return self._curves[key]

    def _measure_curve(self, steps: int, noise_level: float):
        from workbench.flow.dynamics import dynamics_curve
        from workbench.toyworld.world import spread_prompts

        config = SamplingConfig(group=2, steps=steps, noise_level=noise_level)
        return dynamics_curve(self.policy(), spread_prompts(self.curve_prompts), config)
