"""The notebook runs' reply wait (tests/notebook_waits.py): a reply whose wake-up is missed is found within a
second or so, not at nbmake's 300 s cell timeout, and a wait with nothing to receive still ends in Empty."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from queue import Empty

import pytest
from notebook_waits import get_msg_in_slices


class MissedWakeups:
    """A socket whose poll is never woken: it waits out its whole timeout and then reports what is there (pyzmq's
    last look at the socket), as a poll whose wake-up was missed does."""

    def __init__(self, arrives_after: float | None):
        self.start, self.arrives_after = time.monotonic(), arrives_after

    async def poll(self, timeout_ms: int) -> int:
        await asyncio.sleep(timeout_ms / 1000)
        return int(self.arrives_after is not None and time.monotonic() - self.start >= self.arrives_after)


class Channel:
    def __init__(self, socket):
        self.socket = socket

    async def _recv(self) -> dict:
        return {"content": {"status": "ok"}}


def wait(channel: Channel, timeout: float) -> dict:
    """get_msg_in_slices on its own event loop, in a thread: the browser tests leave Playwright's loop marked as
    running in this worker's main thread, where asyncio.run refuses to start."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, get_msg_in_slices(channel, timeout=timeout)).result()


def test_a_missed_wakeup_costs_a_slice_not_the_cell_timeout():
    start = time.monotonic()
    reply = wait(Channel(MissedWakeups(arrives_after=0.2)), timeout=300)
    assert reply["content"]["status"] == "ok"
    assert time.monotonic() - start < 30  # the unsliced wait returns at 300 s


@pytest.mark.parametrize("timeout", [0, 0.3])
def test_nothing_to_receive_ends_in_empty_at_the_timeout(timeout):
    start = time.monotonic()
    with pytest.raises(Empty):
        wait(Channel(MissedWakeups(arrives_after=None)), timeout=timeout)
    assert time.monotonic() - start >= timeout


def test_the_notebook_runs_in_this_process_use_it():
    from jupyter_client.channels import AsyncZMQSocketChannel

    assert AsyncZMQSocketChannel.get_msg is get_msg_in_slices  # installed by tests/conftest.py
