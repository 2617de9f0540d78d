"""The channel-routing helper from Python: backends, the Router, and chat adapters written in Python.

A bot keeps its own platform library and implements ``ChatAdapter`` (``async def post/edit``, ``capabilities()``);
the C++ Router, running on the library's worker threads, calls it on the adapter's asyncio loop (its calls queued
and drained there, many per wake-up) and gets results and exceptions back. An exception in the adapter is a failed
platform call (raise ``PlatformError`` to say which: a 429 with ``retry_after``, a message that is gone), never a
crash. Calls that do not finish within ``adapter_timeout`` (the loop stopped or closed) fail with a timeout.
"""
from __future__ import annotations

import abc
import asyncio
import atexit
import dataclasses
import inspect
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _sessionturn as _st
from ._driver import _settler

SessionBackend = _st._Backend

# Every Context made, stopped at interpreter exit before finalization begins: a worker that takes the GIL while
# the interpreter finalizes would be torn down under C++ frames.
_contexts: "weakref.WeakSet[Context]" = weakref.WeakSet()


class Context(_st.Context):
    """The event loop the library's work runs on (``threads`` worker threads). Stopped at interpreter exit."""

    def __init__(self, threads: int = 1):
        super().__init__(threads)
        _contexts.add(self)


_default_lock = threading.Lock()
_default: Optional[Context] = None


def default_context() -> Context:
    """The process's shared Context (one worker thread), made on first use: backends, routers and drivers that are
    given none share it."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Context(1)
        return _default


@atexit.register
def _stop_contexts() -> None:
    for ctx in list(_contexts):
        ctx.stop()


def LocalBackend(state_dir: str, *, provider: str = "echo", agent_bin: str = "", idle_suspend: float = 1800.0,
                 delete_after: float = 0.0, owner: str = "", in_process: bool = False, allow_shell: bool = False,
                 runtime_program: str = "", ctx: Optional[_st.Context] = None) -> SessionBackend:
    """Sessions on this machine: one runtime per Session under ``state_dir`` (docs/backends.md). ``provider`` is the
    default provider spec (``echo``, ``script:FILE``, ``command:CMD``, ``claude-code[:...]``); ``idle_suspend``
    seconds without a turn suspend a Session (0: never); ``in_process`` hosts the runtimes in this process."""
    return _st._local_backend(ctx or default_context(), state_dir, provider, agent_bin, idle_suspend, delete_after,
                              owner, in_process, allow_shell, runtime_program)


def KubernetesBackend(*, namespace: str = "", spawner: str = "", template: str = "", owner: str = "",
                      kubeconfig: str = "", context: str = "", ctx: Optional[_st.Context] = None) -> SessionBackend:
    """Kelos Sessions in a cluster (docs/backends.md): new Sessions from the SessionSpawner ``spawner`` or the
    Session template file ``template``; ``kubeconfig`` and ``context`` as kubectl takes them (default: $KUBECONFIG,
    ~/.kube/config, else in-cluster)."""
    return _st._kubernetes_backend(ctx or default_context(), namespace, spawner, template, owner, kubeconfig,
                                   context)


# ---- the chat model ----------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ThreadRef:
    """Where a conversation happens; ``thread`` is empty where the platform has no thread."""
    platform: str
    workspace: str
    chat: str
    thread: str


@dataclasses.dataclass(frozen=True)
class Button:
    label: str
    data: str  # opaque: hand it back in InboundAction.data


@dataclasses.dataclass(frozen=True)
class OutboundMessage:
    """What the router sends: text already rendered in the adapter's dialect and within its limit."""
    text: str
    buttons: Tuple[Tuple[Button, ...], ...] = ()
    reply_to: str = ""


@dataclasses.dataclass(frozen=True)
class ThreadMessage:
    """An earlier message of a thread (ChatAdapter.fetch_thread)."""
    author_name: str
    text: str
    is_bot: bool = False


@dataclasses.dataclass
class ChatCapabilities:
    """What the platform can do; the router adapts to it. ``unit``: "bytes", "code_points" or "utf16";
    ``dialect``: "plain", "telegram_html" or "slack_mrkdwn"; ``edit_interval`` in seconds."""
    max_length: int = 4096
    unit: str = "utf16"
    soft_length: int = 0
    dialect: str = "plain"
    edits_per_interval: int = 1
    edit_interval: float = 1.0
    buttons: bool = False
    button_data_limit: int = 64
    threads: bool = False
    typing: bool = False
    fetch_thread: bool = False
    command_prefix: str = ""


@dataclasses.dataclass
class InboundMessage:
    """A message the platform delivered. ``kind``: "new", "edited" or "deleted"."""
    platform: str
    chat: str
    message_id: str
    text: str = ""
    workspace: str = ""
    thread: str = ""
    reply_to_message_id: str = ""
    author_id: str = ""
    author_name: str = ""
    attachments_text: Sequence[str] = ()
    is_bot: bool = False
    is_self: bool = False
    mentions_bot: bool = False
    is_private_chat: bool = False
    event_id: str = ""
    kind: str = "new"


@dataclasses.dataclass
class InboundAction:
    """A button press on one of the router's messages. ``ack(text)`` acknowledges it on the platform (``text``,
    when not empty, is shown to the presser); it may be a plain function or a coroutine function."""
    platform: str
    chat: str
    message_id: str
    data: str
    author_id: str = ""
    author_name: str = ""
    workspace: str = ""
    thread: str = ""
    event_id: str = ""
    ack: Optional[Callable[[str], Any]] = None


class PlatformError(Exception):
    """Raised by a ChatAdapter to report the platform's error. ``code`` is an error name: "unavailable" (a 429 or
    5xx: give ``retry_after`` seconds when the platform said), "not_found" (the message is gone), "forbidden",
    "unauthorized", "too_large", "invalid_argument" (text the platform refused); anything else is "failed"."""

    def __init__(self, message: str, *, code: str = "failed", retry_after: float = 0.0, http_status: int = 0):
        super().__init__(message)
        self.code = code
        self.retry_after = retry_after
        self.http_status = http_status


class ChatAdapter(abc.ABC):
    """A chat platform, implemented by a bot. The router calls these on the adapter's asyncio loop (the loop the
    Router was made on, or the one given to it); each call may take as long as the platform does."""

    @abc.abstractmethod
    def capabilities(self) -> ChatCapabilities:
        """Read once, when the Router is made."""

    @abc.abstractmethod
    async def post(self, where: ThreadRef, message: OutboundMessage) -> str:
        """Posts into ``where`` (its thread, when it has one); returns the new message's id."""

    @abc.abstractmethod
    async def edit(self, where: ThreadRef, message_id: str, message: OutboundMessage) -> None:
        """Replaces the text (and buttons) of a message the adapter posted."""

    async def typing(self, where: ThreadRef) -> None:
        """Shows "typing..." (only called when capabilities().typing)."""

    async def fetch_thread(self, where: ThreadRef, before_message_id: str,
                           max_messages: int) -> Sequence[ThreadMessage]:
        """Up to ``max_messages`` earlier messages of the thread, oldest first (only called when
        capabilities().fetch_thread): the first turn of a thread carries them."""
        return ()


# ---- routes and options --------------------------------------------------------------------------------------

@dataclasses.dataclass
class Route:
    """Who may talk to the Sessions (docs/routing-rules.md). ``require_mention`` None: required in group chats,
    not in private ones. ``labels``/``annotations``/``parameters`` go on the Sessions this route creates."""
    name: str = "all"
    platform: str = ""
    chats: Sequence[str] = ()
    users: Sequence[str] = ()
    require_mention: Optional[bool] = None
    triggers: Sequence[str] = ()
    excludes: Sequence[str] = ()
    allow_bots: bool = False
    allowed_bots: Sequence[str] = ()
    admins: Sequence[str] = ()
    labels: Dict[str, str] = dataclasses.field(default_factory=dict)
    annotations: Dict[str, str] = dataclasses.field(default_factory=dict)
    parameters: Dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RouterConfig:
    """The Router's options (C++ RouterOptions; times in seconds). ``store_path`` empty: router.db under the default
    state directory. ``answerers``: "turn_author" or "allowed_users"."""
    owner_uid: str = ""
    session_prefix: str = "chat"
    routes: Sequence[Route] = (Route(),)
    store_path: str = ""
    max_queued: int = 8
    max_in_flight: int = 64
    progress_interval: float = 1.0
    turn_timeout: float = 3600.0
    wait_ready_timeout: float = 600.0
    answer_timeout: float = 600.0
    answerers: str = "turn_author"
    decline_questions: bool = False
    thread_context_messages: int = 20
    show_usage: bool = True
    bot_username: str = ""
    shutdown_budget: float = 10.0
    delivery_attempts: int = 3


# ---- the bridge from the C++ router to the adapter's loop ---------------------------------------------------------

def _error_tuple(what: str, e: BaseException) -> Tuple[str, str, float, int]:
    if isinstance(e, PlatformError):
        return (e.code, str(e) or type(e).__name__, float(e.retry_after), int(e.http_status))
    if isinstance(e, (asyncio.TimeoutError, TimeoutError)):
        return ("timeout", "the adapter's %s timed out: %s" % (what, e), 0.0, 0)
    if isinstance(e, asyncio.CancelledError):
        return ("cancelled", "the adapter's %s was cancelled" % what, 0.0, 0)
    return ("failed", "the adapter's %s raised %s: %s" % (what, type(e).__name__, e), 0.0, 0)


def _where(t: Tuple[str, str, str, str]) -> ThreadRef:
    return ThreadRef(*t)


def _message(t: Tuple[str, List[List[Tuple[str, str]]], str]) -> OutboundMessage:
    text, rows, reply_to = t
    return OutboundMessage(text, tuple(tuple(Button(label, data) for label, data in row) for row in rows), reply_to)


class _AdapterBridge:
    """What the C++ adapter calls. The router's calls wait in a C++ queue; the worker that queues the first of a
    batch calls ``_wake`` (with the GIL), which schedules one ``_drain`` on the adapter's loop; ``_drain`` takes
    every call queued by then and starts each adapter method there, reporting through ``done(result,
    error_tuple)`` once. ``post``/``edit``/``typing``/``fetch_thread`` start one call directly (from any thread)."""

    def __init__(self, adapter: ChatAdapter, loop: asyncio.AbstractEventLoop):
        self.adapter = adapter
        self.loop = loop
        self._queue: Any = None

    def _attach(self, queue: Any) -> None:
        self._queue = queue

    def _wake(self) -> None:
        """On a worker: the queue was empty and has a call now. Raises when the loop cannot take it (closed)."""
        if self.loop.is_closed():
            raise RuntimeError("the adapter's asyncio loop is closed")
        self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        """On the loop: every queued call, started in order."""
        for method, args, done in self._queue.take():
            self._start(method, self._starter(method, args), done)

    def _starter(self, method: str, args: Tuple[Any, ...]) -> Callable[[], Any]:
        a = self.adapter
        if method == "post":
            return lambda: a.post(_where(args[0]), _message(args[1]))
        if method == "edit":
            return lambda: a.edit(_where(args[0]), args[1], _message(args[2]))
        if method == "typing":
            return lambda: a.typing(_where(args[0]))
        return lambda: a.fetch_thread(_where(args[0]), args[1], args[2])

    def post(self, where, message, done):
        self._run("post", lambda: self.adapter.post(_where(where), _message(message)), done)

    def edit(self, where, message_id, message, done):
        self._run("edit", lambda: self.adapter.edit(_where(where), message_id, _message(message)), done)

    def typing(self, where, done):
        self._run("typing", lambda: self.adapter.typing(_where(where)), done)

    def fetch_thread(self, where, before, max_messages, done):
        self._run("fetch_thread", lambda: self.adapter.fetch_thread(_where(where), before, max_messages), done)

    def _run(self, what: str, start: Callable[[], Any], done: Callable[[Any, Any], None]) -> None:
        # One hand-off to the loop and nothing else on this (worker) thread: the adapter's method is called, and
        # its coroutine made a task, on the loop (no concurrent.futures.Future in between: bench/py_router.py).
        if self.loop.is_closed():
            done(None, ("unavailable", "the adapter's asyncio loop is closed: %s was not sent" % what, 0.0, 0))
            return
        try:
            self.loop.call_soon_threadsafe(self._start, what, start, done)
        except RuntimeError as e:
            done(None, ("unavailable", "the adapter's asyncio loop is closed: %s was not sent (%s)" % (what, e),
                        0.0, 0))

    def _start(self, what: str, start: Callable[[], Any], done: Callable[[Any, Any], None]) -> None:
        """On the loop: a plain method's value is the answer, a coroutine's is awaited as a task."""
        try:
            result = start()
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result, loop=self.loop)
                task.add_done_callback(lambda f: self._settle(what, f, done))
                return
        except (KeyboardInterrupt, SystemExit) as e:
            done(None, _error_tuple(what, e))
            raise
        except BaseException as e:  # noqa: B036 - every failure of the adapter is a failed platform call
            done(None, _error_tuple(what, e))
            return
        done(result, None)

    @staticmethod
    def _settle(what, future, done):
        if future.cancelled():
            done(None, ("cancelled", "the adapter's %s was cancelled" % what, 0.0, 0))
            return
        error = future.exception()
        if error is None:
            done(future.result(), None)
        else:
            done(None, _error_tuple(what, error))


class _LoopThread:
    """A private asyncio loop on a daemon thread, for a Router made outside any running loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="sessionturn-adapter-loop", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()


# ---- the Router --------------------------------------------------------------------------------------------------

class Router:
    """Chat threads as persistent conversations with Sessions (docs/routing.md): feed it what the platform
    delivers (``handle_message``, ``handle_action``); it calls the adapter to post and edit. Options are a
    ``RouterConfig`` and/or its fields as keyword arguments. The adapter's calls run on ``loop``: by default the
    running loop when the Router is made in one, else a private loop on a thread of its own.

    ``with Router(...) as r`` starts and stops it; in asyncio, ``async with``. ``stop`` tells every thread with a
    running turn that the bot is restarting and leaves the turns running: the next start delivers their replies.
    """

    def __init__(self, backend: SessionBackend, adapter: Union[ChatAdapter, TelegramAdapter, SlackAdapter],
                 config: Optional[RouterConfig] = None, *,
                 loop: Optional[asyncio.AbstractEventLoop] = None, adapter_timeout: float = 60.0, **options: Any):
        if config is None:
            config = RouterConfig(**options)
        elif options:
            config = dataclasses.replace(config, **options)
        self._own_loop: Optional[_LoopThread] = None
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self._own_loop = _LoopThread()
                loop = self._own_loop.loop
        self._loop = loop
        self.config = config
        self.adapter = adapter
        try:
            if isinstance(adapter, _st._NativeAdapter):  # TelegramAdapter, SlackAdapter: C++ all the way
                self._impl = _st._Router(backend, adapter, None, config, adapter_timeout)
            else:
                self._impl = _st._Router(backend, _AdapterBridge(adapter, loop), adapter.capabilities(), config,
                                         adapter_timeout)
        except BaseException:
            if self._own_loop is not None:
                self._own_loop.stop()
            raise

    def start(self) -> None:
        """Picks up where the last run stopped (turns in flight, undelivered replies, open questions)."""
        self._impl.start()

    def handle_message(self, message: InboundMessage, timeout: Optional[float] = None) -> str:
        """Takes a delivered message; returns once it is durably accepted: "accepted", "duplicate", "ignored" or
        "refused". Acknowledge the delivery on the platform then. Raises UnavailableError while stopping (do not
        acknowledge: the platform delivers again)."""
        if self._own_loop is None and _on_loop_thread(self._loop):
            raise RuntimeError("Router.handle_message() would block the adapter's event loop: use "
                               "await router.handle_message_async()")
        return self._impl.handle_message_blocking(message, timeout)

    async def handle_message_async(self, message: InboundMessage) -> str:
        """The asyncio form of handle_message."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str] = loop.create_future()
        self._impl.handle_message(message, _settler(loop, future))
        return await future

    def handle_action(self, action: InboundAction) -> None:
        """A button press; acknowledged through ``action.ack``."""
        ack = action.ack
        if ack is not None and inspect.iscoroutinefunction(ack):
            loop = self._loop
            action = dataclasses.replace(
                action, ack=lambda text: asyncio.run_coroutine_threadsafe(ack(text), loop))
        self._impl.handle_action(action)

    def stats(self) -> Dict[str, int]:
        return self._impl.stats()

    def stop(self, timeout: Optional[float] = None) -> bool:
        """Stops accepting, tells the threads with running turns (within ``shutdown_budget``), then closes the
        router. True when the notices went out within ``timeout``. Not on the adapter's loop thread (it would wait
        for itself): there, ``await stop_async()``."""
        if self._impl.closed:
            return True
        if self._own_loop is None and _on_loop_thread(self._loop):
            raise RuntimeError("Router.stop() would block the adapter's event loop: use await router.stop_async()")
        try:
            finished = self._impl.shutdown_and_wait(timeout)
        finally:
            self.close()
        return finished

    async def stop_async(self, timeout: Optional[float] = None) -> bool:
        """The asyncio form of stop."""
        if self._impl.closed:
            return True
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        settle = _settler(loop, future)
        self._impl.shutdown(lambda: settle(None, None))
        finished = True
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout)
        except asyncio.TimeoutError:
            finished = False
        await loop.run_in_executor(None, self.close)
        return finished

    def close(self) -> None:
        """Destroys the router at once (no notices); its store is released. stop() calls it."""
        self._impl.close()
        if self._own_loop is not None:
            self._own_loop.stop()

    @property
    def closed(self) -> bool:
        return self._impl.closed

    def __enter__(self) -> "Router":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    async def __aenter__(self) -> "Router":
        self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop_async()


def _on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


# The built-in platforms (C++): hand one to a Router, then start its inbound side with the router
# (TelegramAdapter.start_polling / handle_webhook, SlackAdapter.start_socket_mode / handle_events).
TelegramAdapter = _st.TelegramAdapter
SlackAdapter = _st.SlackAdapter

session_name = _st.session_name
envelope = _st.envelope
render = _st.render
split = _st.split
measure = _st.measure
escape_markdown = _st.escape_markdown
