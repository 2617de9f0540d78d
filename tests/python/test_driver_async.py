"""The Driver on the caller's asyncio loop: `async for event in driver.turn(...)`, callbacks of submit_turn_async
on the loop's thread, the unread events bounded in bytes, and drivers sharing a Context."""
import asyncio
import gc
import threading

import pytest

import sessionturn
from conftest import WAIT


def test_a_turn_is_an_async_iterator_of_its_events_on_the_loop(runtime):
    driver = runtime.driver()

    async def main():
        loop_thread = threading.get_ident()
        turn = driver.turn("hello iterator", timeout=WAIT)
        seen = []
        async for event in turn:
            assert threading.get_ident() == loop_thread
            seen.append(event.type)
        result = await turn.result()
        return seen, result

    seen, result = asyncio.run(asyncio.wait_for(main(), WAIT))
    assert result.status == "completed"
    assert result.text == "echo #1: hello iterator"
    assert seen[0] == "user.message" and seen[-1] == "turn.completed"
    assert "assistant.delta" in seen


def test_submit_turn_async_calls_back_on_the_loop_and_a_raising_callback_ends_the_turn(runtime):
    driver = runtime.driver()

    async def main():
        loop_thread = threading.get_ident()
        threads = set()
        accepted = []

        async def on_accepted(ref):  # a coroutine function runs as a task on the loop
            accepted.append(ref.request_id)

        r = await driver.submit_turn_async("on the loop", timeout=WAIT, on_event=lambda e: threads.add(
            threading.get_ident()), on_accepted=on_accepted, request_id="req-on-loop")
        assert threads == {loop_thread}
        assert accepted == ["req-on-loop"]

        def boom(event):
            raise RuntimeError("the bot's callback broke")

        with pytest.raises(RuntimeError, match="callback broke"):
            await driver.submit_turn_async("raises", timeout=WAIT, on_event=boom)
        return r

    assert asyncio.run(asyncio.wait_for(main(), WAIT)).status == "completed"


def test_a_reader_that_stops_reading_ends_the_turn_with_too_large(slow_runtime):
    driver = slow_runtime.driver()

    async def main():
        turn = driver.turn("nobody reads this", timeout=WAIT, max_buffered_bytes=10)
        with pytest.raises(sessionturn.TooLargeError, match="unread events"):
            await turn.result()

    asyncio.run(asyncio.wait_for(main(), WAIT))


def test_drivers_share_the_default_context_or_the_one_given(runtime):
    assert sessionturn.default_context() is sessionturn.default_context()
    assert sessionturn.default_context().threads == 1
    ctx = sessionturn.Context(2)
    assert ctx.threads == 2
    a = sessionturn.Driver.unix(runtime.socket_path, context=ctx)
    b = sessionturn.Driver.unix(runtime.socket_path)
    del ctx
    gc.collect()  # the driver keeps its Context alive
    assert a.submit_turn("on my context", timeout=WAIT).status == "completed"
    assert b.submit_turn("on the default one", timeout=WAIT).status == "completed"
    with pytest.raises(TypeError, match="sessionturn.Context"):
        sessionturn.Driver.unix(runtime.socket_path, context="not a context")


def test_a_dropped_stream_abandons_its_turn(slow_runtime):
    driver = slow_runtime.driver()

    async def main():
        turn = driver.turn("dropped halfway", timeout=WAIT)
        async for event in turn:
            if event.type == "assistant.delta":
                break
        assert driver.turns_in_flight == 1
        del turn, event
        gc.collect()
        # Abandoned: interrupted at once, not left to run the ~4 s the slow echo still had to go.
        for _ in range(60):
            if driver.turns_in_flight == 0:
                return True
            await asyncio.sleep(0.05)
        return False

    assert asyncio.run(asyncio.wait_for(main(), WAIT))
