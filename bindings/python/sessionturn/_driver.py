"""asyncio forms of the Driver's turns (``submit_turn_async``, ``attach_turn_async``), attached to the compiled
``Driver`` class when the package is imported."""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Optional

from ._sessionturn import Driver, Event, QuestionRequest, Responder, TurnHandle, TurnRef, TurnResult


async def _await_turn(start: Callable[[Callable[[Optional[TurnResult], Optional[BaseException]], None]],
                                      TurnHandle]) -> TurnResult:
    """Starts a turn with ``start(done)`` and awaits its ``done(result, error)`` (called once, on a
    driver worker); cancelling the awaiting task abandons the turn."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[TurnResult] = loop.create_future()

    def settle(result: Optional[TurnResult], error: Optional[BaseException]) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def done(result: Optional[TurnResult], error: Optional[BaseException]) -> None:
        # Runs on a driver worker: hand over to the loop's thread.
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting any more

    handle = start(done)
    try:
        return await future
    except asyncio.CancelledError:
        handle.cancel()
        raise


async def _submit_turn_async(
    self: Driver,
    prompt: str,
    *,
    timeout: float = 3600.0,
    on_event: Optional[Callable[[Event], Any]] = None,
    on_question: Optional[Callable[[QuestionRequest, Responder], Any]] = None,
    reconnect: bool = True,
    allow_commands: bool = False,
    answer_timeout: float = 600.0,
    on_accepted: Optional[Callable[[TurnRef], Any]] = None,
    request_id: Optional[str] = None,
) -> TurnResult:
    """The asyncio form of ``submit_turn``: awaits the turn without blocking the event loop.

    Callbacks still run on the driver's worker thread (use ``loop.call_soon_threadsafe`` to reach the
    loop from them). Cancelling the awaiting task abandons the turn.
    """
    return await _await_turn(lambda done: self._start_turn(
        prompt, timeout, on_event, on_question, reconnect, allow_commands, answer_timeout, on_accepted, request_id,
        done))


async def _attach_turn_async(
    self: Driver,
    *,
    request_id: Optional[str] = None,
    turn_id: Optional[str] = None,
    last_event_id: int = 0,
    journal_id: Optional[str] = None,
    revision: int = 0,
    timeout: float = 3600.0,
    on_event: Optional[Callable[[Event], Any]] = None,
    on_question: Optional[Callable[[QuestionRequest, Responder], Any]] = None,
    reconnect: bool = True,
    answer_timeout: float = 600.0,
) -> TurnResult:
    """The asyncio form of ``attach_turn`` (callbacks and cancellation as in ``submit_turn_async``)."""
    return await _await_turn(lambda done: self._start_attach(
        request_id, turn_id, last_event_id, journal_id, revision, timeout, on_event, on_question, reconnect,
        answer_timeout, done))


Driver.submit_turn_async = _submit_turn_async  # type: ignore[attr-defined]
Driver.attach_turn_async = _attach_turn_async  # type: ignore[attr-defined]
