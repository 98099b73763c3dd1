"""Reuse freed memory during a computation, give it back to the operating system after it, and keep Python's
garbage collector out of start-up.

After a Generate, a credit measurement or the Objectives' inner updates, the tensors those made are freed,
but glibc's allocator keeps the pages in its arenas (one per thread that allocated: Gradio runs each handler in
a worker thread), so the app's resident memory stays at its peak. `release_freed` collects Python's garbage and
asks glibc to return free pages (`malloc_trim(0)`); the guard of every app handler calls it after a handler
that ran long enough for this to matter (`workbench/ui/guard.py`). Elsewhere (no glibc) it only collects.

A full collection walks every object the process holds: ~550,000 once torch, diffusers, gradio and the model
are loaded, 0.35 s per call on this machine's class, paid before the handler's outputs go out. `settle`
(called by the app once the model is loaded, by the CLI once its command's model is) moves what exists then
out of the collector's reach (`gc.freeze`): later collections look only at what the process made since, in
milliseconds.

Start-up is where Python 3.11's collector costs most: importing torch, diffusers, transformers, gradio and the
interface leaves ~525,000 live objects and ~350,000 in garbage cycles, and the collector walks the growing heap
in 9 full collections and ~1,700 young ones on the way. `defer_collection` (the first thing the CLI, the memory
probe and the tests' workers do) turns the collector off until `settle` (`end_start_up`, once the model is
loaded), which collects the imports' garbage once, freezes what is left and turns the collector back on: a
start-up (those imports and the embedded model) took 8.2 s of CPU instead of 9.4 (medians,
`140b72a:scripts/bench_startup.py`, a probe since removed). The app does not defer (app.py says why) and settles
once its model is loaded.

Within a computation the opposite matters. glibc serves an allocation over its mmap threshold (128 KiB at
first, then adjusted) with fresh pages from the kernel, and returns the free top of its heap to the kernel once
it passes the trim threshold; a forward pass of the embedded model on 256 latents frees and makes again tens of
megabytes of temporaries, so every pass faulted its temporaries in afresh: 263,070 page faults in one credit
measurement at the defaults (`WORKBENCH_HEAP=default workbench bench credit`). `reuse_freed_memory` (called
once by the app, the CLI, the memory probe and the tests) fixes the mmap threshold at glibc's maximum, keeps up
to `TRIM_THRESHOLD` of free heap, and puts every thread on one arena, so temporaries come back from the heap
already mapped: about 2,000 faults for the same measurement (docs/performance.md). The pages still go back to
the system after long app handlers (`release_freed`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import os

MMAP_THRESHOLD = 32 << 20  # bytes: glibc's largest mmap threshold (64-bit); smaller blocks come from the heap
TRIM_THRESHOLD = 512 << 20  # bytes of free heap top kept between computations instead of unmapped at every free
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # mallopt parameters (glibc malloc.h)


@functools.cache
def _libc(name: str):
    """A glibc function by name, or None where the C library has none (macOS, musl, Windows)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


def _trim():
    return _libc("malloc_trim")


def reuse_freed_memory() -> bool:
    """Have glibc keep freed blocks for the next allocations instead of unmapping them (see the module's
    docstring); True when the C library took every setting. `WORKBENCH_HEAP=default` in the environment leaves
    glibc's defaults (for a comparison, or a process that must not keep freed memory)."""
    mallopt = _libc("mallopt")
    if mallopt is None or os.environ.get("WORKBENCH_HEAP") == "default":
        return False
    settings = ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD), (_M_ARENA_MAX, 1))
    return all([mallopt(param, value) == 1 for param, value in settings])


_deferred = False  # defer_collection ran and no settle since


def defer_collection() -> None:
    """No cyclic garbage collection until `settle` (start-up: the imports and the model load; module docstring)."""
    global _deferred
    _deferred = True
    gc.disable()


def settle() -> None:
    """Collect once, freeze every live object (modules, the model, the interface) out of later collections, and
    turn the collector on again after `defer_collection`."""
    gc.collect()
    gc.freeze()
    resume_collection()


def resume_collection() -> None:
    """The collector on again without a collection, where `defer_collection` ran and no model loaded since (a
    command that needed none, or failed first; the CLI called in a process that goes on)."""
    global _deferred
    if _deferred:
        _deferred = False
        gc.enable()


def end_start_up() -> None:
    """`settle`, in a process that deferred collection for its start-up (called when a model has loaded, and by the
    tests' workers once the test files are imported); nothing in any other (a notebook, the app, a program that
    imports the library: their objects stay the collector's)."""
    if _deferred:
        settle()


def release_freed() -> bool:
    """Collect garbage and return free heap pages to the OS; True when the allocator could be asked to."""
    gc.collect()
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
