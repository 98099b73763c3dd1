"""Memory the app no longer needs goes away: a replaced group is freed, long handlers return freed pages."""

from __future__ import annotations

import gc
import weakref

import pytest

from workbench.core import heap
from workbench.ui import guard
from workbench.ui import handlers as h
from workbench.ui.state import Session

PROMPT = "a large red circle in the top left on a white background"


class Quiet:
    def __call__(self, *a, **k):
        pass

    def tqdm(self, it, *a, **k):
        return it



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




def test_a_deferred_start_up_collects_once_the_model_is_loaded(monkeypatch):
    """The CLI defers the collector through its imports; a model load ends the deferral (collect,
    freeze, collector on); a program that merely imports the library keeps its collector as it was."""
    from workbench.cli.main import main as cli
    from workbench.models.adapters import load_model

    monkeypatch.setattr(heap, "_deferred", False)
    frozen = gc.get_freeze_count()
    load_model(device="cpu")
    assert gc.isenabled() and gc.get_freeze_count() <= frozen, "a plain load changed the caller's collector"
    try:
        heap.defer_collection()
        assert not gc.isenabled()
        load_model(device="cpu")
        assert gc.isenabled() and gc.get_freeze_count() > frozen
        assert cli(["chunks", "--steps", "16", "--method", "fixed", "--sizes", "2,3,4,7"]) == 0  # no model loads
        assert gc.isenabled(), "a command that loaded no model left the collector off"
        with pytest.raises(SystemExit):  # argparse refuses the command before anything loads
            cli(["sample", "--prompt", "a red circle", "--steps", "0"])
        assert gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()


BLOCK = 30 << 20  # bytes: over glibc's first mmap threshold (128 KiB) and any it can have adjusted to after the
# imports, under the workbench's (32 MiB)
HEAP = f"""
BLOCK = {BLOCK}
import ctypes, torch
from workbench.core.heap import reuse_freed_memory
class Mallinfo2(ctypes.Structure):  # glibc >= 2.33: bytes the allocator holds
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = Mallinfo2
took = reuse_freed_memory()
torch.manual_seed(0)
def block():
    return torch.nn.ModuleList([torch.nn.LayerNorm(96), torch.nn.Linear(96, 288), torch.nn.Linear(96, 96),
                                torch.nn.Linear(96, 384), torch.nn.GELU("tanh"), torch.nn.Linear(384, 96)])
blocks = [block() for _ in range(4)]
seen = []
def look():  # the heap's size and the bytes held in separate mappings, now
    info = mallinfo2()
    seen.append((info.arena, info.hblkhd))
def forward(x):  # the embedded model's blocks in miniature: temporaries of several sizes alive together
    for norm, qkv, out, up, act, down in blocks:
        h = norm(x)
        q, k, v = qkv(h).chunk(3, -1)
        look()
        x = x + out(torch.nn.functional.scaled_dot_product_attention(q, k, v))
        look()
        u = act(up(norm(x)))
        look()
        x = x + down(u)
        del u
        look()
    return x
with torch.no_grad():
    look()
    first = torch.ones(BLOCK // 4)  # the first large block the process asks for
    look()
    del first
    look()
    (heap0, mapped0), (heap1, mapped1), (heap2, _) = seen
    x = torch.randn(64, 80, 96)  # 64 latents of 80 tokens
    forward(x)
    seen.clear()
    for _ in range(3):
        forward(x)
mapped = [m for _, m in seen]
print(took, mapped1 - mapped0, heap1 - heap0, heap1 - heap2, max(mapped) - min(mapped),
      sum(b[0] < a[0] for a, b in zip(seen, seen[1:])))
"""


def _glibc_accounting() -> bool:
    """glibc >= 2.33, whose mallinfo2 the heap test reads."""
    import ctypes
    import sys

    return sys.platform.startswith("linux") and hasattr(ctypes.CDLL(None), "mallinfo2")


@pytest.mark.skipif(not _glibc_accounting(), reason="glibc's mallinfo2 (glibc >= 2.33)")
def test_a_forward_pass_takes_its_temporaries_from_memory_already_held():
    """glibc's own accounting (mallinfo2), read inside forward passes of the embedded model's blocks in miniature.
    With glibc's defaults a 30 MiB block gets a mapping of its own (fresh pages from the kernel, unmapped when
    freed); with the workbench's setting (app, CLI, trainer; core/heap.py) it comes from the heap and stays there
    when freed, no temporary of a pass is mapped separately, and the heap never shrinks during a pass.

    Page-fault counts, which this test read before, depend on the machine (transparent huge pages, the kernel's
    reclaim): 7,800 to 12,900 a pass with the defaults on the development machine, 369 on CI's. What the setting
    saves is a benchmark figure (`workbench bench credit`, docs/performance.md)."""
    import os
    import subprocess
    import sys

    def heap(setting: str) -> list[int]:
        env = {**os.environ, "WORKBENCH_HEAP": setting, "OMP_NUM_THREADS": "1"}
        took, *numbers = subprocess.run([sys.executable, "-c", HEAP], env=env, capture_output=True, text=True,
                                        check=True).stdout.split()
        return [took == "True", *map(int, numbers)]

    took, mapped, grew, _, _, _ = heap("default")
    assert not took and mapped >= BLOCK and grew < BLOCK, (mapped, grew)  # its own mapping, not the heap
    took, mapped, _, given_back, pass_mapped, shrank = heap("reuse")
    assert took and mapped == 0  # from the heap
    assert given_back == 0  # kept when freed
    assert pass_mapped == 0 and shrank == 0, (pass_mapped, shrank)  # passes reuse what the heap holds
