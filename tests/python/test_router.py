"""The Router from Python with a chat adapter written in Python (a recording one): the conversation is
remembered, a reply to an older bot message goes to the Session that wrote it, the agent's question is answered in
the chat, an adapter that raises on edit makes the router post the reply instead, the asyncio forms, a closed
adapter loop (a clear error, no hang), Ctrl-C during stop, the helpers, and the package's exports."""
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import pytest

import sessionturn
from conftest import WAIT


class RecordingAdapter(sessionturn.ChatAdapter):
    """Keeps every message's current text; posts get ids 1, 2, ... Thread-safe (the adapter's loop writes,
    the test reads)."""

    def __init__(self, caps=None):
        self.caps = caps or sessionturn.ChatCapabilities(threads=False, command_prefix="/", edit_interval=0.01,
                                                         buttons=True)
        self.lock = threading.Condition()
        self.texts = {}
        self.ops = []
        self.fail_edits = False
        self.post_delay = 0.0
        self.threads = set()  # where post and edit ran

    def capabilities(self):
        return self.caps

    async def post(self, where, message):
        self.threads.add(threading.get_ident())
        if self.post_delay:
            await asyncio.sleep(self.post_delay)
        with self.lock:
            mid = str(len(self.ops) + 1)
            self.ops.append(("post", where, mid, message))
            self.texts[mid] = message.text
            self.lock.notify_all()
        return mid

    async def edit(self, where, message_id, message):
        with self.lock:
            self.ops.append(("edit", where, message_id, message))
            if self.fail_edits:
                self.lock.notify_all()
                raise sessionturn.PlatformError("message can't be edited", code="invalid_argument")
            self.texts[message_id] = message.text
            self.lock.notify_all()

    def wait_for(self, needle, timeout=WAIT):
        """The id of a message whose current text contains needle."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                for mid, text in self.texts.items():
                    if needle in text and not text.startswith("\u2699"):
                        return mid
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("no message with %r; messages: %s" % (needle, self.texts))
                self.lock.wait(left)


class Chat:
    """Messages of one user in one private chat, numbered."""

    def __init__(self, chat="C1"):
        self.chat = chat
        self.n = 0

    def msg(self, text, **extra):
        self.n += 1
        fields = dict(platform="test", chat=self.chat, message_id="m%d" % self.n, event_id="e%d" % self.n,
                      author_id="U1", author_name="Ada", text=text, is_private_chat=True)
        fields.update(extra)
        return sessionturn.InboundMessage(**fields)


@pytest.fixture
def state():
    with tempfile.TemporaryDirectory(prefix="st_router_") as d:
        yield d


def make_router(state, adapter, provider="echo", **options):
    backend = sessionturn.LocalBackend(os.path.join(state, "sessions"), provider=provider, in_process=True,
                                       idle_suspend=0)
    router = sessionturn.Router(backend, adapter, owner_uid="test-owner", store_path=os.path.join(state, "r.db"),
                                progress_interval=0.02, **options)
    return backend, router


def test_a_conversation_is_remembered_and_replies_are_edited_in_place(state):
    adapter = RecordingAdapter()
    backend, router = make_router(state, adapter)
    chat = Chat()
    with router:
        assert router.handle_message(chat.msg("hello")) == "accepted"
        first = adapter.wait_for("echo #1:")
        assert "hello" in adapter.texts[first]
        assert router.handle_message(chat.msg("again")) == "accepted"
        second = adapter.wait_for("echo #2:")
        assert "again" in adapter.texts[second]
        # Each reply is its placeholder, edited: one post per message.
        assert [op[0] for op in adapter.ops].count("post") == 2
        assert router.handle_message(chat.msg("again", message_id="m2")) == "duplicate"
        deadline = time.monotonic() + WAIT  # counted once the adapter's edit returned to the router
        while router.stats()["replies_delivered"] < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert router.stats()["replies_delivered"] == 2
    assert router.closed


def test_a_reply_to_an_older_bot_message_goes_to_the_session_that_wrote_it(state):
    adapter = RecordingAdapter()
    backend, router = make_router(state, adapter)
    chat = Chat()
    with router:
        router.handle_message(chat.msg("first session"))
        first = adapter.wait_for("echo #1: [test message from Ada (U1)]\nfirst session")
        router.handle_message(chat.msg("/new other"))
        adapter.wait_for("other")
        router.handle_message(chat.msg("in the new one"))
        adapter.wait_for("in the new one")
        router.handle_message(chat.msg("back to the first", reply_to_message_id=first))
        reply = adapter.wait_for("back to the first")
        assert "echo #2:" in adapter.texts[reply]


QUESTION = {"turns": [[{"type": "question", "inputId": "pick", "questions": [
    {"id": "color", "header": "Color", "question": "Which color?",
     "options": [{"label": "red"}, {"label": "blue"}]}]}]]}


def test_the_agents_question_is_answered_by_a_button_and_the_press_acknowledged(state):
    script = os.path.join(state, "ask.json")
    with open(script, "w") as f:
        json.dump(QUESTION, f)
    adapter = RecordingAdapter()
    backend, router = make_router(state, adapter, provider="script:" + script)
    chat = Chat()
    with router:
        router.handle_message(chat.msg("ask me"))
        question = adapter.wait_for("Which color?")
        posted = [op for op in adapter.ops if op[0] == "post" and op[2] == question][0][3]
        assert [[b.label for b in row] for row in posted.buttons] == [["red"], ["blue"]]
        acks = []
        acked = threading.Condition()

        async def ack(text):  # a coroutine function: run on the adapter's loop
            with acked:
                acks.append(text)
                acked.notify_all()

        # The router learns the question's message id when the post returns to it: a press before that is told
        # the question expired, and pressed again.
        deadline = time.monotonic() + WAIT
        for press in range(1, 200):
            router.handle_action(sessionturn.InboundAction(platform="test", chat="C1", message_id=question,
                                                           data=posted.buttons[1][0].data, author_id="U1",
                                                           author_name="Ada", event_id="press-%d" % press, ack=ack))
            with acked:
                acked.wait_for(lambda: len(acks) >= press, timeout=max(0.0, deadline - time.monotonic()))
            assert len(acks) == press, "a press was never acknowledged"
            if acks[-1] == "":
                break
            time.sleep(0.05)
        assert acks[-1] == ""
        adapter.wait_for("Answers: color=blue")


def test_an_adapter_that_raises_on_edit_gets_the_reply_as_a_new_post(state):
    adapter = RecordingAdapter()
    adapter.fail_edits = True
    backend, router = make_router(state, adapter)
    chat = Chat()
    with router:
        router.handle_message(chat.msg("edits fail"))
        reply = adapter.wait_for("echo #1:")
        kinds = [(op[0], op[2]) for op in adapter.ops]
        assert ("post", reply) in kinds and kinds.index(("post", reply)) > 0  # not the placeholder: a new post
        assert any(op[0] == "edit" for op in adapter.ops)


def test_asyncio_forms_on_the_running_loop(state):
    async def main():
        adapter = RecordingAdapter()
        backend = sessionturn.LocalBackend(os.path.join(state, "sessions"), in_process=True, idle_suspend=0)
        chat = Chat()
        async with sessionturn.Router(backend, adapter, owner_uid="o", store_path=os.path.join(state, "r.db"),
                                      progress_interval=0.02) as router:
            assert await router.handle_message_async(chat.msg("from asyncio")) == "accepted"
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, adapter.wait_for, "echo #1:")
            with pytest.raises(RuntimeError, match="stop_async"):
                router.stop()  # would block this loop, which runs the adapter
            assert adapter.threads == {threading.get_ident()}  # the adapter ran on this loop
        assert router.closed

    asyncio.run(asyncio.wait_for(main(), WAIT))


def test_a_closed_adapter_loop_is_a_clear_error_not_a_hang(state):
    adapter = RecordingAdapter()
    loop = asyncio.new_event_loop()
    backend = sessionturn.LocalBackend(os.path.join(state, "sessions"), in_process=True, idle_suspend=0)
    router = sessionturn.Router(backend, adapter, loop=loop, owner_uid="o", store_path=os.path.join(state, "r.db"),
                                adapter_timeout=30.0, shutdown_budget=3.0)
    loop.close()
    router.start()
    t0 = time.monotonic()
    assert router.handle_message(Chat().msg("nobody will see this")) == "accepted"
    # A bridge on a closed loop refuses a call at once (well before the 30 s adapter_timeout).
    seen = []
    sessionturn._router._AdapterBridge(adapter, loop).post(("test", "", "C1", ""), ("text", [], ""),
                                                            lambda result, error: seen.append(error))
    assert seen and seen[0][0] == "unavailable" and "loop is closed" in seen[0][1]
    assert router.stop(timeout=WAIT)
    assert time.monotonic() - t0 < 10.0
    assert adapter.ops == []


# The calls scheduled on the loop that never ran are closed unrun with it: that is the point.
@pytest.mark.filterwarnings("ignore:coroutine '_call' was never awaited:RuntimeWarning")
def test_a_loop_that_never_runs_times_out_the_adapters_calls_and_the_router_goes_on(state):
    adapter = RecordingAdapter()
    loop = asyncio.new_event_loop()  # never run: calls scheduled on it never complete
    backend = sessionturn.LocalBackend(os.path.join(state, "sessions"), in_process=True, idle_suspend=0)
    try:
        router = sessionturn.Router(backend, adapter, loop=loop, owner_uid="o",
                                    store_path=os.path.join(state, "r.db"), adapter_timeout=0.5, shutdown_budget=2.0)
        router.start()
        assert router.handle_message(Chat().msg("into the void")) == "accepted"
        # The turn runs; its posts time out after 0.5 s each instead of holding the router.
        deadline = time.monotonic() + WAIT
        while router.stats()["turns_completed"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert router.stats()["turns_completed"] == 1
        t0 = time.monotonic()
        router.stop(timeout=WAIT)
        assert time.monotonic() - t0 < 10.0
        assert adapter.ops == []
    finally:
        loop.close()


CTRL_C_CHILD = r"""
import asyncio, os, signal, sys, tempfile, threading, time
import sessionturn

class Slow(sessionturn.ChatAdapter):
    slow = False
    def capabilities(self):
        return sessionturn.ChatCapabilities(threads=False)
    async def post(self, where, message):
        if self.slow:
            await asyncio.sleep(60)
        return "1"
    async def edit(self, where, message_id, message):
        pass

with tempfile.TemporaryDirectory() as d:
    script = os.path.join(d, "slow.json")
    open(script, "w").write('{"turns":[[{"type":"delta","text":"working"},{"type":"sleep","ms":30000}]]}')
    backend = sessionturn.LocalBackend(d + "/s", provider="script:" + script, in_process=True, idle_suspend=0)
    adapter = Slow()
    router = sessionturn.Router(backend, adapter, owner_uid="o", store_path=d + "/r.db", shutdown_budget=60)
    router.start()
    router.handle_message(sessionturn.InboundMessage("test", "C1", "m1", "go", author_id="U1",
                                                     is_private_chat=True))
    while router.stats()["turns_in_flight"] == 0:
        time.sleep(0.05)
    adapter.slow = True  # the "bot is restarting" notice will take a minute
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    t0 = time.monotonic()
    try:
        router.stop()
        print("NOT INTERRUPTED")
    except KeyboardInterrupt:
        print("KeyboardInterrupt after %.1f s closed=%s" % (time.monotonic() - t0, router.closed))
"""


def test_ctrl_c_during_stop_raises_keyboard_interrupt_and_closes():
    proc = subprocess.run([sys.executable, "-c", CTRL_C_CHILD], env=dict(os.environ), capture_output=True,
                          text=True, timeout=WAIT * 3)
    assert proc.returncode == 0, proc.stderr
    assert "KeyboardInterrupt after" in proc.stdout, proc.stdout + proc.stderr
    assert float(proc.stdout.split("KeyboardInterrupt after ")[1].split()[0]) < 5.0
    assert "closed=True" in proc.stdout


def test_helpers():
    # The pinned vector of docs/routing-rules.md.
    assert sessionturn.session_name("gravity", "slack", "spawner-uid", "C123",
                                    "1790000000.000100") == "gravity-slack-21a0bbb0a820"
    prompt = sessionturn.envelope("slack", "Ada\nLovelace", "U1", "!rm -rf /")
    assert prompt.startswith("[slack message from Ada Lovelace (U1)]\n")
    assert "!rm -rf /" in prompt
    parts = sessionturn.render("**bold** and `code`\n\n" + "word " * 100, dialect="telegram_html", max_length=120)
    assert len(parts) > 1 and parts[0].startswith("<b>bold</b> and <code>code</code>")
    assert all(sessionturn.measure(p, "utf16") <= 120 for p in parts)
    assert parts[-1].endswith("(%d/%d)" % (len(parts), len(parts)))
    assert sessionturn.measure("\U0001F600", "utf16") == 2
    assert sessionturn.measure("\U0001F600", "code_points") == 1
    with pytest.raises(ValueError, match="dialect"):
        sessionturn.render("x", dialect="html")
    assert sessionturn.escape_markdown("*x*") == "\\*x\\*"
    text = "**not bold** <b>\n\n" + "word " * 60
    chunks = sessionturn.split(text, 100, "code_points")
    assert len(chunks) > 2 and chunks[0].startswith("**not bold** <b>")
    assert all(sessionturn.measure(c, "code_points") <= 100 for c in chunks)
    assert "".join(c.rsplit("\n(", 1)[0] for c in chunks).replace(" ", "").replace("\n", "") == \
        text.replace(" ", "").replace("\n", "")
    with pytest.raises(sessionturn.InvalidArgumentError, match="max_length 10"):
        sessionturn.split("x", 10)


def test_bad_options_are_named(state):
    adapter = RecordingAdapter()
    backend = sessionturn.LocalBackend(os.path.join(state, "s"), in_process=True)
    with pytest.raises(sessionturn.InvalidArgumentError, match="max_queued"):
        sessionturn.Router(backend, adapter, owner_uid="o", store_path=os.path.join(state, "r.db"), max_queued=0)
    with pytest.raises(ValueError, match="answerers"):
        sessionturn.Router(backend, adapter, owner_uid="o", store_path=os.path.join(state, "r.db"), answerers="me")
    with pytest.raises(TypeError):
        sessionturn.Router(backend, adapter, colour="red")
    with pytest.raises(sessionturn.InvalidArgumentError, match="soft_length 10 must be 0"):
        sessionturn.Router(backend, RecordingAdapter(sessionturn.ChatCapabilities(soft_length=10)), owner_uid="o",
                           store_path=os.path.join(state, "r.db"))
    with pytest.raises(sessionturn.InvalidArgumentError, match="provider"):
        sessionturn.LocalBackend(os.path.join(state, "s2"), provider="nonsense")


def test_the_package_exports_only_its_api():
    public = {name for name in dir(sessionturn) if not name.startswith("_")}
    assert public == set(sessionturn.__all__)
    for name in ("Any", "Callable", "Optional", "asyncio", "annotations"):
        assert name not in public
