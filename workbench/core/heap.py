"""Give memory freed by a long computation back to the operating system.

After a Generate, a credit measurement or the Objectives' inner updates, the tensors those made are freed,
but glibc's allocator keeps the pages in its arenas (one per thread that allocated: Gradio runs each handler in
a worker thread), so the app's resident memory stays at its peak. `release_freed` collects Python's garbage and
asks glibc to return free pages (`malloc_trim(0)`); the guard of every app handler calls it after a handler
that ran long enough for this to matter (`workbench/ui/guard.py`). Elsewhere (no glibc) it only collects.

A full collection walks every object the process holds: ~550,000 once torch, diffusers, gradio and the model
are loaded, 0.35 s per call on this machine's class, paid before the handler's outputs go out. `settle`
(called by the app once the model is loaded) moves what exists then out of the collector's reach
(`gc.freeze`): later collections look only at what the session made since, in milliseconds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc


@functools.cache
def _trim():
    """glibc's malloc_trim, or None where the C library has none (macOS, musl, Windows)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def settle() -> None:
    """Collect once, then freeze every live object (modules, the model, the interface) out of later collections."""
    gc.collect()
    gc.freeze()


def release_freed() -> bool:
    """Collect garbage and return free heap pages to the OS; True when the allocator could be asked to."""
    gc.collect()
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
