"""The events() iterator (a watch) and the asyncio variant."""
import asyncio
import threading
import time

import pytest

import sessionturn
from conftest import WAIT


def test_events_iterator_follows_a_turn(runtime, driver):
    seen = []
    with driver.events(timeout=WAIT) as stream:
        t = threading.Thread(target=lambda: driver.submit_turn("watched", timeout=WAIT))
        t.start()
        for e in stream:
            seen.append(e)
            if e.type == "turn.completed":
                break
        t.join(WAIT)
        last = stream.last_event_id
        assert last == seen[-1].id > 0
        assert stream.journal_id == runtime.journal_id
    types = [e.type for e in seen]
    assert "user.message" in types and "turn.started" in types
    assert "watched" in "".join(e.text for e in seen if e.type == "assistant.delta")

    # Resuming from a cursor: only what came after it.
    driver.submit_turn("second", timeout=WAIT)
    with driver.events(last, journal_id=runtime.journal_id, timeout=WAIT) as stream:
        first = next(stream)
        assert first.id == last + 1


def test_events_timeout_and_close(driver):
    stream = driver.events(timeout=0.3)
    # The retained journal is empty on a fresh runtime; with nothing to deliver the wait times out.
    with pytest.raises(sessionturn.TimeoutError):
        while True:
            next(stream)
    stream.close()
    with pytest.raises(StopIteration):
        next(stream)


def test_submit_turn_async_does_not_block_the_loop():
    # Turns of ~0.6 s (three deltas 0.2 s apart): long enough that a loop blocked by them would show.
    with sessionturn.LocalRuntime(echo_delay=0.2) as runtime:
        _run_two_async_turns(runtime.driver())


def _run_two_async_turns(d):

    async def main():
        ticks = 0
        stop = False

        async def ticker():
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0.001)

        task = asyncio.ensure_future(ticker())
        results = await asyncio.gather(d.submit_turn_async("first", timeout=WAIT),
                                       d.submit_turn_async("second", timeout=WAIT))
        stop = True
        await task
        return results, ticks

    (r1, r2), ticks = asyncio.run(main())
    assert r1.status == "completed" and "first" in r1.text
    assert r2.status == "completed" and "second" in r2.text
    # A blocked loop would tick about once; a free one ticks every few milliseconds for ~1 s.
    assert ticks > 20


def test_submit_turn_async_errors_and_cancel(slow_runtime):
    d = slow_runtime.driver()

    async def rejected():
        return await d.submit_turn_async("!ls", timeout=WAIT)

    with pytest.raises(sessionturn.InvalidArgumentError):
        asyncio.run(rejected())

    async def cancelled():
        task = asyncio.ensure_future(d.submit_turn_async("long", timeout=WAIT))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The abandoned turn was withdrawn: wait until the driver let go of it.
        deadline = time.monotonic() + WAIT
        while d.turns_in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return d.turns_in_flight

    assert asyncio.run(cancelled()) == 0


def test_submit_turn_async_reraises_callback_errors(runtime):
    d = runtime.driver()

    def on_event(e):
        raise KeyError("in callback")

    async def main():
        return await d.submit_turn_async("x", timeout=WAIT, on_event=on_event)

    with pytest.raises(KeyError, match="in callback"):
        asyncio.run(main())
