"""Waits on a notebook kernel's replies in slices of a second (nbmake's runs; installed by tests/conftest.py).

Two fresh-clone `make test` runs took 504-544 s instead of ~290 with every test passing, both times because
notebooks/03_finetune.ipynb took ~300 s more than its ~20 (317 s on 2026-12-01 with ipykernel 7; 320 s on
2026-12-02 with ipykernel 6.31, after ipykernel had been pinned below 7 for it). py-spy on the first showed nbclient
waiting on the cell's reply while the kernel sat idle. 300 s is nbmake's cell timeout (`--nbmake-timeout`), which
nbclient passes to jupyter_client's `get_msg` as the wait for the reply; when it ends, pyzmq's asyncio poller polls
the socket once more (`_AsyncPoller.poll`: `trigger_timeout`, then `poll(0)`), finds the reply that had been waiting
and returns it as if it had just come: the test passes ~300 s late. So the reply had arrived and the wake-up on the
socket's file descriptor was missed. Waiting in slices of at most a second makes pyzmq look again every second:
a missed wake-up then costs at most a second, and a cell still has nbmake's 300 s before it counts as timed out.
"""

from __future__ import annotations

from queue import Empty
from time import monotonic

SLICE = 1.0  # seconds between two looks at the socket


async def get_msg_in_slices(self, timeout: float | None = None) -> dict:
    """`jupyter_client.channels.AsyncZMQSocketChannel.get_msg` (a message, or Empty once `timeout` seconds have
    passed; None waits for ever), polling the socket at most SLICE seconds at a time."""
    deadline = None if timeout is None else monotonic() + timeout
    while True:
        left = SLICE if deadline is None else min(SLICE, max(0.0, deadline - monotonic()))
        if await self.socket.poll(int(left * 1000)):
            return await self._recv()
        if deadline is not None and monotonic() >= deadline:
            raise Empty


def install() -> bool:
    """Replace the async channel's `get_msg` (nbclient's, in this process); False where jupyter_client is absent."""
    try:
        from jupyter_client.channels import AsyncZMQSocketChannel
    except ImportError:
        return False
    AsyncZMQSocketChannel.get_msg = get_msg_in_slices
    return True
