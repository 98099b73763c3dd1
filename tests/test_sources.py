"""One loader for every policy source: a model folder, a run (its newest complete checkpoint), one checkpoint."""

from __future__ import annotations

import shutil

import pytest
from support import make_run, shift_of

from workbench.core.errors import WorkbenchError
from workbench.core.files import write_json
from workbench.models.embedded import EmbeddedPolicy, build_embedded
from workbench.train import TrainConfig
from workbench.train.checkpoints import CheckpointGone
from workbench.train.sources import PolicySource, load_policy, resolve_source
from workbench.train.store import CONFIG, STATUS, RunStore


def test_each_kind_of_source_loads(model_dir, tmp_path):
    run = make_run(tmp_path, model_dir)
    assert isinstance(load_policy(None, device="cpu"), EmbeddedPolicy)  # the shipped model
    assert shift_of(load_policy(model_dir, device="cpu"), model_dir) == 0.0
    assert shift_of(load_policy(run, device="cpu"), model_dir) == 0.02  # the newest checkpoint
    assert shift_of(load_policy(run / "checkpoints" / "iter_0010", device="cpu"), model_dir) == 0.01
    assert shift_of(load_policy(resolve_source(str(run)), device="cpu"), model_dir) == 0.02


def test_sources_say_what_they_name(model_dir, tmp_path):
    run = make_run(tmp_path, model_dir)
    assert resolve_source(None) == PolicySource() and resolve_source("  ").label == "the embedded model"
    assert resolve_source(model_dir) == PolicySource(model=str(model_dir))
    newest = resolve_source(run)
    assert (newest.run, newest.iteration, newest.checkpoint) == (str(run), 20, str(run / "checkpoints" / "iter_0020"))
    assert newest.label == f"run demo, iteration 20 (fine-tuned from {model_dir})"
    assert newest.key == newest.checkpoint  # the picker pins a run to the checkpoint it resolved to
    assert resolve_source(run / "checkpoints" / "iter_0010").iteration == 10


def test_a_damaged_newest_checkpoint_falls_back_to_an_older_complete_one(model_dir, tmp_path):
    run = make_run(tmp_path, model_dir)
    (run / "checkpoints" / "iter_0020" / "weights.safetensors").write_bytes(b"not safetensors")
    assert resolve_source(run).iteration == 10
    assert shift_of(load_policy(run, device="cpu"), model_dir) == 0.01
    with pytest.raises(WorkbenchError, match="iter_0020 is incomplete or corrupted"):
        resolve_source(run / "checkpoints" / "iter_0020")  # chosen by name: refused, never replaced


@pytest.mark.parametrize("case, message", [
    ("missing", "does not exist; give a model folder"),
    ("empty", "is neither a model folder nor a run"),
    ("no_checkpoint", "has no complete checkpoint"),
    ("bad_config", "has an unreadable config"),
])
def test_bad_paths_are_refused_naming_them(model_dir, tmp_path, case, message):
    path = tmp_path / case
    if case == "empty":
        path.mkdir()
    if case in ("no_checkpoint", "bad_config"):
        path = make_run(tmp_path, model_dir, name=case)
        shutil.rmtree(path / "checkpoints")
        if case == "bad_config":
            write_json(path / CONFIG, {"group": "eight"})
            (path / "checkpoints").mkdir()
    with pytest.raises(WorkbenchError, match=message) as err:
        load_policy(path, device="cpu")
    assert str(path) in str(err.value)


@pytest.mark.parametrize("path", ["bad\0path", "x" * 5000])
def test_unusable_paths_are_a_message(path):
    with pytest.raises(WorkbenchError, match="is not a usable path|does not exist"):
        resolve_source(path)


def test_a_missing_path_says_why_it_cannot_be_read(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    for path, why in [(tmp_path / "loop", "is a loop of symbolic links"),
                      (tmp_path / "dangling", "is a symbolic link to nothing"),
                      (tmp_path / "nothing", "does not exist"),
                      ("bad\0path", "is not a usable path")]:  # a NUL byte: no file system takes it
        with pytest.raises(WorkbenchError, match=f"{why}; give "):
            resolve_source(path)


def test_a_lora_adapter_goes_on_the_base_folder_it_was_trained_on(tmp_path, model_dir):
    with pytest.raises(WorkbenchError) as err:
        resolve_source(None, "my-lora")
    assert str(err.value) == ("the LoRA adapter my-lora needs a base model: give the SD3 / FLUX folder it was trained "
                              "on (--model BASE --lora ADAPTER, or 'BASE + ADAPTER' in the app)")
    run = make_run(tmp_path, model_dir)
    with pytest.raises(WorkbenchError) as err:
        resolve_source(run, "my-lora")
    assert str(err.value) == (f"{run} is a fine-tuning run; a LoRA adapter goes on a base model folder (SD3 / FLUX), "
                              "the one it was trained on")
    with pytest.raises(WorkbenchError) as err:
        resolve_source(model_dir, "my-lora")  # the embedded architecture's folder: no diffusers pipeline
    assert str(err.value) == f"LoRA adapters apply to SD3 / FLUX diffusers folders; {model_dir} is not one"


def test_a_model_folder_without_weights_is_named_by_the_model_loader(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    with pytest.raises(WorkbenchError, match="model.safetensors"):
        load_policy(tmp_path / "m", device="cpu")


def test_the_trainer_keeps_as_many_checkpoints_as_asked(tmp_path):
    from workbench.train import Trainer

    config = TrainConfig(group=2, steps=3, chunks="1,2", prompts_per_iteration=1, eval_prompts=0, iterations=3,
                         checkpoint_every=1, keep_checkpoints=2, sample_every=10)
    model = build_embedded(seed=0)
    model.text_encoder.eval().requires_grad_(False)
    Trainer(config, tmp_path / "run", EmbeddedPolicy(model)).run()
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("iter_*")) == ["iter_0002", "iter_0003"]
    with pytest.raises(WorkbenchError, match="keep_checkpoints must be a positive integer"):
        TrainConfig(keep_checkpoints=0)
    with pytest.raises(WorkbenchError, match="keep_checkpoints must be in 1..1000"):
        TrainConfig(keep_checkpoints=10**6)


def test_the_command_line_takes_a_run_or_a_checkpoint_as_model(model_dir, tmp_path, capsys):
    from workbench.cli.main import main

    run = make_run(tmp_path, model_dir)
    prompt = "a large red circle in the top left on a white background"
    assert main(["sample", "--prompt", prompt, "--num", "2", "--steps", "3", "--out", str(tmp_path / "g.png"),
                 "--model", str(run)]) == 0
    assert (tmp_path / "g.png").is_file()
    assert main(["attribute", "--prompt", prompt, "--group", "2", "--steps", "3", "--continuations", "2",
                 "--chunks", "3", "--json", "--model", str(run / "checkpoints" / "iter_0010")]) == 0
    assert '"chunks": [3]' in capsys.readouterr().out
    shutil.rmtree(run / "checkpoints")
    assert main(["sample", "--prompt", prompt, "--out", str(tmp_path / "h.png"), "--model", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: run {run} has no complete checkpoint") and "Traceback" not in err


@pytest.mark.parametrize("state", ["running", "interrupted", "finished"])
def test_a_run_without_a_readable_checkpoint_says_why(model_dir, tmp_path, state):
    run = make_run(tmp_path, model_dir, checkpoint_every=7)
    store = RunStore(run)
    store.write_status("finished" if state == "finished" else "running", 20)
    if state == "interrupted":  # its status says running, but its process is gone
        write_json(store.path / STATUS, {**store.status(), "pid_start": -1.0})
    assert store.info().state == state
    for name in ("iter_0020", "iter_0010"):
        (run / "checkpoints" / name / "weights.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(WorkbenchError) as newest:
        resolve_source(run / "checkpoints" / "iter_0020")
    with pytest.raises(WorkbenchError) as err:  # the newest checkpoint's problem, whatever the state
        resolve_source(run)
    assert str(err.value) == f"run {run} has no checkpoint whose weights can be read: {newest.value}"
    shutil.rmtree(run / "checkpoints")
    with pytest.raises(WorkbenchError) as err:
        resolve_source(run)
    if state == "finished":
        assert str(err.value) == (f"run {run} has no complete checkpoint (finished, and its checkpoints folder holds "
                                  "none); load the base model")
    else:  # a checkpoint may yet come
        assert str(err.value) == (f"run {run} has no checkpoint yet (one is saved every 7 iterations and at the end); "
                                  "wait for one, or load the base model")


def test_a_run_is_listed_again_only_when_a_checkpoint_went_while_it_was_read(model_dir, tmp_path, monkeypatch):
    import workbench.train.sources as sources

    run = make_run(tmp_path, model_dir)
    listings, read, gone = [], sources.checkpoint_iteration, {"left": 0}
    listed = RunStore.checkpoints
    monkeypatch.setattr(RunStore, "checkpoints", lambda store: listings.append(1) or listed(store))

    def reading(folder):  # the run replaces the next `left` checkpoints as they are read
        if gone["left"]:
            gone["left"] -= 1
            raise CheckpointGone(f"{folder} went")
        return read(folder)

    monkeypatch.setattr(sources, "checkpoint_iteration", reading)
    assert resolve_source(run).iteration == 20 and len(listings) == 1  # a current listing: read once
    listings.clear()
    gone["left"] = 2  # both checkpoints of the first listing went: list again, read the newest
    assert resolve_source(run).iteration == 20 and len(listings) == 2
    listings.clear()
    (run / "checkpoints" / "iter_0020" / "weights.safetensors").write_bytes(b"not safetensors")
    monkeypatch.setattr(RunStore, "checkpoints", lambda store: listings.append(1) or listed(store)[:1])  # only it
    with pytest.raises(WorkbenchError, match="has no checkpoint whose weights can be read"):
        resolve_source(run)
    assert len(listings) == 1  # an unreadable checkpoint is not a reason to list again
