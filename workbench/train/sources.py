"""Where a policy comes from, and the one function that loads it: a model folder, or a fine-tuning run's checkpoint.

    load_policy()                                        the embedded model shipped with the package
    load_policy("models/sd3")                            a diffusers SD3 / FLUX folder, or an embedded-format folder
    load_policy("runs/crosses-1")                        a run: its base model with its newest complete checkpoint
    load_policy("runs/crosses-1/checkpoints/iter_0080")  a run at one checkpoint
    load_policy("models/sd3 + loras/flow-grpo")          a base folder with a LoRA adapter folder (diffusers or PEFT
                                                         format, `models.lora`); the CLI's --model BASE --lora ADAPTER

The app's model picker, every command's --model and the notebooks all go through `load_policy`;
`resolve_source` checks a path and says what it names (`PolicySource.label` is what the app's header shows)
without loading any weights.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, replace
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.flow.policy import FlowPolicy
from workbench.train.checkpoints import CheckpointGone, checkpoint_iteration
from workbench.train.config import TrainConfig
from workbench.train.store import CHECKPOINT_NAME, CONFIG, RunStore, load_checkpoint

ADAPTER_SEP = " + "  # "BASE + ADAPTER": a base model folder with a LoRA adapter folder (the picker, links, --model)
RETRIES = 5  # loads of a run's newest checkpoint, each time the run replaced it while it loaded
VALID = ("a model folder (model_index.json for SD3/FLUX, or config.json + model.safetensors), a run folder "
         "(runs/<id>: its newest complete checkpoint) or one of its checkpoints (runs/<id>/checkpoints/iter_0080)")


@dataclass(frozen=True)
class PolicySource:
    """A policy's origin: a base model folder (None = the embedded model), optionally a run and its checkpoint."""

    model: str | None = None  # the base model folder; None = the embedded model
    run: str | None = None  # the run folder whose checkpoint is applied; None = the base model itself
    checkpoint: str | None = None  # the checkpoint folder (resolved: the newest complete one when not chosen)
    iteration: int | None = None  # the checkpoint's iteration
    adapter: str | None = None  # a LoRA adapter folder applied to the base model (diffusers or PEFT format)

    @property
    def key(self) -> str:
        """The path that names this source again (the picker's value): '' for the embedded model,
        'BASE + ADAPTER' for a base model with a LoRA adapter."""
        if self.adapter is not None:
            return f"{self.model}{ADAPTER_SEP}{self.adapter}"
        return self.checkpoint or self.model or ""

    @property
    def label(self) -> str:
        """What the app's header shows: 'the embedded model', or 'run crosses-1, iteration 80 (on ...)'."""
        base = self.model or "the embedded model"
        if self.adapter is not None:
            return f"{base} with the LoRA adapter {self.adapter}"
        if self.run is None:
            return base
        return f"run {Path(self.run).name}, iteration {self.iteration} (fine-tuned from {base})"

    @property
    def short(self) -> str:
        """A few words for table columns and plot titles: 'embedded model', 'sd3-medium', 'run crosses-1 @ 80',
        'sd3-medium + my-lora'."""
        if self.run is not None:
            return f"run {Path(self.run).name} @ {self.iteration}"
        if self.adapter is not None:
            return f"{Path(self.model).name} + {Path(self.adapter).name}"
        return Path(self.model).name if self.model else "embedded model"


def split_adapter(path: str | Path | None) -> tuple[str | None, str | None]:
    """'BASE + ADAPTER' -> (BASE, ADAPTER); anything else (or a path that exists as written) -> (path, None)."""
    text = None if path is None else str(path).strip()
    if not text or ADAPTER_SEP.strip() not in text:
        return text, None
    try:
        if Path(text).expanduser().exists():
            return text, None
    except (OSError, ValueError):
        pass
    base, _, adapter = text.rpartition(ADAPTER_SEP.strip())
    return base.strip(), adapter.strip()


def resolve_source(path: str | Path | None, adapter: str | Path | None = None) -> PolicySource:
    """What `path` names, checked on disk without loading weights (a bad path is a WorkbenchError naming it).

    `adapter` (or `path` written 'BASE + ADAPTER') adds a LoRA adapter folder to a base SD3 / FLUX folder."""
    written, split = split_adapter(path)
    if adapter is not None and str(adapter).strip() and split is not None:
        raise WorkbenchError(f"two LoRA adapters given ({split} in the model and {adapter}); give one")
    adapter = split if adapter is None or not str(adapter).strip() else str(adapter).strip()
    if adapter is not None:
        return _adapter_source(written, adapter)
    if path is None or str(path).strip() == "":
        return PolicySource()
    folder = Path(str(path).strip()).expanduser()
    try:
        exists = folder.exists()
    except (OSError, ValueError) as err:  # a NUL byte, a name too long for the file system
        raise WorkbenchError(f"{str(path)[:200]!r} is not a usable path ({err}); give {VALID}") from None
    if not exists:
        raise WorkbenchError(f"{folder} {_missing(folder)}; give {VALID}, or nothing for the embedded model")
    if folder.is_dir() and CHECKPOINT_NAME.match(folder.name) and folder.parent.name == "checkpoints":
        return _checkpoint_source(folder)
    if folder.is_dir() and _is_run(folder):
        return _run_source(folder)
    if folder.is_dir() and ((folder / "model_index.json").is_file() or (folder / CONFIG).is_file()):
        return PolicySource(model=str(folder))  # load_model names what such a folder lacks
    raise WorkbenchError(f"{folder} is neither a model folder nor a run; give {VALID}")


def _adapter_source(base: str | None, adapter: str) -> PolicySource:
    """A base SD3 / FLUX folder with a LoRA adapter folder, both checked on disk (`models.lora.adapter_format`)."""
    from workbench.models.lora import adapter_format
    from workbench.train.prompt_sets import is_pipeline_folder

    if not base:
        raise WorkbenchError(f"the LoRA adapter {adapter} needs a base model: give the SD3 / FLUX folder it was "
                             "trained on (--model BASE --lora ADAPTER, or 'BASE + ADAPTER' in the app)")
    source = resolve_source(base)
    if source.run is not None:
        raise WorkbenchError(f"{base} is a fine-tuning run; a LoRA adapter goes on a base model folder (SD3 / FLUX), "
                             "the one it was trained on")
    if not is_pipeline_folder(source.model):
        raise WorkbenchError(f"LoRA adapters apply to SD3 / FLUX diffusers folders; {source.model} is not one")
    adapter_format(adapter)
    return PolicySource(model=source.model, adapter=str(Path(adapter).expanduser()))


def _missing(folder: Path) -> str:
    """Why a path that does not exist cannot be read: a loop of symbolic links, a link to nothing, or no file."""
    try:
        folder.stat()
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "is a loop of symbolic links"
    except ValueError:  # a NUL byte
        return "is not a usable path"
    return "is a symbolic link to nothing" if folder.is_symlink() else "does not exist"


def _is_run(folder: Path) -> bool:
    """A run folder: config.json beside what a run writes (status, metrics, checkpoints), and no model weights."""
    marks = ("status.json", "metrics.jsonl", "checkpoints")
    return ((folder / CONFIG).is_file() and any((folder / m).exists() for m in marks)
            and not (folder / "model.safetensors").exists() and not (folder / "model_index.json").exists())


def _run_config(run: Path) -> TrainConfig:
    """The run's settings, those the model decides resolved (a config written with 'auto' in it)."""
    from workbench.train.model_settings import model_defaults

    store = RunStore.open(run)
    try:
        return model_defaults(TrainConfig.from_dict(store.config()))
    except WorkbenchError as err:
        raise WorkbenchError(f"run {run} has an unreadable config ({err})") from None


def _run_source(run: Path) -> PolicySource:
    """The run's newest checkpoint whose weights can be read (its optimizer state is not needed to sample)."""
    config = _run_config(run)
    store, problem = RunStore(run), ""
    for _ in range(RETRIES):  # a listing, again while the run replaced a checkpoint as it was read
        gone = False
        for folder in store.checkpoints():
            try:
                return PolicySource(config.model, str(run), str(folder), checkpoint_iteration(folder))
            except CheckpointGone:
                gone = True  # replaced by a newer one since the listing, which may have come after the listing
            except WorkbenchError as err:
                problem = problem or str(err)
        if not gone:
            break  # the listing was current: list again only where a checkpoint was replaced while it was read
    if problem:
        raise WorkbenchError(f"run {run} has no checkpoint whose weights can be read: {problem}")
    if store.info().state in ("running", "interrupted"):
        raise WorkbenchError(f"run {run} has no checkpoint yet (one is saved every {config.checkpoint_every} "
                             "iterations and at the end); wait for one, or load the base model")
    raise WorkbenchError(f"run {run} has no complete checkpoint ({store.info().state}, and its checkpoints folder "
                         "holds none); load the base model")


def _checkpoint_source(folder: Path) -> PolicySource:
    run = folder.parent.parent
    config = _run_config(run)
    iteration = checkpoint_iteration(folder)  # an unreadable checkpoint is a WorkbenchError naming its part
    return PolicySource(config.model, str(run), str(folder), iteration)


def load_policy(source: str | Path | PolicySource | None = None, device: str | None = None, dtype: str = "float32",
                **options) -> FlowPolicy:
    """The policy `source` names (a path, 'BASE + ADAPTER', a PolicySource, or None for the embedded model), never
    the network.

    A model folder loads as `models.adapters.load_model` does (options such as resolution go to SD3 / FLUX), with
    its LoRA adapter applied (`models.lora.load_adapter`) when the source names one;
    a run loads its base model (the run's config.model and lora_rank) and copies the checkpoint's trained
    weights into it (the optimizer state is not read). A path that names a run loads the run's newest checkpoint,
    taking the next newest when the run replaced it while it loaded. Every failure is a one-line WorkbenchError
    that names the path.
    """
    from workbench.models.adapters import load_model

    if not isinstance(source, PolicySource):
        for _ in range(RETRIES):
            src = resolve_source(source)
            try:
                return load_policy(src, device, dtype, **options)
            except CheckpointGone:
                if src.run is None or Path(src.checkpoint) == Path(str(source).strip()).expanduser():
                    raise  # a checkpoint named itself: its removal is the answer
        raise WorkbenchError(f"run {source} replaced its newest checkpoint {RETRIES} times while it loaded; try again")
    src = source
    if src.adapter is not None:
        from workbench.models.lora import load_adapter

        policy = load_model(src.model, device=device, dtype=dtype, **options)
        load_adapter(policy, src.adapter)
        policy.name = f"{policy.name}+{Path(src.adapter).name}"
        return policy
    if src.run is None:
        return load_model(src.model, device=device, dtype=dtype, **options)
    from workbench.train.distributed import DistInfo
    from workbench.train.trainable import add_lora, copy_weights, load_base_policy

    config = _run_config(Path(src.run))
    unknown = sorted(set(options) - {"resolution"})
    if unknown:
        raise WorkbenchError(f"a run loads its base model with the run's settings; only resolution may change "
                             f"(drop {', '.join(unknown)})")
    config = replace(config, device=device or config.device, resolution=options.get("resolution", config.resolution))
    weights = load_checkpoint(src.checkpoint, optimizer=False).weights  # first: the trainer may replace it soon
    policy = load_base_policy(config, DistInfo())
    if config.lora_rank:
        add_lora(policy.transformer, config.lora_rank, config.lora_alpha)
    else:
        policy.transformer.requires_grad_(True)
    copy_weights(policy.transformer, weights)
    policy.name = f"{policy.name}@{Path(src.run).name}:{src.iteration}"
    return policy
