"""Class mode (ui/classroom.py, ui/classroom_view.py): a student cannot stop another's run, load a path outside the
allowed folders or ask above the teacher's caps; the class view adds up several sessions' measurements; the served
class asks for its password, and the app outside class mode is as before."""

from __future__ import annotations

import math
import re
import shutil
import sys
from dataclasses import replace

import gradio as gr
import pytest
from app_support import FAKE_TRAIN, PROMPT, free_port, msg, wait_for

from workbench.core.errors import WorkbenchError
from workbench.train.allowed import AllowedFolders
from workbench.ui import classroom_view as cv
from workbench.ui import handlers as h
from workbench.ui import objectives as ob
from workbench.ui import policies as pol
from workbench.ui import run_handlers as rh
from workbench.ui import share
from workbench.ui.classroom import ClassCaps, ClassRoom, ClassWorkbench
from workbench.ui.state import Session
from workbench.ui.workbench import Workbench

FORM = dict(objective="chunk_grpo", reward="adherence", chunks="2,2", lr=3e-5, iterations=40, group=2, steps=4,
            lora_rank=0, sde="flow_grpo", window="", lesson=rh.NO_LESSON)
REFUSED = "is not a folder this app offers"


def request(name: str) -> gr.Request:
    return gr.Request(session_hash=name)


def class_workbench(tmp_path, model_dir, **kw) -> ClassWorkbench:
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAIN)
    return ClassWorkbench(model=str(model_dir), device="cpu", runs_root=str(tmp_path / "runs"), curve_prompts=2,
                          train_command=[sys.executable, str(script)], classroom=ClassRoom("pw", "tok"), **kw)


def test_a_student_cannot_stop_another_students_run_the_starter_and_the_teacher_can(tmp_path, model_dir):
    wb = class_workbench(tmp_path, model_dir)
    start, stop = cv.handler(wb, rh.start_run), cv.handler(wb, rh.stop_run)
    alice, bob, teacher = request("alice"), request("bob"), request("teacher")
    out = start(alice, *FORM.values(), Session())
    mine, run = out[2], out[2].run_id
    assert wait_for(lambda: wb.jobs.view(run).state == "running")
    for session in (Session(), replace(Session(), run_id=run)):  # Bob's own page, and Bob following Alice's run
        assert msg(stop(bob, session)) == (f"⚠ run {run} was started by another session: only that session or the "
                                           "teacher can stop it")
    assert not wb.jobs.view(run).done and not (wb.jobs.root / run / "STOP").exists()
    assert rh.CLASS_ELSEWHERE in rh.poll_run(wb, Session())[-1]  # Bob reads why his Stop is off
    assert not cv.may_stop(wb, bob, Session()) and cv.may_stop(wb, alice, mine)  # Stop off in Bob's page only
    assert msg(stop(alice, mine)).startswith(f"✓ stop requested: run {run}")
    assert wait_for(lambda: wb.jobs.view(run).done)

    run = start(alice, *FORM.values(), Session())[2].run_id
    assert wait_for(lambda: wb.jobs.view(run).state == "running")
    assert not wb.classroom.unlock("not the token", teacher)
    assert msg(stop(teacher, Session())).startswith("⚠ run")
    assert wb.classroom.unlock("tok", teacher)
    assert msg(stop(teacher, Session())).startswith(f"✓ stop requested: run {run}")
    assert wait_for(lambda: wb.jobs.view(run).done)


def test_outside_class_mode_the_handlers_are_the_plain_ones(tmp_path, model_dir):
    wb = Workbench(model=str(model_dir), device="cpu", runs_root=str(tmp_path / "runs"))
    assert cv.handler(wb, rh.stop_run).func is rh.stop_run and cv.long_work(wb, {"a": 1}) == {"a": 1}


@pytest.fixture(scope="module")
def outside(model_dir, tmp_path_factory):
    """A valid model folder outside every allowed folder, and a folder of runs holding a link to it."""
    root = tmp_path_factory.mktemp("outside")
    model = shutil.copytree(model_dir, root / "model")
    return model


@pytest.mark.parametrize("where", ["absolute", "dotdot", "symlink", "missing", "adapter", "etc"])
def test_a_student_loads_nothing_outside_the_allowed_folders(tmp_path, model_dir, outside, where):
    wb = class_workbench(tmp_path, model_dir)
    wb.jobs.root.mkdir(parents=True, exist_ok=True)
    (wb.jobs.root / "escape").symlink_to(outside, target_is_directory=True)
    dotdot = wb.jobs.root / ".." / ".." / outside.relative_to(outside.parents[1])
    key = {"absolute": str(outside), "dotdot": str(dotdot), "symlink": str(wb.jobs.root / "escape"),
           "missing": str(outside.parent / "nothing-here"), "adapter": f"base + {outside}", "etc": "/etc"}[where]
    status = msg(pol.pick_policy(wb, key, Session()))
    assert REFUSED in status and status.startswith("⚠")
    link = share.open_link(wb, Session(), "?" + share.urlencode({"prompt": PROMPT, "model": key, "G": 3, "T": 4}))
    assert REFUSED in msg(link)
    assert wb._policies == {}  # nothing was loaded


def test_a_model_in_an_allowed_folder_loads(tmp_path, model_dir, outside):
    wb = class_workbench(tmp_path, model_dir, models=(str(outside.parent),))
    assert msg(pol.pick_policy(wb, str(outside), Session())).startswith("✓")


def test_the_refusal_quotes_the_path_up_to_200_characters_and_says_where_models_come_from(tmp_path):
    allowed = AllowedFolders.of(tmp_path / "runs")
    assert allowed.check(str(tmp_path / "runs" / "demo")) == str(tmp_path / "runs" / "demo")
    why = (" is not a folder this app offers: pick a run or a model from the list (the app loads runs from its runs "
           "folder, the shipped models and the folders named at its start with --models)")
    with pytest.raises(WorkbenchError, match="^" + re.escape("'/etc'" + why) + "$"):
        allowed.check("/etc")
    long = "/" + "x" * 300
    with pytest.raises(WorkbenchError, match="^" + re.escape("'/" + "x" * 193 + "...'" + why) + "$"):  # 199 characters
        allowed.check(long)


@pytest.fixture(scope="module")
def sampled_here(wb):
    """A session with a G=3, T=4 group and its M=2 credit (the plain app's), for the handlers' caps."""
    session = h.generate(wb, PROMPT, 3, 4, 0.7, 0, "adherence", Session())[-2]
    return h.attribute(wb, 2, session)[-2]


def test_every_request_is_held_to_the_teachers_caps(tmp_path, model_dir, sampled_here):
    wb = class_workbench(tmp_path, model_dir)
    assert msg(h.generate(wb, PROMPT, 12, 4, 0.7, 0, "adherence", Session())) == (
        "⚠ group size G is at most 8 in this class (the teacher's cap), got 12")
    assert "steps T is at most 16" in msg(h.generate(wb, PROMPT, 4, 20, 0.7, 0, "adherence", Session()))
    assert "continuations (M) is at most 4" in msg(h.attribute(wb, 8, sampled_here))
    assert "continuations (M) is at most 4" in msg(pol.compare(wb, None, 8, sampled_here))
    assert "budget (continuations) is at most 480" in msg(list(h.refine_credit(wb, 1000, sampled_here))[-1])
    assert "inner updates N is at most 3" in msg(ob.objectives_compute(wb, 5, 1e-4, 1e-4, "chunk_grpo", None,
                                                                       sampled_here))
    link = share.open_link(wb, Session(), "?" + share.urlencode({"prompt": PROMPT, "G": 12, "T": 4}))
    assert "group size G is at most 8" in msg(link)

    student, teacher = request("student"), request("teacher")
    with pytest.raises(WorkbenchError, match="only the teacher can set the caps"):
        wb.classroom.set_caps(student, group=16)
    wb.classroom.unlock("tok", teacher)
    with pytest.raises(WorkbenchError, match="the cap on group size G must be a whole number in 2..16"):
        wb.classroom.set_caps(teacher, group=40)
    wb.classroom.set_caps(teacher, group=2)
    assert "group size G is at most 2" in msg(h.generate(wb, PROMPT, 3, 4, 0.7, 0, "adherence", Session()))
    assert ClassCaps().group == 8  # the defaults: the app's own, so the Learn path fits


def test_the_class_view_adds_up_several_sessions_measurements(tmp_path, model_dir):
    wb = class_workbench(tmp_path, model_dir)
    room, measure = wb.classroom, cv.handler(wb, h.attribute)
    shares = []
    for seed, who in enumerate(["s1", "s2", "s3", "quiet"]):
        if who == "quiet":
            room.opt(request(who), False)
        session = h.generate(wb, PROMPT, 3, 4, 0.7, seed, "adherence", Session())[-2]
        session = measure(request(who), 2, session, "ode")[-2]  # deterministic: every cell with credit counts
        rates = session.credit.rates(session.z)
        shares.append((rates.step.misattributed, rates.chunk.misattributed))
    assert all(math.isfinite(s) for pair in shares for s in pair)
    rows = room.measurements()
    assert [m.student for m in rows] == [1, 2, 3]  # the opted-out session is not counted
    assert [x for m in rows for x in (m.step, m.chunk)] == pytest.approx([x for pair in shares[:3] for x in pair])
    assert all(m.link.startswith("/?model=") and "tab=attribution" in m.link for m in rows)

    hidden = cv.class_view(room, request("s1"))
    assert hidden[0].startswith("*The teacher has not shown") and hidden[2] == ""
    with pytest.raises(WorkbenchError, match="only the teacher"):
        room.show(request("s1"), True)
    room.unlock("tok", request("teacher"))
    room.show(request("teacher"), True)
    summary, figure, table, seen = cv.class_view(room, request("s1"))
    steps = [s for s, _ in shares[:3]]
    mean = sum(steps) / 3
    sd = math.sqrt(sum((s - mean) ** 2 for s in steps) / 2)
    assert f"steps {100 * mean:.0f} % ± {100 * sd:.0f} % (n = 3)" in summary
    assert table.count("[open](/?model=") == 3
    assert len([t for t in figure.data if t.type == "box"]) == 2
    assert cv.class_view(room, request("s1"), seen)[0] == gr.skip()  # unchanged: nothing is sent again
    room.opt(request("s2"), False)
    assert [m.student for m in room.measurements()] == [1, 3]


@pytest.fixture(scope="module")
def class_server(model_dir, tmp_path_factory):
    from app import create_app
    from workbench.ui.launch import launch_options

    room = ClassRoom("class-pw", "teacher-tok")
    demo, wb = create_app(str(model_dir), device="cpu", runs_root=str(tmp_path_factory.mktemp("runs")),
                          classroom=room)
    port = free_port()
    demo.queue().launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True,
                        auth=room.login, **launch_options())
    assert "class-intro" in ids(demo) and "class-teacher" in ids(demo)
    yield f"http://127.0.0.1:{port}/", wb
    demo.close()


def ids(demo) -> set[str]:
    return {c.get("props", {}).get("elem_id") for c in demo.config["components"]}


def test_a_served_class_asks_for_its_password_and_holds_clients_to_the_caps(class_server):
    from gradio_client import Client

    url, wb = class_server
    with pytest.raises(Exception):  # noqa: B017 - gradio_client's own error for a refused login
        Client(url, verbose=False, auth=("someone", "wrong"))
    client = Client(url, verbose=False, auth=("someone", "class-pw"))
    *_, status = client.predict(PROMPT, 12, 4, 0.7, 0, "adherence", api_name="/generate")
    assert status == "⚠ group size G is at most 8 in this class (the teacher's cap), got 12"
    *_, status = client.predict(PROMPT, 3, 4, 0.7, 0, "adherence", api_name="/generate")
    assert status.startswith("✓ sampled G=3")
    *_, status = client.predict(2, "mc", True, 2.0, "auto", api_name="/attribute")
    assert status.startswith("✓ measured credit") and len(wb.classroom.measurements()) == 1
    _, status = client.predict(api_name="/stop_run")  # the session comes in through gr.Request, the inputs after it
    assert status == "⚠ this session has not started a run and no run is using the device"


def test_outside_class_mode_a_single_user_needs_no_login(model_dir, tmp_path):
    import urllib.request

    from app import create_app

    demo, wb = create_app(str(model_dir), device="cpu", runs_root=str(tmp_path / "runs"))
    assert not hasattr(wb, "classroom") and "class-intro" not in ids(demo)
    port = free_port()
    demo.queue().launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/config") as answer:
            assert answer.status == 200
    finally:
        demo.close()


def test_the_teachers_link_opens_no_view(tmp_path, model_dir):
    wb = class_workbench(tmp_path, model_dir)
    assert share.open_link(wb, Session(), "?teacher=tok")[-1] == ""  # nothing sampled, no message


def test_the_load_checks_section_replaces_itself_in_the_page(tmp_path):
    import importlib.util
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "bench" / "class_load.py"
    spec = importlib.util.spec_from_file_location("class_load", bench)
    load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(load)
    row = {"n": 3, "wait_p50": 1.0, "wait_p95": 2.0, "time_p50": 3.0, "time_p95": 4.0, "wait_max": 2.0}
    figures = {"students": 3, "date": "today", "cores": 2, "load_before": [1.0], "load_after": [2.0], "stagger_s": 1,
               "errors": [], "wall_s": 9.0, "peak_rss_mb": 700.0, "summary": {k: row for k in (*load.STEPS, "all")}}
    assert load.summary([{"call": "generate", "wait": w, "time": 2 * w} for w in (1, 2, 3, 4, 20)])["generate"][
        "wait_p95"] == 20
    page = tmp_path / "performance.md"
    page.write_text("# Performance\n\n## Credit\n\ntext\n")
    load.write_into(page, load.class_lines(figures))
    load.write_into(page, load.class_lines({**figures, "errors": ["one"]}))
    text = page.read_text()
    assert text.count(load.SECTION) == 1 and "**1 errors**" in text and text.startswith("# Performance\n\n## Credit")


def test_the_class_flags_need_class_mode(capsys):
    from app import class_room, parse_args

    with pytest.raises(SystemExit):
        parse_args(["--password", "x"])
    assert "--password and --teacher-token belong to --class" in capsys.readouterr().err
    room = class_room(parse_args(["--class", "--teacher-token", "t"]))
    assert room.token == "t" and room.password and room.login("anyone", room.password)
    assert not room.login("anyone", room.password + "x")
