"""The model picker, the before/after comparison and runs a session can come back to (handlers called directly)."""

from __future__ import annotations

import pytest
from PIL import Image
from support import make_run, shift_of

from workbench.core.files import write_json
from workbench.core.glossary import gloss
from workbench.train.store import CONFIG, RunStore
from workbench.ui import handlers as h
from workbench.ui import objectives as ob
from workbench.ui import policies as pol
from workbench.ui import run_handlers as rh
from workbench.ui.state import BASE, Session
from workbench.ui.workbench import Workbench

PROMPT = "a small blue ring in the center"


def msg(outputs) -> str:
    return outputs[-1].replace("\\", "")


@pytest.fixture(scope="module")
def wb(model_dir, tmp_path_factory):
    wb = Workbench(model=str(model_dir), device="cpu", runs_root=str(tmp_path_factory.mktemp("runs")), curve_prompts=2)
    make_run(wb.jobs.root, model_dir, iterations=(10, 20), name="lesson")
    return wb


def generated(wb, session: Session) -> Session:
    return h.generate(wb, PROMPT, 3, 4, 0.7, 0, "adherence", session)[-2]


def test_the_picker_lists_and_loads_every_kind_of_source(wb, model_dir):
    keys = [key for _, key in wb.sources()]
    run = wb.jobs.root / "lesson"
    assert keys == [BASE, str(run), str(run / "checkpoints" / "iter_0020"), str(run / "checkpoints" / "iter_0010")]
    header = gloss(f"Every tab uses **{model_dir}** (the *policy*, the model fine-tuning trains), computed on **cpu** "
                   "in **float32** numbers.", ("policy",))  # the word hovered: the header is a newcomer's first line
    assert '<abbr title="policy: ' in header
    assert pol.header(wb, Session()) == header.replace("_", "\\_")
    session = generated(wb, Session())
    menu, header, session, gallery, heatmap, rates, *_, status = pol.pick_policy(wb, str(run), session)
    assert menu.value == str(run / "checkpoints" / "iter_0020")
    assert session.source == str(run / "checkpoints" / "iter_0020") and session.group is None and gallery == []
    assert "run lesson, iteration 20" in header and "group made under the previous policy was dropped" in status
    assert shift_of(wb.policy(session.source), model_dir) == 0.02  # every tab samples with the checkpoint
    _, header, session, *_, status = pol.pick_policy(wb, str(run / "checkpoints" / "iter_0010"), session)
    assert "iteration 10" in header and shift_of(wb.policy(session.source), model_dir) == 0.01
    _, header, session, *_, status = pol.pick_policy(wb, str(model_dir), session)  # a model folder typed as a path
    assert session.source == str(model_dir) and "dropped" not in status
    assert "already loaded" in msg(pol.pick_policy(wb, str(model_dir), session))


@pytest.mark.parametrize("path, message", [("/no/such/folder", "'/no/such/folder' is not a folder this app offers"),
                                           ("/", "'/' is not a folder this app offers"),
                                           ("RUNS/nope", "RUNS/nope does not exist"),
                                           ("RUNS", "RUNS is neither a model folder nor a run")])
def test_a_bad_path_is_refused_naming_it_and_the_session_keeps_its_policy(wb, path, message):
    path, message = (text.replace("RUNS", str(wb.jobs.root)) for text in (path, message))
    wb.jobs.root.mkdir(exist_ok=True)
    out = pol.pick_policy(wb, path, Session())
    assert out[-1].startswith("⚠") and message in msg(out) and all(isinstance(v, dict) or v is not None
                                                                     for v in out[:-1])
    assert out[2].__class__.__name__ != "Session"  # gr.skip(): the session is not replaced


def test_compare_with_the_same_policy_gives_identical_maps(wb):
    session = generated(wb, Session())
    figure, images, text, session, status = pol.compare(wb, pol.RUN_BASE, 2, session)
    assert "both sides are the same policy" in status
    a, b = session.comparison.credits
    assert (a.step_credit == b.step_credit).all() and (a.step_classes() == b.step_classes()).all()
    heat = [t for t in figure.data if t.type == "heatmap" and t.name == "step credit"]
    assert len(heat) == 2 and heat[0].z == heat[1].z and heat[0].zmax == heat[1].zmax  # one colour scale
    picture = images["value"]
    assert picture.size[1] > picture.size[0] / 3 * 0.5 and "difference" in text
    before, after = session.comparison.labels  # the caption names which row is which policy
    assert images["label"] == f"Final images, same noise: top row {before}, bottom row {after}"
    assert text.startswith("**In one sentence:** on the same prompt and noise, the mean reward is")
    assert "no change in credit is established" in text  # the same policy twice: every difference is 0


def test_a_new_group_empties_the_before_and_after_section(wb):
    """A new group drops the session's comparison; the section kept the old figure, images and text (chunks and T
    of the old group) until now, as the view skipped its outputs when there was no comparison."""
    session = pol.compare(wb, pol.RUN_BASE, 2, generated(wb, Session()))[3]
    figure, images, text, status = pol.comparison_view(wb, session)
    assert "difference" in text and figure.data and images.__class__.__name__ != "Image"  # shown; images left as is
    new = h.generate(wb, "a small blue ring in the center", 3, 2, 0.7, 1, "adherence", session)[-2]
    figure, images, text, status = pol.comparison_view(wb, new)
    assert text.startswith(pol.NO_COMPARISON) and images is None and not figure.data and "compare" in str(figure.layout)


def test_compare_a_checkpoint_with_its_base_on_the_same_noise(wb):
    run = wb.jobs.root / "lesson"
    session = pol.pick_policy(wb, str(run), Session())[2]
    session = generated(wb, session)
    figure, images, text, session, status = pol.compare(wb, None, 2, session)
    before, after = session.comparison.groups
    assert (before.states[:, 0] == after.states[:, 0]).all() and not (before.images == after.images).all()
    assert session.comparison.labels == (wb.model_path.split("/")[-1], "run lesson @ 20") and status.startswith("✓")
    assert "| step: misattributed among determined |" in text and "points" in text
    chunked = h.chunks_from_spec(wb, "1,3", session)[-2]  # a chunk edit re-chunks the comparison too
    assert chunked.comparison.credits[0].sizes == [1, 3]
    assert "no group yet" in msg(pol.compare(wb, None, 2, Session()))
    figure, status = ob.objectives_compare(wb, 0.2, chunked)  # the push maps of both groups
    credits = [t for t in figure.data if t.name == "credit"]
    assert [[list(row) for row in c.z] for c in credits] == [c.step_credit.tolist() for c in chunked.comparison.credits]
    pushes = [t for t in figure.data if t.type == "heatmap" and "|" in (t.name or "")]
    assert {t.name.split("|")[0] for t in pushes} == {"policy0", "policy1"} and len(pushes) % 2 == 0
    assert "chunks 1,3" in status and "no comparison yet" in msg(ob.objectives_compare(wb, 0.2, Session()))


def test_a_finished_run_comes_back_in_a_new_session(wb, model_dir):
    store = RunStore(wb.jobs.root / "lesson")
    write_json(store.path / CONFIG, {**store.config(), "eval_cfg": True})
    for it, acc in ((0, 0.0), (20, 32 / 49)):
        store.append_metrics({"iteration": it, "reward/mean": acc, "eval/cross_accuracy": acc,
                              "eval_cfg/cross_accuracy": acc / 2})
        store.save_samples(it, Image.new("RGB", (8, 4), (it * 10, 0, 0)), prefix="eval")
    fresh = Workbench(model=str(model_dir), device="cpu", runs_root=str(wb.jobs.root))  # a restarted app
    curves, before, now, heldout, bar, line, status = rh.runs_show(fresh, "lesson")
    assert "iteration 0" in before["label"] and "iteration 20" in now["label"] and before["value"] is not None
    assert "finished" in line and "iteration 20/20" in bar and status.startswith("✓")
    table = rh.refresh_runs(fresh)[0]
    row = dict(zip(rh.RUN_COLUMNS, table.values.tolist()[0]))
    assert (row["state"], row["held-out accuracy (no CFG)"], row["held-out accuracy (CFG)"]) == ("finished", 0.65, 0.33)
    assert row["last reward/mean"] == 0.653  # not 0.6530612244897959
    *panel, timer, keys, text = rh.poll_run(fresh, Session())  # nothing running: the newest run on disk
    assert "lesson" in text and "newest run on disk" in text and not timer.active
    *panel, timer, keys, text, session, status = rh.show_run(fresh, "lesson", Session())
    assert session.run_id == "lesson" and "finished" in text
    assert "not found" in msg(rh.show_run(fresh, "nope", Session()))


def test_the_progress_bar_says_elapsed_and_left():
    from workbench.ui.jobs import RunView

    metrics = [{"iteration": it, "time/iteration_s": 5.0} for it in range(1, 21)]  # 5 s each, no evaluation
    view = RunView("r", "running", 20, 80, "", metrics, None, started=1000.0, updated=1100.0)
    bar = rh.progress_html(view, now=1100.0)
    assert "iteration 20/80" in bar and "1 min 40 s elapsed" in bar and "about 5 min 00 s left (± 30 s)" in bar
    assert "width:25.0%" in bar
    done = rh.progress_html(RunView("r", "finished", 80, 80, "", [], None, started=1000.0, updated=1300.0))
    assert "5 min 00 s elapsed · finished<" in done and " left" not in done


def test_learn_closes_with_a_cross_group_before_and_after_the_lesson(model_dir, tmp_path, monkeypatch):
    from workbench.ui import learn

    wb = Workbench(model=str(model_dir), device="cpu", runs_root=str(tmp_path / "runs"))
    assert "no crosses lesson with a checkpoint" in msg(learn.learn_after(wb, Session()))
    make_run(wb.jobs.root, model_dir, iterations=(10,), name="other")  # not the lesson: never picked
    make_run(wb.jobs.root, model_dir, iterations=(80,), name="crosses", task="crosses")
    monkeypatch.setitem(learn.LEARN, "group", 3)
    monkeypatch.setitem(learn.LEARN, "continuations", 2)
    figure, images, text, session, status = learn.learn_after(wb, Session())
    assert session.comparison.labels == (model_dir.name, "run crosses @ 80") and status.startswith("✓")
    assert session.comparison.groups[0].prompt == learn.LESSON_CROSS and session.comparison.credits[0].sizes == \
        [1, 2, 2, 3, 9]
    assert "shape_match" in text and "| step: misattributed among determined |" in text


def test_before_any_lesson_ran_learn_compares_with_the_shipped_lesson(tmp_path, monkeypatch):
    from workbench.ui import learn

    wb = Workbench(model=None, device="cpu", runs_root=str(tmp_path / "runs"))  # the embedded model, no run yet
    monkeypatch.setitem(learn.LEARN, "group", 2)
    monkeypatch.setitem(learn.LEARN, "continuations", 2)
    figure, images, text, session, status = learn.learn_after(wb, Session())
    assert session.comparison.labels == ("embedded model", "crosses-lesson") and status.startswith("✓")


def test_the_lesson_says_how_long_it_takes_before_start(model_dir, tmp_path):
    wb = Workbench(model=str(model_dir), device="cpu", runs_root=str(tmp_path / "runs"))
    about = rh.load_lesson(wb, "crosses")[-2]  # the machine is not timed yet: the shipped figure, labelled
    assert ("**Time**: not measured on this machine yet; the figure shipped with the lesson: about 6 minutes on a "
            "fast 2-core laptop and 13 on one half as fast") in about
    assert "last run here" not in about
    run = make_run(wb.jobs.root, model_dir, iterations=(80,), name="done", task="crosses")
    write_json(run / "status.json", {"state": "finished", "iteration": 80, "started": 1000.0, "updated": 1290.0})
    assert "its last run here, done, took 4 min 50 s" in rh.load_lesson(wb, "crosses")[-2]


def test_switching_the_policy_leaves_a_running_fine_tune_alone(model_dir, tmp_path):
    from app_support import fake_workbench, start, wait_for

    wb = fake_workbench(tmp_path, model_dir)
    session = start(wb, iterations=200)[2]
    make_run(wb.jobs.root, model_dir, iterations=(10,), name="older")
    session = pol.pick_policy(wb, str(wb.jobs.root / "older"), session)[2]
    assert session.run_id is not None and wb.jobs.busy() == session.run_id  # still the session's, still running
    assert wait_for(lambda: len(RunStore(wb.jobs.root / session.run_id).metrics()) >= 2)
    wb.jobs.shutdown()
