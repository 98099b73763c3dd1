"""Renamed keyword arguments keep working for a while: the old name warns and says the new one.

    @renamed(branches="continuations")
    def measure_credit(policy, group, reward_fn, continuations=4, ...): ...

    measure_credit(policy, group, reward_fn, branches=8)  # FutureWarning: ... branches= is now continuations= ...

The command line does the same for its flags (`cli/args.py` RenamedFlag).
"""

from __future__ import annotations

import functools
import warnings

from workbench.core.errors import WorkbenchError

WHY = {"branches": "M, the continuations per state; K is the number of chunks, as in GCPO"}  # old name -> reason


def renamed(**names: str):
    """Decorator: each keyword `old=new` of `names` lets callers pass the argument under its old name, with a
    FutureWarning naming the new one; both names at once is an error."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            for old, new in names.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise WorkbenchError(f"{fn.__name__}() got both {old}= and {new}=: pass only {new}= "
                                         f"({old} is its old name)")
                reason = f" ({WHY[old]})" if old in WHY else ""
                warnings.warn(f"{fn.__name__}(): {old}= is now {new}={reason}; pass {new}=", FutureWarning,
                              stacklevel=2)
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)
        return call
    return wrap
