"""What every session of the app shares: the policies sessions picked (loaded once, lazily, a few kept),
cached L1_rel curves and the training jobs. The tab handlers (`handlers`, `run_handlers`) receive it as
their first argument.

A session names its policy by a picker key (`train.sources`): BASE for the model the app was started
with, a run folder (its newest complete checkpoint) or a checkpoint folder, another model folder, or a base folder
with a LoRA adapter folder, 'BASE + ADAPTER' ('base + ADAPTER': the app's model with the adapter).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.heap import settle
from workbench.core.threads import app_threads
from workbench.flow.trajectory import SamplingConfig
from workbench.ui.jobs import TRAIN_COMMAND, JobManager
from workbench.ui.state import BASE, DEFAULT_STEPS, EMBEDDED, LESSON

CURVE_PROMPTS = 8  # default number of prompts the L1_rel curve averages over (2 trajectories each)
KEEP_POLICIES = 3  # loaded policies kept in memory (the least recently used one is dropped first)


class Workbench:
    """What all sessions share: the model (loaded once, lazily), cached L1_rel curves, the training jobs."""

    def __init__(self, model: str | None = None, device: str | None = None, runs_root: str = "runs",
                 train_command=TRAIN_COMMAND, curve_prompts: int = CURVE_PROMPTS, dtype: str = "float32",
                 resolution: int | None = None, models: tuple[str, ...] = ()):
        from workbench.models.adapters import default_device, torch_dtype
        from workbench.train.allowed import AllowedFolders

        self.model_path, self.explicit_device, self.curve_prompts = model, device, curve_prompts
        self.device = device or default_device()
        torch_dtype(dtype)  # an unknown dtype is refused at start
        self.dtype, self.resolution = dtype, resolution  # how SD3 / FLUX folders load (the embedded model: float32)
        self.jobs = JobManager(runs_root, self.device, train_command)
        self.models = tuple(str(m) for m in models)  # folders of models the picker offers (`app.py --models`)
        self.allowed = AllowedFolders.of(runs_root, model, self.models)  # where a typed path or a link may load
        self._policies: OrderedDict[str, object] = OrderedDict()  # source key -> FlowPolicy, most recent last
        self._loading: dict[object, threading.Lock] = {}  # source -> the lock of its load in progress
        self._curves: dict[tuple[str, int, float], object] = {}
        self._resolved: dict[str | None, object] = {}  # path -> PolicySource of models and checkpoint folders
        self._lock, self._curve_lock = threading.Lock(), threading.Lock()
        self._batched, self._batched_lock = 0, threading.Lock()  # batched computations in flight (`batched_threads`)
        self.timing: tuple[float, str] | None = None  # seconds per image evaluation here, and how (`ui.timing`)
        self.objectives_timing: dict = {}  # Objectives' part -> (seconds per image-step, how) (`ui.timing`)

    def source(self, key: str | None = BASE):
        """The PolicySource a picker key names (checked on disk, nothing loaded); BASE or empty: the app's model.
        Any other path, and each folder of 'BASE + ADAPTER' (a base model with a LoRA adapter; 'base + ADAPTER':
        the app's model), must lie in a folder this app offers (`train.allowed`), checked before it is looked at."""
        from workbench.train.sources import ADAPTER_SEP, resolve_source, split_adapter

        key = (key or "").strip()
        base, adapter = split_adapter(key)
        if adapter is not None:
            base = (self.model_path or "") if base in ("", BASE) else self.allowed.check(base)
            path = f"{base}{ADAPTER_SEP}{self.allowed.check(adapter)}"
        elif key == LESSON:  # the lesson result shipped with the package
            from workbench.train.lesson_result import shipped_lesson

            path = str(shipped_lesson().model)
        else:
            path = self.model_path if key in ("", BASE) else None if key == EMBEDDED else self.allowed.check(key)
        if path in self._resolved:
            return self._resolved[path]
        source = resolve_source(path)
        if source.run is None or source.checkpoint == path:  # a model or one checkpoint: it never changes
            self._resolved[path] = source
        return source

    def base_key(self, key: str | None) -> str:
        """The picker key of the base model of the policy `key` names (a run's model; a model itself)."""
        source = self.source(key)
        if source.model is None:
            return EMBEDDED if self.model_path is not None else BASE
        return BASE if source.model == self.model_path else source.model

    def policy(self, key: str | None = BASE):
        """The FlowPolicy a picker key names, loaded on first use and kept among the last KEEP_POLICIES
        (WorkbenchError naming the path if it is bad); a run's key: its newest checkpoint (`pin`)."""
        return self.pin(key)[1]

    def pin(self, key: str | None = BASE) -> tuple:
        """(the PolicySource loaded, its FlowPolicy) of a picker key. A run's key loads the run's newest checkpoint;
        when the training run replaced that checkpoint while it loaded, the newer one is taken (a run that is
        training can always be loaded). A chosen checkpoint that is gone is a message saying so."""
        from workbench.train.checkpoints import CheckpointGone
        from workbench.train.sources import RETRIES

        for _ in range(RETRIES):
            source = self.source(key)
            try:
                policy = self._policy_of(source)
            except CheckpointGone:
                if source.run is None or Path(source.checkpoint) == Path((key or "").strip()).expanduser():
                    raise
                continue
            if source.run is not None:  # the session now names the checkpoint: found without the disk, which the
                self._resolved.setdefault(source.checkpoint, source)  # run may have moved on from since
            return source, policy
        raise WorkbenchError(f"run {key} replaced its newest checkpoint {RETRIES} times while it loaded; try again")

    def _policy_of(self, source):
        """The loaded policy of a PolicySource. A load holds only its own policy's lock: sessions asking for that
        policy wait for it, every other session's policy is served meanwhile."""
        self.share_cores()
        with self._lock:
            if source in self._policies:
                self._policies.move_to_end(source)
                return self._policies[source]
            gate = self._loading.setdefault(source, threading.Lock())
        with gate:
            return self._load(source)

    def _load(self, source):
        """Load `source` (its gate held) unless a session that held the gate before loaded it; keep it."""
        from workbench.train.sources import load_policy

        with self._lock:
            if source in self._policies:
                return self._policies[source]
        try:
            policy = load_policy(source, device=self.device, **self._load_options(source))
        except BaseException:
            with self._lock:
                self._loading.pop(source, None)
            raise
        with self._lock:
            self._loading.pop(source, None)
            self._policies[source] = policy
            while len(self._policies) > KEEP_POLICIES:
                self._policies.popitem(last=False)
            return policy

    def share_cores(self, batched: bool = False) -> int:
        """Set torch's threads before this thread computes: one while a CPU fine-tune of this app runs (its trainer
        takes the cores left free, `core.threads`); otherwise every core but one, and every core for batched work
        and while any batched computation runs (`app_threads`, `batched_threads`); or OMP_NUM_THREADS where the
        environment sets it. Returns the count.

        The count is set per thread (Gradio runs each handler in a worker thread), but part of it is the process's:
        a second thread setting one thread slowed a credit measurement computing on two threads from 2.8-3.6 s to
        3.9-4.2 s (docs/performance.md). So no handler lowers
        it while a batched computation runs."""
        import torch

        limit = os.environ.get("OMP_NUM_THREADS", "")
        every = batched or self._batched > 0
        most = int(limit) if limit.isdigit() and int(limit) > 0 else app_threads(batched=every)
        threads = 1 if self.device == "cpu" and self.jobs.training() else most
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        return threads

    @contextmanager
    def batched_threads(self):
        """The block computes large batched passes (the credit's continuations, dense_grpo's look-ahead) in this
        thread, on every core while no fine-tune of this app runs; then the handlers' own count again. A generator
        handler enters it in each step that computes (each step may run in another worker thread)."""
        with self._batched_lock:
            self._batched += 1
        try:
            self.share_cores(batched=True)
            yield
        finally:
            with self._batched_lock:
                self._batched -= 1
            self.share_cores()

    def _load_options(self, source) -> dict:
        """dtype and resolution for an SD3 / FLUX folder (a run keeps its own dtype); none for the embedded model."""
        from workbench.train.prompt_sets import is_pipeline_folder

        if not is_pipeline_folder(source.model):
            return {}
        options = {} if self.resolution is None else {"resolution": self.resolution}
        return options if source.run is not None else {"dtype": self.dtype, **options}

    def release(self) -> None:
        """Drop every loaded policy and cached curve (a fine-tune about to use the GPU needs its memory); the next
        use loads the policy again."""
        with self._lock, self._curve_lock:
            self._policies.clear()
            self._curves.clear()
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def sources(self) -> list[tuple[str, str]]:
        """The picker's choices, (label, key): the base model, then every run on disk (newest first) with its
        newest checkpoint and each saved iteration. Nothing is loaded; a damaged run is left out."""
        from workbench.train.store import RunStore, list_runs

        base = self.model_path or "the embedded model"
        choices = [(f"base model: {base}", BASE)]
        if self.model_path is None:  # the crosses lesson's result shipped with the package: a class need not wait
            from workbench.train.lesson_result import shipped_lesson

            try:
                lesson = shipped_lesson()
                choices.append((f"the crosses lesson shipped with the package ({lesson.iterations} iterations)",
                                LESSON))
            except WorkbenchError:  # an incomplete copy of the package: the picker offers what is there
                pass
        choices += self._listed_models()
        try:
            runs = list_runs(self.jobs.root)
        except WorkbenchError:  # the runs root is a file: no run to offer
            runs = []
        for info in runs:
            folders = sorted(RunStore(info.path).checkpoints(), key=lambda p: int(p.name.split("_")[1]), reverse=True)
            if info.state == "damaged" or not folders:
                continue
            choices.append((f"run {info.name} · newest checkpoint", str(info.path)))
            choices += [(f"run {info.name} · iteration {int(f.name.split('_')[1])}", str(f)) for f in folders]
        return choices

    def _listed_models(self) -> list[tuple[str, str]]:
        """(label, key) of each model in the `--models` folders: a folder that is a model, or the model folders
        directly inside it."""
        from workbench.train.prompt_sets import is_pipeline_folder

        def is_model(folder: Path) -> bool:
            return is_pipeline_folder(str(folder)) or ((folder / "config.json").is_file()
                                                       and (folder / "model.safetensors").is_file())
        found = []
        for root in map(Path, self.models):
            try:
                found += [root] if is_model(root) else sorted(p for p in root.iterdir() if p.is_dir() and is_model(p))
            except OSError:  # a folder gone since the start: nothing to offer from it
                continue
        return [(f"model: {folder.name}", str(folder)) for folder in found]

    def warm_up(self) -> threading.Thread:
        """In the background: load the model and compute the default L1_rel curve (the first forward passes
        are slow in a fresh process), so the page is interactive before the model is."""
        def load():
            try:
                self.curve(DEFAULT_STEPS, 0.7)
                from workbench.ui.timing import probe, probe_objectives

                probe(self)  # the buttons' time estimates start from this machine's own speed
                probe_objectives(self)
            except Exception:  # noqa: BLE001 - reported again, as a message, on first use
                pass
            settle()  # the loaded model and modules leave the collector's walk (core/heap.py)
        thread = threading.Thread(target=load, name="load-model", daemon=True)
        thread.start()
        return thread

    def curve(self, steps: int, noise_level: float, source: str | None = BASE):
        """The L1_rel DynamicsCurve of a policy over `curve_prompts` prompts at T = steps (computed once per
        (policy, T, noise))."""
        key = (self.source(source).key, steps, round(noise_level, 4))
        with self._curve_lock:
            if key not in self._curves:
                self._curves[key] = self._measure_curve(steps, noise_level, source)
            return self._curves[key]

    def _measure_curve(self, steps: int, noise_level: float, source: str | None):
        from workbench.flow.dynamics import dynamics_curve
        from workbench.train.prompt_sets import world_prompts

        config = SamplingConfig(group=2, steps=steps, noise_level=noise_level)
        policy = self.policy(source)  # a real model's curve runs over real prompts, never the toy grammar
        return dynamics_curve(policy, world_prompts(policy.toy_world, self.curve_prompts), config)
