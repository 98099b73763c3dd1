"""Memory the app no longer needs goes away: a replaced group is freed, long handlers return freed pages."""

from __future__ import annotations

import gc
import weakref

import pytest

from workbench.core import heap
from workbench.ui import guard
from workbench.ui import handlers as h
from workbench.ui.state import Session
from workbench.ui.workbench import Workbench

PROMPT = "a large red circle in the top left on a white background"


class Quiet:
    def __call__(self, *a, **k):
        pass

    def tqdm(self, it, *a, **k):
        return it


@pytest.fixture(scope="module")
def wb(tmp_path_factory):
    from workbench.models.embedded import build_embedded, save_embedded

    model = save_embedded(build_embedded(seed=0), tmp_path_factory.mktemp("model"))
    return Workbench(model=str(model), device="cpu", runs_root=str(tmp_path_factory.mktemp("runs")))


def test_a_new_group_frees_the_old_one_and_its_credit(wb):
    session = h.generate(wb, PROMPT, 3, 4, 0.7, 0, "adherence", Session(), progress=Quiet())[-2]
    session = h.attribute(wb, 2, session, progress=Quiet())[-2]
    old_states, old_credit = weakref.ref(session.group.states), weakref.ref(session.credit.continuation_rewards)
    session = h.generate(wb, PROMPT, 3, 4, 0.7, 1, "adherence", session, progress=Quiet())[-2]
    gc.collect()
    assert session.credit is None
    assert old_states() is None and old_credit() is None, "the replaced group's tensors are still referenced"


def test_long_handlers_return_freed_memory(monkeypatch):
    calls = []
    monkeypatch.setattr(guard, "release_freed", lambda: calls.append(1))

    @guard.guarded(1)
    def handler():
        return ("done",)

    monkeypatch.setattr(guard, "LONG_HANDLER_S", 10.0)
    handler()
    assert calls == []  # a fast handler (a chunk edit) does not pay for a collection
    monkeypatch.setattr(guard, "LONG_HANDLER_S", -1.0)
    handler()
    assert calls == [1]

    @guard.guarded(2)
    def stream():
        yield "a", "b"
        raise RuntimeError("boom")

    assert list(stream())[-1][-1].startswith("⚠ Unexpected error")
    assert calls == [1, 1]  # a generator that failed still releases


def test_release_freed_asks_glibc_where_there_is_one():
    import sys

    assert heap.release_freed() == (heap._trim() is not None)
    if sys.platform.startswith("linux"):
        assert heap._trim() is not None


def test_settled_objects_leave_the_walk_and_new_garbage_is_still_collected():
    class Node:
        pass

    heap.settle()
    try:
        assert gc.get_freeze_count() > 0, "settle froze nothing: every later collection walks the whole heap"
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        ref = weakref.ref(a)
        del a, b
        heap.release_freed()
        assert ref() is None, "garbage made after settle was not collected"
    finally:
        gc.unfreeze()




FAULTS = """
import resource, torch
from workbench.core.heap import reuse_freed_memory
print(reuse_freed_memory())
torch.manual_seed(0)
def block():
    return torch.nn.ModuleList([torch.nn.LayerNorm(96), torch.nn.Linear(96, 288), torch.nn.Linear(96, 96),
                                torch.nn.Linear(96, 384), torch.nn.GELU("tanh"), torch.nn.Linear(384, 96)])
blocks = [block() for _ in range(4)]
def forward(x):  # the embedded model's blocks in miniature: temporaries of several sizes alive together
    for norm, qkv, out, up, act, down in blocks:
        h = norm(x)
        q, k, v = qkv(h).chunk(3, -1)
        x = x + out(torch.nn.functional.scaled_dot_product_attention(q, k, v))
        x = x + down(act(up(norm(x))))
    return x
x = torch.randn(64, 80, 96)  # 64 latents of 80 tokens
with torch.no_grad():
    for _ in range(2):
        forward(x)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        forward(x)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 5)
"""


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="glibc and page-fault counts")
def test_a_forward_pass_reuses_freed_memory_instead_of_faulting_in_fresh_pages():
    """The embedded model's blocks in miniature on 64 latents: glibc's defaults fault their temporaries in afresh on
    every pass (measured 12,864 faults a pass); the workbench's setting (app, CLI, trainer; core/heap.py) reuses
    freed memory (96)."""
    import os
    import subprocess
    import sys

    def faults(setting: str) -> tuple[str, int]:
        env = {**os.environ, "WORKBENCH_HEAP": setting, "OMP_NUM_THREADS": "1"}
        took, count = subprocess.run([sys.executable, "-c", FAULTS], env=env, capture_output=True, text=True,
                                     check=True).stdout.split()
        return took, int(count)

    (kept, default), (took, reused) = faults("default"), faults("reuse")
    assert kept == "False" and took == "True"
    assert default > 2000 and reused < default / 10, (default, reused)
