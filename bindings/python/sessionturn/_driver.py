"""asyncio forms of the Driver's turns (``submit_turn_async``, ``attach_turn_async``, ``turn`` as an async
iterator), attached to the compiled ``Driver`` class when the package is imported. Their callbacks and events are
delivered on the caller's event loop."""
from __future__ import annotations

import asyncio
import weakref
from typing import Any, Callable, List, Optional

from ._sessionturn import (DEFAULT_MAX_BUFFERED_BYTES, Driver, Event, QuestionRequest, Responder, TooLargeError,
                           TurnHandle, TurnRef, TurnResult)


def _settler(loop: asyncio.AbstractEventLoop, future: "asyncio.Future[Any]") -> Callable[[Any, Any], None]:
    """``done(value, error)`` for a worker thread: settles ``future`` on its loop (once; nothing when the loop
    is closed, since nobody waits any more). Handed over after whatever the worker handed over before it."""

    def settle(value: Any, error: Optional[BaseException]) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def done(value: Any, error: Optional[BaseException]) -> None:
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:
            pass

    return done


def _on_loop(loop: asyncio.AbstractEventLoop, fn: Optional[Callable[..., Any]],
             failed: Callable[[BaseException], None]) -> Optional[Callable[..., None]]:
    """``fn`` called on ``loop`` (from a driver worker), in order; a coroutine function is run as a task. An
    exception it raises ends the turn with it (``failed``), as one raised on the worker would."""
    if fn is None:
        return None

    def run(*args: Any) -> None:
        try:
            result = fn(*args)
            if asyncio.iscoroutine(result):
                task = loop.create_task(result)
                task.add_done_callback(lambda t: t.cancelled() or t.exception() is None or failed(t.exception()))
        except BaseException as e:  # noqa: BLE001 - it becomes the turn's outcome
            failed(e)

    def hand_over(*args: Any) -> None:
        try:
            loop.call_soon_threadsafe(run, *args)
        except RuntimeError:
            pass  # the loop is closed: nobody is listening any more

    return hand_over


async def _await_turn(start: Callable[..., TurnHandle], on_event: Optional[Callable[..., Any]],
                      on_question: Optional[Callable[..., Any]],
                      on_accepted: Optional[Callable[..., Any]] = None) -> TurnResult:
    """Starts a turn with ``start(on_event, on_question, on_accepted, done)`` and awaits its ``done(result,
    error)``. The callbacks run on this loop; cancelling the awaiting task abandons the turn."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[TurnResult] = loop.create_future()
    handle: List[TurnHandle] = []

    def failed(error: BaseException) -> None:
        if not future.done():
            future.set_exception(error)
        if handle:
            handle[0].cancel()

    done = _settler(loop, future)
    handle.append(start(_on_loop(loop, on_event, failed), _on_loop(loop, on_question, failed),
                        _on_loop(loop, on_accepted, failed), done))
    try:
        return await future
    except asyncio.CancelledError:
        handle[0].cancel()
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

    The callbacks run on this event loop, in order (a coroutine function is run as a task); one that raises
    ends the turn with its exception. Cancelling the awaiting task abandons the turn.
    """
    return await _await_turn(lambda ev, q, acc, done: self._start_turn(
        prompt, timeout, ev, q, reconnect, allow_commands, answer_timeout, acc, request_id, done),
        on_event, on_question, on_accepted)


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
    return await _await_turn(lambda ev, q, acc, done: self._start_attach(
        request_id, turn_id, last_event_id, journal_id, revision, timeout, ev, q, reconnect, answer_timeout, done),
        on_event, on_question)


def _size(event: Event) -> int:
    """What an unread event counts against the bound: its JSON line's bytes."""
    return len(event.raw_json.encode("utf-8", "surrogatepass"))


class TurnStream:
    """One turn as an async iterator of its events, delivered on the caller's loop::

        turn = driver.turn("hello")
        async for event in turn:
            ...
        result = await turn.result()

    The events not read yet are bounded in bytes (their JSON lines, ``max_buffered_bytes``): a reader that stops
    reading ends the turn with TooLargeError instead of growing memory. ``cancel()`` (or cancelling a task
    awaiting ``result()``) abandons the turn, and so does dropping the stream."""

    def __init__(self, driver: Driver, prompt: str, *, timeout: float = 3600.0,
                 on_question: Optional[Callable[[QuestionRequest, Responder], Any]] = None,
                 reconnect: bool = True, allow_commands: bool = False, answer_timeout: float = 600.0,
                 request_id: Optional[str] = None, max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES):
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Optional[Event]] = asyncio.Queue()
        self._buffered = 0
        self._max = max_buffered_bytes
        self._future: asyncio.Future[TurnResult] = self._loop.create_future()
        self._handle: Optional[TurnHandle] = None
        loop = self._loop
        # The driver's callbacks hold the stream weakly: a stream the caller dropped is collected, and its turn
        # abandoned (the finalizer below), instead of running on unread.
        me = weakref.ref(self)

        def call(method: str, *args: Any) -> None:  # on the loop
            stream = me()
            if stream is not None:
                getattr(stream, method)(*args)

        def on_event(event: Event) -> None:  # a driver worker
            try:
                loop.call_soon_threadsafe(call, "_push", event)
            except RuntimeError:
                pass

        def done(result: Optional[TurnResult], error: Optional[BaseException]) -> None:  # a driver worker
            try:
                loop.call_soon_threadsafe(call, "_finish", result, error)
            except RuntimeError:
                pass

        def failed(error: BaseException) -> None:
            call("_fail", error)

        self._handle = driver._start_turn(prompt, timeout, on_event, _on_loop(loop, on_question, failed),
                                          reconnect, allow_commands, answer_timeout, None, request_id, done)
        weakref.finalize(self, self._handle.cancel)

    def _push(self, event: Event) -> None:
        if self._future.done():
            return
        self._buffered += _size(event)
        if self._buffered > self._max:
            self._fail(TooLargeError("the turn's unread events passed %d bytes: the reader stopped reading?"
                                     % self._max))
            return
        self._queue.put_nowait(event)

    def _finish(self, result: Optional[TurnResult], error: Optional[BaseException]) -> None:
        if not self._future.done():
            if error is not None:
                self._future.set_exception(error)
            else:
                self._future.set_result(result)  # type: ignore[arg-type]
        self._queue.put_nowait(None)

    def _fail(self, error: BaseException) -> None:
        if not self._future.done():
            self._future.set_exception(error)
        if self._handle is not None:
            self._handle.cancel()
        self._queue.put_nowait(None)

    def __aiter__(self) -> "TurnStream":
        return self

    async def __anext__(self) -> Event:
        event = await self._queue.get()
        if event is None:
            self._queue.put_nowait(None)  # every later call ends too
            raise StopAsyncIteration
        self._buffered -= _size(event)
        return event

    async def result(self) -> TurnResult:
        """The turn's result (its error raised), once it ended."""
        try:
            return await asyncio.shield(self._future)
        except asyncio.CancelledError:
            if not self._future.done():
                self.cancel()
            raise

    def cancel(self) -> None:
        """Abandons the turn (withdrawn or interrupted, as a cancelled submit_turn is)."""
        if self._handle is not None:
            self._handle.cancel()


def _turn(self: Driver, prompt: str, **options: Any) -> TurnStream:
    """The turn as an async iterator of its events on this loop (``TurnStream``); call it in a coroutine."""
    return TurnStream(self, prompt, **options)


Driver.submit_turn_async = _submit_turn_async  # type: ignore[attr-defined]
Driver.turn = _turn  # type: ignore[attr-defined]
Driver.attach_turn_async = _attach_turn_async  # type: ignore[attr-defined]
