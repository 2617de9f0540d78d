"""The built-in TelegramAdapter and SlackAdapter (C++) driven from Python: given to a sessionturn.Router like an
adapter written in Python, with their inbound sides started from Python (Telegram long polling and webhooks, Slack
Socket Mode and the Events API behind a Python HTTP server), against the platforms' fakes (tests/fakes/)."""
import http.server
import json
import os
import sys
import tempfile
import threading
import time

import pytest

import sessionturn
from conftest import WAIT

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chat"))
import bridge_support as tg  # noqa: E402
import slack_bridge_support as sl  # noqa: E402


@pytest.fixture
def root():
    with tempfile.TemporaryDirectory(prefix="st_builtin_") as d:
        yield d


def local_backend(root):
    return sessionturn.LocalBackend(os.path.join(root, "sessions"), in_process=True, idle_suspend=0)


def test_telegram_polling_and_a_webhook_through_the_python_router(root):
    fake = tg.Fake(root)
    try:
        adapter = sessionturn.TelegramAdapter(tg.TOKEN, api_url=fake.url, chat_interval=0.0)
        bot = adapter.connect()
        assert bot["username"] == tg.BOT and bot["id"] > 0
        backend = local_backend(root)
        router = sessionturn.Router(backend, adapter, owner_uid=str(bot["id"]), bot_username=bot["username"],
                                    store_path=os.path.join(root, "r.db"), progress_interval=0.05)
        with router:
            adapter.start_polling(router)
            fake.send(42, "hello there")
            assert "hello there" in fake.wait_reply(42, "echo #1:", timeout=WAIT)["text"]
            assert adapter.polling
            assert adapter.stats()["updates_received"] >= 1
            adapter.stop_polling()
            assert not adapter.polling

            # The same bot fed by webhooks: the secret is checked first, in constant time.
            adapter.set_webhook_secret("s3cret")
            update = {"update_id": 900001, "message": {
                "message_id": 77001, "date": int(time.time()), "chat": {"id": 42, "type": "private"},
                "from": tg.ANN, "text": "by webhook"}}
            body = json.dumps(update).encode()
            assert adapter.handle_webhook("wrong", body, router)[0] == 401
            assert adapter.handle_webhook(None, body, router)[0] == 401
            assert adapter.handle_webhook("s3cret", b"not json", router)[0] == 400
            assert adapter.handle_webhook("s3cret", body, router)[0] == 200
            assert "by webhook" in fake.wait_reply(42, "echo #2:", timeout=WAIT)["text"]
            assert adapter.stats()["webhook_refused"] == 2
        assert router.closed
    finally:
        fake.stop()


def test_a_router_closed_while_polling_stops_the_poll_first(root):
    fake = tg.Fake(root)
    try:
        adapter = sessionturn.TelegramAdapter(tg.TOKEN, api_url=fake.url, chat_interval=0.0, poll_timeout=1.0)
        bot = adapter.connect()
        router = sessionturn.Router(local_backend(root), adapter, owner_uid=str(bot["id"]),
                                    store_path=os.path.join(root, "r.db"))
        router.start()
        adapter.start_polling(router)
        assert fake.wait(method="getUpdates", started=True, timeout=WAIT) is not None
        router.close()  # no stop(): polling ends before the router goes
        polls = len(fake.calls("getUpdates"))
        time.sleep(2.5)  # more than two poll periods: a poll still running would have come back
        assert len(fake.calls("getUpdates")) == polls
        fake.send(42, "after the close")
        time.sleep(0.5)
        assert fake.bot_texts(42) == []
        with pytest.raises(sessionturn.UnavailableError, match="closed"):
            adapter.start_polling(router)
        # Closed, the adapter may serve a new router (one at a time).
        again = sessionturn.Router(local_backend(root), adapter, owner_uid=str(bot["id"]),
                                   store_path=os.path.join(root, "r.db"))
        with pytest.raises(ValueError, match="already serves another Router"):
            sessionturn.Router(sessionturn.LocalBackend(os.path.join(root, "s2"), in_process=True), adapter,
                               owner_uid="x", store_path=os.path.join(root, "x.db"))
        with again:
            adapter.start_polling(again)
            assert "after the close" in fake.wait_reply(42, "echo #1:", timeout=WAIT)["text"]
    finally:
        fake.stop()


def test_on_fatal_reports_a_second_poller(root):
    fake = tg.Fake(root)
    try:
        fatal = []
        seen = threading.Event()

        def on_fatal(error):  # on a worker
            fatal.append(error)
            seen.set()

        adapter = sessionturn.TelegramAdapter(tg.TOKEN, api_url=fake.url, poll_timeout=1.0)
        bot = adapter.connect()
        router = sessionturn.Router(local_backend(root), adapter, owner_uid=str(bot["id"]),
                                    store_path=os.path.join(root, "r.db"))
        with router:
            adapter.start_polling(router, on_fatal=on_fatal)
            assert fake.wait(method="getUpdates", started=True, timeout=WAIT) is not None
            stop = threading.Event()

            def poll():  # another program polling with the same token
                while not stop.is_set():
                    tg.request(fake.url + "/bot%s/getUpdates?timeout=1" % tg.TOKEN)

            other = threading.Thread(target=poll, daemon=True)
            other.start()
            try:
                assert seen.wait(WAIT), "on_fatal was not called"
            finally:
                stop.set()
                other.join(10)
            assert isinstance(fatal[0], sessionturn.ConflictError), fatal
            assert "another" in str(fatal[0]) or "onflict" in str(fatal[0])
            assert len(fatal) == 1
    finally:
        fake.stop()


def test_adapter_errors_are_named(root):
    with pytest.raises(sessionturn.InvalidArgumentError, match="token"):
        sessionturn.TelegramAdapter("")
    with pytest.raises(sessionturn.InvalidArgumentError):
        sessionturn.SlackAdapter("")
    fake = tg.Fake(root)
    try:
        wrong = sessionturn.TelegramAdapter("123456:WRONG", api_url=fake.url)
        with pytest.raises(sessionturn.UnauthorizedError) as e:
            wrong.connect()
        assert "WRONG" not in str(e.value)
        a = sessionturn.TelegramAdapter(tg.TOKEN, api_url=fake.url)
        other = sessionturn.TelegramAdapter(tg.TOKEN, api_url=fake.url)
        router = sessionturn.Router(local_backend(root), a, owner_uid="o", store_path=os.path.join(root, "r.db"))
        with pytest.raises(ValueError, match="does not drive this adapter"):
            other.start_polling(router)
        with pytest.raises(TypeError, match="sessionturn.Router"):
            a.start_polling(object())
        router.close()
        ctx = sessionturn.Context()
        try:
            elsewhere = sessionturn.TelegramAdapter(tg.TOKEN, api_url=fake.url, context=ctx)
            with pytest.raises(ValueError, match="same sessionturn.Context"):
                sessionturn.Router(local_backend(root), elsewhere, owner_uid="o", store_path=os.path.join(root, "x.db"))
        finally:
            ctx.stop()
    finally:
        fake.stop()


def test_telegram_answers_with_fields_of_other_types_are_errors_not_hangs(root):
    # A field of another type in a Bot API result once threw out of the reader: the call's caller never heard back.
    fake = tg.Fake(root)
    try:
        adapter = sessionturn.TelegramAdapter(tg.TOKEN, api_url=fake.url, chat_interval=0.0)
        fake.fault(method="getMe", kind="result", result={"id": "1", "username": 5, "can_read_all_group_messages": 1})
        with pytest.raises(sessionturn.ProtocolError, match="no bot id or username"):
            adapter.connect()
        bot = adapter.connect()
        router = sessionturn.Router(local_backend(root), adapter, owner_uid=str(bot["id"]),
                                    bot_username=bot["username"], store_path=os.path.join(root, "r.db"),
                                    progress_interval=0.05)
        with router:
            adapter.start_polling(router)
            # The placeholder's sendMessage is answered with a message_id that is a string: a failed post, and the
            # reply still comes, as a post of its own.
            fake.fault(method="sendMessage", kind="result", result={"message_id": "77001", "text": "x"})
            fake.send(42, "hello there")
            assert "hello there" in fake.wait_reply(42, "echo #1:", timeout=WAIT)["text"]
            answered = [c for c in fake.calls("sendMessage") if c["status"] == 200]
            assert answered and answered[0]["response"]["result"] == {"message_id": "77001", "text": "x"}
    finally:
        fake.stop()


def test_slack_socket_mode_through_the_python_router(root):
    fake = sl.SlackFake(root)
    try:
        adapter = sessionturn.SlackAdapter(sl.BOT_TOKEN, app_token=sl.APP_TOKEN, api_url=fake.api_url,
                                           channel_interval=0.0)
        info = adapter.connect()
        assert info["user_id"] == sl.BOT_USER
        router = sessionturn.Router(local_backend(root), adapter, owner_uid=info["team_id"],
                                    store_path=os.path.join(root, "r.db"), progress_interval=0.05)
        with router:
            adapter.start_socket_mode(router)
            fake.wait_connections(1)
            fake.say(sl.DM_ANN, "hello from slack")
            assert "hello from slack" in fake.wait_reply(sl.DM_ANN, "echo #1:", timeout=WAIT)["text"]
            assert adapter.socket_connected
            adapter.stop_inbound()
            assert not adapter.socket_connected
    finally:
        fake.stop()


class _EventsHandler(http.server.BaseHTTPRequestHandler):
    """POST /slack/events handed to SlackAdapter.handle_events, as a bot's own web framework would."""

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        status, content_type, out = self.server.adapter.handle_events(
            body, self.server.router, content_type=self.headers.get("Content-Type", ""),
            signature=self.headers.get("X-Slack-Signature", ""),
            timestamp=self.headers.get("X-Slack-Request-Timestamp", ""),
            retry_num=self.headers.get("X-Slack-Retry-Num", ""))
        data = out.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type or "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_slack_events_api_behind_a_python_http_server(root):
    fake = sl.SlackFake(root)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EventsHandler)
    try:
        adapter = sessionturn.SlackAdapter(sl.BOT_TOKEN, signing_secret=sl.SIGNING_SECRET, api_url=fake.api_url,
                                           channel_interval=0.0)
        info = adapter.connect()
        router = sessionturn.Router(local_backend(root), adapter, owner_uid=info["team_id"],
                                    store_path=os.path.join(root, "r.db"), progress_interval=0.05)
        with router:
            server.adapter, server.router = adapter, router
            threading.Thread(target=server.serve_forever, daemon=True).start()
            fake.post("config", {"events_url": "http://127.0.0.1:%d/slack/events" % server.server_address[1]})
            assert fake.post("url_verification", {})["echoed"]
            fake.say(sl.DM_ANN, "over python http")
            assert "over python http" in fake.wait_reply(sl.DM_ANN, "echo #1:", timeout=WAIT)["text"]
            fake.post("config", {"signing": "forged", "max_retries": 0})
            fake.say(sl.DM_ANN, "forged one")
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline:
                refused = [d for d in fake.get("deliveries") if d.get("signing") == "forged" and d.get("status")]
                if refused:
                    break
                time.sleep(0.05)
            assert refused and refused[0]["status"] == 401
            assert adapter.stats()["requests_refused"] >= 1
    finally:
        server.shutdown()
        server.server_close()
        fake.stop()


def test_python_m_bridges_answer_help():
    """The bridge programs reachable from the package (their whole-program tests run as python:python -m ...)."""
    import subprocess
    env = dict(os.environ)
    for platform in ("telegram", "slack"):
        out = subprocess.run([sys.executable, "-m", "sessionturn." + platform, "--help"], env=env,
                             capture_output=True, text=True, timeout=WAIT)
        assert out.returncode == 0, out.stderr
        assert "--state-dir" in out.stdout and "--provider" in out.stdout
        bad = subprocess.run([sys.executable, "-m", "sessionturn." + platform, "--no-such-flag"], env=env,
                             capture_output=True, text=True, timeout=WAIT)
        assert bad.returncode == 2 and "no-such-flag" in bad.stderr
