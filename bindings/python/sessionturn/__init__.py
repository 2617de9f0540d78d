"""Persistent conversations with coding-agent Sessions, from Python.

A thin facade over the compiled ``_sessionturn`` module (the C++ library):

- ``Driver`` talks to one Session runtime (``submit_turn``, ``events``, ``interrupt``; ``submit_turn_async`` in
  asyncio); ``LocalRuntime`` runs one in-process for tests; ``SessionClient`` reads Kelos Sessions in a cluster.
- ``LocalBackend`` / ``KubernetesBackend`` hold Sessions; ``Router`` turns chat threads into conversations with
  them through a ``ChatAdapter`` the bot implements in Python (``async def post/edit``), or the built-in
  ``TelegramAdapter`` / ``SlackAdapter``.
- ``python -m sessionturn.telegram`` / ``python -m sessionturn.slack``: the two bridge programs, same flags.
- ``session_name``, ``envelope``, ``render``, ``split``, ``measure``: the router's pure helpers.

Blocking calls release the GIL. Errors are ``sessionturn.Error`` subclasses mapped from the C++ Errc.
"""
from ._sessionturn import (
    DEFAULT_MAX_BUFFERED_BYTES,
    CancelledError,
    ConflictError,
    ConnectionFailedError,
    ConnectionLostError,
    Driver,
    Error,
    Event,
    EventStream,
    FailedError,
    ForbiddenError,
    InternalError,
    InvalidArgumentError,
    IoError,
    LocalRuntime,
    NotFoundError,
    ProtocolError,
    Question,
    QuestionRequest,
    RejectedError,
    Responder,
    Session,
    SessionClient,
    TimeoutError,
    TooLargeError,
    TurnHandle,
    TurnRef,
    TurnResult,
    UnauthorizedError,
    UnavailableError,
    WouldBlockError,
)
from ._driver import TurnStream  # also adds Driver.submit_turn_async, attach_turn_async and turn
from ._router import (
    Button,
    ChatAdapter,
    ChatCapabilities,
    Context,
    InboundAction,
    InboundMessage,
    KubernetesBackend,
    LocalBackend,
    OutboundMessage,
    PlatformError,
    Route,
    Router,
    RouterConfig,
    SessionBackend,
    SlackAdapter,
    TelegramAdapter,
    ThreadMessage,
    ThreadRef,
    default_context,
    envelope,
    escape_markdown,
    measure,
    render,
    session_name,
    split,
)

__version__ = "0.2.0"

__all__ = [
    "DEFAULT_MAX_BUFFERED_BYTES", "Button", "CancelledError", "ChatAdapter", "ChatCapabilities", "ConflictError",
    "ConnectionFailedError", "ConnectionLostError", "Context", "Driver", "Error", "Event", "EventStream",
    "FailedError", "ForbiddenError", "InboundAction", "InboundMessage", "InternalError", "InvalidArgumentError",
    "IoError", "KubernetesBackend", "LocalBackend", "LocalRuntime", "NotFoundError", "OutboundMessage",
    "PlatformError", "ProtocolError", "Question", "QuestionRequest", "RejectedError", "Responder", "Route", "Router",
    "RouterConfig", "Session", "SessionBackend", "SessionClient", "SlackAdapter", "TelegramAdapter", "ThreadMessage",
    "ThreadRef", "TimeoutError",
    "TooLargeError", "TurnHandle", "TurnRef", "TurnResult", "TurnStream", "UnauthorizedError", "UnavailableError",
    "WouldBlockError", "default_context", "envelope", "escape_markdown", "measure", "render", "session_name",
    "split",
]
