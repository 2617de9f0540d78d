"""Type stubs of the sessionturn package (the compiled module and its facade)."""
import asyncio
import builtins
from types import TracebackType
from typing import Any, Awaitable, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Type, Union

__version__: str

# events()' default bound of the unread events' JSON lines, in bytes (64 MiB).
DEFAULT_MAX_BUFFERED_BYTES: int

class Error(Exception):
    """Base of every sessionturn error."""

    code: str
    http_status: int

class InvalidArgumentError(Error, ValueError): ...
class ProtocolError(Error): ...
class ConnectionFailedError(Error, builtins.ConnectionError): ...
class ConnectionLostError(Error, builtins.ConnectionError): ...
class TimeoutError(Error, builtins.TimeoutError): ...
class CancelledError(Error): ...
class RejectedError(Error): ...
class NotFoundError(Error): ...
class UnauthorizedError(Error): ...
class ForbiddenError(Error): ...
class ConflictError(Error): ...
class TooLargeError(Error): ...
class UnavailableError(Error): ...
class IoError(Error, OSError): ...
class WouldBlockError(Error): ...
class FailedError(Error): ...
class InternalError(Error): ...

class Event:
    """One event of a turn or a watch."""

    @property
    def id(self) -> int: ...
    @property
    def type(self) -> str: ...
    @property
    def turn_id(self) -> str: ...
    @property
    def request_id(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def tool_id(self) -> str: ...
    @property
    def tool_name(self) -> str: ...
    @property
    def output(self) -> str: ...
    @property
    def input_id(self) -> str: ...
    @property
    def raw_json(self) -> str: ...
    @property
    def raw(self) -> Dict[str, Any]: ...

class Question:
    @property
    def id(self) -> str: ...
    @property
    def header(self) -> str: ...
    @property
    def question(self) -> str: ...
    @property
    def options(self) -> List[str]: ...
    @property
    def option_descriptions(self) -> List[str]: ...
    @property
    def multi_select(self) -> bool: ...
    @property
    def secret(self) -> bool: ...

class QuestionRequest:
    @property
    def input_id(self) -> str: ...
    @property
    def turn_id(self) -> str: ...
    @property
    def questions(self) -> List[Question]: ...
    @property
    def raw(self) -> Dict[str, Any]: ...

class Responder:
    """Answers or declines one question exactly once, now or later, from any thread."""

    @property
    def input_id(self) -> str: ...
    def answer(self, answers: Dict[str, List[str]]) -> bool: ...
    def decline(self) -> bool: ...

class TurnRef:
    """Where a turn is in the runtime's journal (on_accepted's argument)."""

    @property
    def request_id(self) -> str: ...
    @property
    def turn_id(self) -> str: ...
    @property
    def last_event_id(self) -> int: ...
    @property
    def journal_id(self) -> str: ...
    @property
    def revision(self) -> int: ...
    def to_dict(self) -> Dict[str, Any]: ...  # attach_turn's keyword arguments

class TurnResult:
    @property
    def request_id(self) -> str: ...
    @property
    def turn_id(self) -> str: ...
    @property
    def last_event_id(self) -> int: ...  # the journal cursor when the turn ended
    @property
    def journal_id(self) -> str: ...
    @property
    def status(self) -> str: ...  # "completed" | "failed" | "interrupted" | "removed"
    @property
    def text(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def declined_questions(self) -> int: ...
    @property
    def answered_questions(self) -> int: ...
    @property
    def shared(self) -> bool: ...
    @property
    def reconnects(self) -> int: ...

class TurnHandle:
    def cancel(self) -> None: ...

class EventStream(Iterator[Event]):
    def __iter__(self) -> "EventStream": ...
    def __next__(self) -> Event: ...
    def close(self) -> None: ...
    def __enter__(self) -> "EventStream": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...
    @property
    def last_event_id(self) -> int: ...
    @property
    def journal_id(self) -> str: ...
    @property
    def max_buffered_bytes(self) -> int: ...
    @property
    def active(self) -> bool: ...

OnEvent = Callable[[Event], Any]
OnQuestion = Callable[[QuestionRequest, Responder], Any]
OnAccepted = Callable[[TurnRef], Any]
TurnDone = Callable[[Optional[TurnResult], Optional[BaseException]], Any]

class Driver:
    @staticmethod
    def unix(path: str, *, context: Optional["Context"] = None) -> "Driver": ...
    @staticmethod
    def exec(argv: Sequence[str], *, context: Optional["Context"] = None) -> "Driver": ...
    def turn(
        self,
        prompt: str,
        *,
        timeout: float = 3600.0,
        on_question: Optional[OnQuestion] = None,
        reconnect: bool = True,
        allow_commands: bool = False,
        answer_timeout: float = 600.0,
        request_id: Optional[str] = None,
        max_buffered_bytes: int = ...,
    ) -> "TurnStream": ...
    @staticmethod
    def for_session(
        name: str,
        namespace: Optional[str] = None,
        *,
        kubeconfig: Optional[str] = None,
        context: Optional[str] = None,
        wait_timeout: float = 600.0,
    ) -> "Driver": ...
    def submit_turn(
        self,
        prompt: str,
        *,
        timeout: float = 3600.0,
        on_event: Optional[OnEvent] = None,
        on_question: Optional[OnQuestion] = None,
        reconnect: bool = True,
        allow_commands: bool = False,
        answer_timeout: float = 600.0,
        on_accepted: Optional[OnAccepted] = None,
        request_id: Optional[str] = None,
    ) -> TurnResult: ...
    async def submit_turn_async(
        self,
        prompt: str,
        *,
        timeout: float = 3600.0,
        on_event: Optional[OnEvent] = None,
        on_question: Optional[OnQuestion] = None,
        reconnect: bool = True,
        allow_commands: bool = False,
        answer_timeout: float = 600.0,
        on_accepted: Optional[OnAccepted] = None,
        request_id: Optional[str] = None,
    ) -> TurnResult: ...
    def attach_turn(
        self,
        *,
        request_id: Optional[str] = None,
        turn_id: Optional[str] = None,
        last_event_id: int = 0,
        journal_id: Optional[str] = None,
        revision: int = 0,
        timeout: float = 3600.0,
        on_event: Optional[OnEvent] = None,
        on_question: Optional[OnQuestion] = None,
        reconnect: bool = True,
        answer_timeout: float = 600.0,
    ) -> TurnResult: ...
    async def attach_turn_async(
        self,
        *,
        request_id: Optional[str] = None,
        turn_id: Optional[str] = None,
        last_event_id: int = 0,
        journal_id: Optional[str] = None,
        revision: int = 0,
        timeout: float = 3600.0,
        on_event: Optional[OnEvent] = None,
        on_question: Optional[OnQuestion] = None,
        reconnect: bool = True,
        answer_timeout: float = 600.0,
    ) -> TurnResult: ...
    def _start_turn(
        self,
        prompt: str,
        timeout: float,
        on_event: Optional[OnEvent],
        on_question: Optional[OnQuestion],
        reconnect: bool,
        allow_commands: bool,
        answer_timeout: float,
        on_accepted: Optional[OnAccepted],
        request_id: Optional[str],
        done: TurnDone,
    ) -> TurnHandle: ...
    def _start_attach(
        self,
        request_id: Optional[str],
        turn_id: Optional[str],
        last_event_id: int,
        journal_id: Optional[str],
        revision: int,
        timeout: float,
        on_event: Optional[OnEvent],
        on_question: Optional[OnQuestion],
        reconnect: bool,
        answer_timeout: float,
        done: TurnDone,
    ) -> TurnHandle: ...
    def events(
        self,
        since: Optional[int] = None,
        *,
        journal_id: Optional[str] = None,
        timeout: Optional[float] = None,
        reconnect: bool = True,
        max_buffered_bytes: int = ...,  # DEFAULT_MAX_BUFFERED_BYTES
    ) -> EventStream: ...
    def interrupt(self, timeout: float = 30.0) -> None: ...
    @property
    def turns_in_flight(self) -> int: ...

class TurnStream:
    """A turn as an async iterator of its events on the caller's loop (Driver.turn)."""

    def __aiter__(self) -> "TurnStream": ...
    async def __anext__(self) -> Event: ...
    async def result(self) -> TurnResult: ...
    def cancel(self) -> None: ...

class LocalRuntime:
    def __init__(
        self,
        socket_path: Optional[str] = None,
        *,
        provider: str = "echo",
        state_dir: Optional[str] = None,
        allow_shell: bool = False,
        echo_delay: float = 0.02,
        session_name: str = "local",
    ) -> None: ...
    def stop(self) -> None: ...
    def __enter__(self) -> "LocalRuntime": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...
    @property
    def socket_path(self) -> str: ...
    @property
    def journal_id(self) -> str: ...
    @property
    def last_event_id(self) -> int: ...
    @property
    def connection_count(self) -> int: ...
    @property
    def running(self) -> bool: ...
    def driver(self) -> Driver: ...

class Session:
    """A read-only view of a Kelos Session object."""

    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def phase(self) -> str: ...
    @property
    def pod_name(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def ready_reason(self) -> str: ...
    @property
    def suspend(self) -> bool: ...
    @property
    def ready(self) -> bool: ...
    @property
    def idle_suspended(self) -> bool: ...
    @property
    def owner_suspended(self) -> bool: ...
    @property
    def failed(self) -> bool: ...
    @property
    def labels(self) -> Dict[str, str]: ...
    @property
    def annotations(self) -> Dict[str, str]: ...
    @property
    def raw(self) -> Dict[str, Any]: ...

class SessionClient:
    """Sessions of one namespace; every call blocks on HTTP with the GIL released."""

    def __init__(
        self, namespace: Optional[str] = None, *, kubeconfig: Optional[str] = None, context: Optional[str] = None
    ) -> None: ...
    @property
    def namespace(self) -> str: ...
    def list(self, label_selector: Optional[str] = None) -> List[Session]: ...
    def get(self, name: str) -> Session: ...
    def suspend(self, name: str) -> Session: ...
    def resume(self, name: str) -> Session: ...
    def delete(self, name: str) -> None: ...
    def wait_ready(self, name: str, *, timeout: float = 600.0, resume_idle: bool = True) -> Session: ...

# ---- the routing helper (sessionturn/_router.py) -------------------------------------------------------------------

class Context:
    """The event loop the library's work runs on (``threads`` worker threads)."""

    def __init__(self, threads: int = 1) -> None: ...
    @property
    def threads(self) -> int: ...
    def stop(self) -> None: ...

def default_context() -> Context: ...

class SessionBackend:
    def describe(self) -> str: ...
    @property
    def context(self) -> Context: ...

def LocalBackend(state_dir: str, *, provider: str = ..., agent_bin: str = ..., idle_suspend: float = ...,
                 delete_after: float = ..., owner: str = ..., in_process: bool = ..., allow_shell: bool = ...,
                 runtime_program: str = ..., ctx: Optional[Context] = ...) -> SessionBackend: ...
def KubernetesBackend(*, namespace: str = ..., spawner: str = ..., template: str = ..., owner: str = ...,
                      kubeconfig: str = ..., context: str = ..., ctx: Optional[Context] = ...) -> SessionBackend: ...

class ThreadRef:
    platform: str
    workspace: str
    chat: str
    thread: str
    def __init__(self, platform: str, workspace: str, chat: str, thread: str) -> None: ...

class Button:
    label: str
    data: str
    def __init__(self, label: str, data: str) -> None: ...

class OutboundMessage:
    text: str
    buttons: Tuple[Tuple[Button, ...], ...]
    reply_to: str
    def __init__(self, text: str, buttons: Tuple[Tuple[Button, ...], ...] = ..., reply_to: str = ...) -> None: ...

class ThreadMessage:
    author_name: str
    text: str
    is_bot: bool
    def __init__(self, author_name: str, text: str, is_bot: bool = ...) -> None: ...

class ChatCapabilities:
    max_length: int
    unit: str
    soft_length: int
    dialect: str
    edits_per_interval: int
    edit_interval: float
    buttons: bool
    button_data_limit: int
    threads: bool
    typing: bool
    fetch_thread: bool
    command_prefix: str
    def __init__(self, max_length: int = ..., unit: str = ..., soft_length: int = ..., dialect: str = ...,
                 edits_per_interval: int = ..., edit_interval: float = ..., buttons: bool = ...,
                 button_data_limit: int = ..., threads: bool = ..., typing: bool = ..., fetch_thread: bool = ...,
                 command_prefix: str = ...) -> None: ...

class InboundMessage:
    platform: str
    chat: str
    message_id: str
    text: str
    workspace: str
    thread: str
    reply_to_message_id: str
    author_id: str
    author_name: str
    attachments_text: Sequence[str]
    is_bot: bool
    is_self: bool
    mentions_bot: bool
    is_private_chat: bool
    event_id: str
    kind: str
    def __init__(self, platform: str, chat: str, message_id: str, text: str = ..., workspace: str = ...,
                 thread: str = ..., reply_to_message_id: str = ..., author_id: str = ..., author_name: str = ...,
                 attachments_text: Sequence[str] = ..., is_bot: bool = ..., is_self: bool = ...,
                 mentions_bot: bool = ..., is_private_chat: bool = ..., event_id: str = ...,
                 kind: str = ...) -> None: ...

class InboundAction:
    platform: str
    chat: str
    message_id: str
    data: str
    author_id: str
    author_name: str
    workspace: str
    thread: str
    event_id: str
    ack: Optional[Callable[[str], Any]]
    def __init__(self, platform: str, chat: str, message_id: str, data: str, author_id: str = ...,
                 author_name: str = ..., workspace: str = ..., thread: str = ..., event_id: str = ...,
                 ack: Optional[Callable[[str], Any]] = ...) -> None: ...

class PlatformError(Exception):
    code: str
    retry_after: float
    http_status: int
    def __init__(self, message: str, *, code: str = ..., retry_after: float = ..., http_status: int = ...) -> None: ...

class ChatAdapter:
    def capabilities(self) -> ChatCapabilities: ...
    async def post(self, where: ThreadRef, message: OutboundMessage) -> str: ...
    async def edit(self, where: ThreadRef, message_id: str, message: OutboundMessage) -> None: ...
    async def typing(self, where: ThreadRef) -> None: ...
    async def fetch_thread(self, where: ThreadRef, before_message_id: str,
                           max_messages: int) -> Sequence[ThreadMessage]: ...

class Route:
    name: str
    platform: str
    chats: Sequence[str]
    users: Sequence[str]
    require_mention: Optional[bool]
    triggers: Sequence[str]
    excludes: Sequence[str]
    allow_bots: bool
    allowed_bots: Sequence[str]
    admins: Sequence[str]
    labels: Dict[str, str]
    annotations: Dict[str, str]
    parameters: Dict[str, str]
    def __init__(self, name: str = ..., platform: str = ..., chats: Sequence[str] = ..., users: Sequence[str] = ...,
                 require_mention: Optional[bool] = ..., triggers: Sequence[str] = ..., excludes: Sequence[str] = ...,
                 allow_bots: bool = ..., allowed_bots: Sequence[str] = ..., admins: Sequence[str] = ...,
                 labels: Dict[str, str] = ..., annotations: Dict[str, str] = ...,
                 parameters: Dict[str, str] = ...) -> None: ...

class RouterConfig:
    owner_uid: str
    session_prefix: str
    routes: Sequence[Route]
    store_path: str
    max_queued: int
    max_in_flight: int
    progress_interval: float
    turn_timeout: float
    wait_ready_timeout: float
    answer_timeout: float
    answerers: str
    decline_questions: bool
    thread_context_messages: int
    show_usage: bool
    bot_username: str
    shutdown_budget: float
    delivery_attempts: int
    def __init__(self, owner_uid: str = ..., session_prefix: str = ..., routes: Sequence[Route] = ...,
                 store_path: str = ..., max_queued: int = ..., max_in_flight: int = ...,
                 progress_interval: float = ..., turn_timeout: float = ..., wait_ready_timeout: float = ...,
                 answer_timeout: float = ..., answerers: str = ..., decline_questions: bool = ...,
                 thread_context_messages: int = ..., show_usage: bool = ..., bot_username: str = ...,
                 shutdown_budget: float = ..., delivery_attempts: int = ...) -> None: ...

class TelegramAdapter:
    """The built-in Telegram adapter (C++)."""
    def __init__(self, token: str, *, api_url: str = ..., context: Optional[Context] = ..., ca_pem: str = ...,
                 proxy: str = ..., poll_timeout: float = ..., request_timeout: float = ..., chat_interval: float = ...,
                 group_messages_per_minute: int = ..., max_attempts: int = ...) -> None: ...
    def connect(self) -> Dict[str, Any]: ...
    def set_commands(self) -> None: ...
    def set_webhook(self, url: str, secret: str) -> None: ...
    def set_webhook_secret(self, secret: str) -> None: ...
    def start_polling(self, router: Router, on_fatal: Optional[Callable[[Error], None]] = ...) -> None: ...
    def stop_polling(self) -> None: ...
    @property
    def polling(self) -> bool: ...
    def handle_webhook(self, secret_header: Optional[str], body: bytes, router: Router) -> Tuple[int, str]: ...
    def stats(self) -> Dict[str, Any]: ...
    @property
    def context(self) -> Context: ...

class SlackAdapter:
    """The built-in Slack adapter (C++)."""
    def __init__(self, bot_token: str, *, app_token: str = ..., signing_secret: str = ..., api_url: str = ...,
                 context: Optional[Context] = ..., ca_pem: str = ..., proxy: str = ..., request_timeout: float = ...,
                 channel_interval: float = ..., max_attempts: int = ...) -> None: ...
    def connect(self) -> Dict[str, str]: ...
    def start_socket_mode(self, router: Router, on_fatal: Optional[Callable[[Error], None]] = ...) -> None: ...
    def stop_inbound(self) -> None: ...
    @property
    def socket_connected(self) -> bool: ...
    def handle_events(self, body: bytes, router: Router, *, content_type: str, signature: str, timestamp: str,
                      retry_num: str = ..., retry_reason: str = ...) -> Tuple[int, str, str]: ...
    def stats(self) -> Dict[str, Any]: ...
    @property
    def context(self) -> Context: ...

class Router:
    config: RouterConfig
    adapter: Union[ChatAdapter, TelegramAdapter, SlackAdapter]
    def __init__(self, backend: SessionBackend, adapter: Union[ChatAdapter, TelegramAdapter, SlackAdapter],
                 config: Optional[RouterConfig] = ..., *,
                 loop: Optional[asyncio.AbstractEventLoop] = ..., adapter_timeout: float = ...,
                 **options: Any) -> None: ...
    def start(self) -> None: ...
    def handle_message(self, message: InboundMessage, timeout: Optional[float] = ...) -> str: ...
    async def handle_message_async(self, message: InboundMessage) -> str: ...
    def handle_action(self, action: InboundAction) -> None: ...
    def stats(self) -> Dict[str, int]: ...
    def stop(self, timeout: Optional[float] = ...) -> bool: ...
    async def stop_async(self, timeout: Optional[float] = ...) -> bool: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Router: ...
    def __exit__(self, *exc: Any) -> None: ...
    async def __aenter__(self) -> Router: ...
    async def __aexit__(self, *exc: Any) -> None: ...

def session_name(prefix: str, platform: str, owner_uid: str, chat: str, thread: str = ...) -> str: ...
def envelope(platform: str, author_name: str, author_id: str, text: str, attachments: Sequence[str] = ...,
             thread_context: Optional[Sequence[ThreadMessage]] = ...) -> str: ...
def render(markdown: str, dialect: str = ..., max_length: int = ..., unit: str = ..., soft_length: int = ...,
           label_parts: bool = ...) -> List[str]: ...
def split(text: str, limit: int = ..., unit: str = ..., label_parts: bool = ...) -> List[str]: ...
def measure(text: str, unit: str = ...) -> int: ...
def escape_markdown(text: str) -> str: ...
