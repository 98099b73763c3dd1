"""A chunker, a credit estimator, a reward and an app tab, each added by one registration call, appear everywhere they
should: the app's menus, the CLI's choices and help, the config checks, shared links and the handlers, which run
them end to end on the tiny random model; training names the new chunker (rl/chunker_info.py,
rl/credit_estimators.py, rewards/base.py, ui/tabs.py)."""

from __future__ import annotations

import gradio as gr
import pytest
import torch
from support import PROMPT

from workbench.cli.main import build_parser
from workbench.cli.train import config_overrides
from workbench.cli.train import main as train_main
from workbench.core.errors import WorkbenchError
from workbench.rewards import REWARDS, Accepts, RewardInfo, reward_help
from workbench.rl.chunker_info import ChunkerInfo, ChunkOption
from workbench.rl.chunking import CHUNKERS, schedule
from workbench.rl.credit_estimators import ESTIMATORS, Estimate, EstimatorInfo
from workbench.train import TrainConfig
from workbench.train.store import RunStore
from workbench.ui import handlers as h
from workbench.ui import run_handlers as rh
from workbench.ui import share
from workbench.ui.layout import build_app
from workbench.ui.state import Session
from workbench.ui.tabs import TABS, TabInfo, tab_ids

CALLS: list[int] = []  # the step counts the new chunker was asked to cut


@pytest.fixture(scope="module")
def halves():
    """A chunker: a first chunk of `first` steps, the rest in a second."""
    @CHUNKERS.register("halves", info=ChunkerInfo("two chunks", (ChunkOption("first", "steps of the first chunk", 2),),
                                                  order=5))
    def halves_chunker(num_steps, l1_rel=None, first=2):
        CALLS.append(num_steps)
        return [first, num_steps - first] if num_steps > first else [num_steps]
    yield "halves"
    CHUNKERS.unregister("halves")


@pytest.fixture(scope="module")
def own_final():
    """A credit estimator: every state is worth its trajectory's final reward (so no step has credit)."""
    @ESTIMATORS.register("own_final", info=EstimatorInfo("the trajectory's own final reward", transformer=False,
                                                         lookahead=True, order=5))
    def own_final_estimator(policy, group, reward_fn, continuations=1, seed=0, crn=True, progress=None,
                            precision="float32"):
        final = torch.as_tensor(reward_fn(group.images, [group.prompt] * group.group_size), dtype=torch.float32)
        g, t = group.group_size, group.num_steps
        return Estimate(final[:, None, None].expand(g, t - 1, 1).clone(), final.clone(), True, 0, 0.0)
    yield "own_final"
    ESTIMATORS.unregister("own_final")


@pytest.fixture(scope="module")
def brightness():
    """A reward: the mean pixel value, in [0, 1]."""
    REWARDS.register("brightness", info=RewardInfo("mean pixel value, in [0, 1]", Accepts()))(
        lambda images, prompts: images.mean(dim=(1, 2, 3)))
    yield "brightness"
    REWARDS.unregister("brightness")


@pytest.fixture(scope="module")
def notes():
    """A tab between Learn and Glossary, showing what Generate built."""
    TABS.register("notes", info=TabInfo("Notes", order=75))(
        lambda page: gr.Markdown(f"{len(page.built['generate']['shown'])} views in Generate", elem_id="notes-text"))
    yield "notes"
    TABS.unregister("notes")


@pytest.fixture(scope="module")
def app(wb, halves, own_final, brightness, notes):
    """The app's components built with the four registrations, by elem_id and by label."""
    components = build_app(wb).config["components"]
    by_label = {c["props"].get("label"): c for c in components}
    return components, by_label


def choices(component: dict) -> list[str]:
    return [choice[1] if isinstance(choice, (list, tuple)) else choice for choice in component["props"]["choices"]]


def test_the_app_lists_each_new_entry(app):
    components, by_label = app
    assert choices(by_label["Chunker"])[:2] == ["temporal", "halves"]  # order 5: after temporal (0)
    assert "steps of the first chunk (halves)" in next(c for c in components if c["type"] == "number" and
                                                      "(halves)" in (c["props"].get("label") or ""))["props"]["label"]
    estimator = by_label["Credit estimator"]
    assert choices(estimator)[:2] == ["mc", "own_final"] and "the trajectory's own final reward" in \
        estimator["props"]["info"]
    reward = next(c for c in components if c["props"].get("elem_id") == "gen-reward")
    assert "brightness" in reward["props"]["info"]
    train_chunks = next(c for c in components if c["props"].get("elem_id") == "train-chunks")
    assert "halves" in train_chunks["props"]["label"]  # a training schedule may name it
    tabs = [c["props"]["id"] for c in components if c["type"] == "tabitem"]
    assert tabs == tab_ids() and tabs[-3:] == ["learn", "notes", "glossary"]
    note = next(c for c in components if c["props"].get("elem_id") == "notes-text")
    assert note["props"]["value"].endswith("views in Generate")


def test_the_cli_takes_each_new_entry(halves, own_final, brightness):
    parser = build_parser()
    args = parser.parse_args(["chunks", "--method", "halves", "--first", "3"])
    assert (args.method, args.first) == ("halves", 3)
    args = parser.parse_args(["attribute", "--prompt", PROMPT, "--estimator", "own_final", "--reward", "brightness"])
    assert (args.estimator, args.reward) == ("own_final", "brightness")
    args = parser.parse_args(["export", "--prompt", PROMPT, "--estimator", "own_final", "--out", "x.html"])
    assert args.estimator == "own_final"
    overrides = config_overrides(parser.parse_args(["train", "--chunks", "halves:first=1", "--reward", "brightness",
                                                    "--objective", "dense_grpo", "--lookahead", "own_final"]))
    assert overrides == {"chunks": "halves:first=1", "reward": "brightness", "objective": "dense_grpo",
                         "lookahead": "own_final"}
    helps = {action.dest: action.help for sub in parser._subparsers._group_actions
             for name, command in sub.choices.items() for action in command._actions if name in ("chunks", "train")}
    assert "halves (two chunks)" in helps["method"] and "steps of the first chunk for halves" in helps["first"]
    assert "halves" in helps["chunks"] and "own_final" in helps["lookahead"]
    assert "brightness: mean pixel value" in reward_help()


def test_the_config_accepts_each_new_entry(wb, halves, own_final, brightness):
    config = TrainConfig(chunks="halves:first=1", steps=3, reward="brightness", objective="chunk_grpo")
    assert config.objective_settings().chunks == [1, 2]
    assert TrainConfig(objective="dense_grpo", lookahead="own_final").lookahead == "own_final"
    with pytest.raises(WorkbenchError, match="own_final"):  # the message lists it among the look-aheads
        TrainConfig(objective="dense_grpo", lookahead="mc")
    with pytest.raises(WorkbenchError, match="first must be at least 1"):
        TrainConfig(chunks="halves:first=0", steps=3)
    form = rh.form_config(wb, "chunk_grpo", "brightness", "halves:first=2", 1e-4, 1, 2, 4, 0, "flow_grpo", "")
    assert form.chunks == "halves:first=2" and form.objective_settings().chunks == [2, 2]  # the Fine-tune form's


def test_shared_links_take_each_new_entry(halves, own_final, brightness, notes):
    session = Session().with_sizes([1, 3])
    link = share.view_link(PROMPT, 2, 4, 0.7, 0, "flow_grpo", "", "brightness", 1, "own_final", session, "Notes",
                           "http://x/")
    assert "tab=notes" in link and "estimator=own_final" in link and "reward=brightness" in link
    view = share.parse_query({"prompt": PROMPT, "T": "4", "estimator": "own_final", "reward": "brightness:2",
                              "tab": "notes", "chunks": "halves:first=1"})
    assert (view["estimator"], view["tab"], view["sizes"]) == ("own_final", "notes", [1, 3])
    for key, value in (("reward", "dimness"), ("estimator", "own_start"), ("tab", "memo")):
        with pytest.raises(WorkbenchError, match=f"the link's {key}="):
            share.parse_query({"prompt": PROMPT, key: value})


def test_the_handlers_run_each_new_entry_on_the_tiny_model(wb, halves, own_final, brightness, notes):
    out = h.generate(wb, PROMPT, 2, 4, 0.7, 3, "brightness", Session())
    session = out[-2]
    assert session.reward_spec == "brightness" and session.group.num_steps == 4
    assert torch.allclose(session.rewards, session.group.images.mean(dim=(1, 2, 3)), atol=1e-6)
    out = h.attribute(wb, 1, session, "own_final")
    credit = out[-2].credit
    assert credit.estimator == "own_final" and credit.deterministic and r"own\_final estimator" in out[-1]
    assert " in float" not in out[-1]  # it evaluates no transformer: no numerics to report
    assert torch.all(credit.step_credit[credit.step_valid] == 0)  # every state is worth the final reward
    out = h.chunks_from_chunker(wb, "halves", 1, out[-2])
    assert out[-2].sizes == [1, 3] and "halves chunker" in out[-1]
    assert h.chunks_from_spec(wb, "halves:first=2", out[-2])[-2].sizes == [2, 2]  # typed in the sizes box
    assert "(first) must be a whole number >= 1" in h.chunks_from_chunker(wb, "halves", 0, out[-2])[-1]
    opened = share.open_link(wb, Session(), f"?prompt={PROMPT}&G=2&T=4&seed=3&reward=brightness&tab=notes"
                                            "&chunks=halves:first=3&estimator=own_final")
    assert opened[0].selected == "notes" and opened[-2].sizes == [3, 1] and opened[-2].credit is None  # no credit


def test_training_names_the_new_chunker(tmp_path, model_dir, halves, brightness):
    CALLS.clear()
    argv = ["--model", str(model_dir), "--device", "cpu", "--group", "2", "--steps", "3", "--chunks", "halves:first=1",
            "--reward", "brightness", "--iterations", "1", "--eval-prompts", "0", "--out", str(tmp_path / "run")]
    assert train_main(argv) == 0
    store = RunStore.open(tmp_path / "run")
    assert store.info().state == "finished" and store.config()["chunks"] == "halves:first=1"
    assert 3 in CALLS  # the trainer cut the 3 trained steps with it
    assert schedule("halves:first=1", 3) == [1, 2]
