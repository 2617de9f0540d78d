#!/usr/bin/python3
"""Self-test of the Slack fake (slack_api.py): the Web API through urllib, Socket Mode through python3-websockets
(an independent WebSocket client), the Events API through a small HTTP receiver, and the /_test/ control API.
Every case starts its own fake and stops it. Run: /usr/bin/python3 test_slack_fake.py
"""

import asyncio
import hashlib
import hmac
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import websockets

HERE = os.path.dirname(os.path.abspath(__file__))
BOT = "xoxb-77-SELF-TEST-BOT"
APP = "xapp-77-SELF-TEST-APP"
SECRET = "self-test-signing-secret-0123456789"
BUTTONS = [{"type": "section", "text": {"type": "mrkdwn", "text": "Pick one"}},
           {"type": "actions", "block_id": "choice", "elements": [
               {"type": "button", "text": {"type": "plain_text", "text": "Yes"}, "value": "yes", "action_id": "a-yes"},
               {"type": "button", "text": {"type": "plain_text", "text": "No"}, "value": "no", "action_id": "a-no"}]}]


def request(url, body=None, content_type="application/json", headers=None, method=None, timeout=30):
    """(status, headers, parsed JSON or text) for one request."""
    data = None
    hdrs = dict(headers or {})
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        hdrs["Content-Type"] = content_type
    req = urllib.request.Request(url, data=data, headers=hdrs, method=method or ("POST" if data else "GET"))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw, status, h = resp.read(), resp.status, resp.headers
    except urllib.error.HTTPError as e:
        raw, status, h = e.read(), e.code, e.headers
    try:
        return status, h, json.loads(raw)
    except ValueError:
        return status, h, raw.decode()


class Ws:
    """A Socket Mode client on python3-websockets, driven synchronously from the test."""

    def __init__(self, url):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.ws = None

        async def connect():
            return await websockets.connect(url, ping_interval=None, compression=None, open_timeout=5)
        try:
            self.ws = self.run(connect())
        except Exception:
            self.close()
            raise

    def run(self, coro, timeout=10):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def recv(self, timeout=5):
        return json.loads(self.run(asyncio.wait_for(self.ws.recv(), timeout), timeout + 2))

    def recv_event(self, timeout=5, ack=True):
        """The next envelope that is not a hello or disconnect, acked at once unless ack is false."""
        while True:
            msg = self.recv(timeout)
            if msg.get("type") not in ("hello", "disconnect"):
                if ack:
                    self.send({"envelope_id": msg["envelope_id"]})
                return msg

    def send(self, value):
        self.run(self.ws.send(json.dumps(value)))

    def ping(self, data, timeout=2):
        async def go():
            waiter = await self.ws.ping(data)
            try:
                await asyncio.wait_for(waiter, timeout)
                return True
            except asyncio.TimeoutError:
                return False
        return self.run(go(), timeout + 2)

    def wait_closed(self, timeout=10):
        async def go():
            await asyncio.wait_for(self.ws.wait_closed(), timeout)
            return self.ws.close_code
        return self.run(go(), timeout + 2)

    def close(self):
        async def finish():
            if self.ws is not None:
                try:
                    await asyncio.wait_for(self.ws.close(), 3)
                except Exception:
                    pass
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=1)
        try:
            self.run(finish(), 8)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class Receiver:
    """The app's HTTP endpoint for the Events API: records each request; answers as told."""

    def __init__(self):
        self.requests = []
        self.status = 200
        self.delay = 0.0
        self.no_retry = False
        self.cv = threading.Condition()
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with outer.cv:
                    outer.requests.append({"headers": dict(self.headers), "body": body, "time": time.time()})
                    outer.cv.notify_all()
                    status, delay, no_retry = outer.status, outer.delay, outer.no_retry
                time.sleep(delay)
                data = b"ok"
                try:
                    self.send_response(status)
                    if no_retry:
                        self.send_header("X-Slack-No-Retry", "1")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d/slack/events" % self.server.server_address[1]

    def wait(self, n, timeout=10):
        with self.cv:
            self.cv.wait_for(lambda: len(self.requests) >= n, timeout)
            return list(self.requests)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class Base(unittest.TestCase):
    extra = ()

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="slackfake-")
        self.out = open(os.path.join(self.dir, "output.log"), "w+")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "slack_api.py"), "--dir", self.dir,
                                      "--bot-token", BOT, "--app-token", APP, "--signing-secret", SECRET,
                                      *self.extra], stdout=self.out, stderr=subprocess.STDOUT)
        ready = os.path.join(self.dir, "ready.json")
        for _ in range(200):
            if os.path.exists(ready):
                break
            self.assertIsNone(self.proc.poll(), "the fake exited")
            time.sleep(0.02)
        with open(ready) as f:
            self.port = json.load(f)["port"]
        self.base = "http://127.0.0.1:%d" % self.port
        self.sockets = []
        self.receiver = None

    def tearDown(self):
        for ws in self.sockets:
            ws.close()
        if self.receiver:
            self.receiver.stop()
        self.proc.kill()
        self.proc.wait(10)
        self.out.seek(0)
        printed = self.out.read()
        self.out.close()
        files = ""
        for name in os.listdir(self.dir):
            with open(os.path.join(self.dir, name), errors="replace") as f:
                files += f.read()
        shutil.rmtree(self.dir, ignore_errors=True)
        for secret in (BOT, APP, SECRET):
            self.assertNotIn(secret, printed + files, "the fake printed or wrote a secret")

    def api(self, method, params=None, token=BOT, form=False):
        headers = {"Authorization": "Bearer " + token} if token else {}
        if form:
            body = urllib.parse.urlencode({k: json.dumps(v) if isinstance(v, (list, dict)) else v
                                           for k, v in (params or {}).items()}).encode()
            return request("%s/api/%s" % (self.base, method), body, "application/x-www-form-urlencoded", headers)[2]
        return request("%s/api/%s" % (self.base, method), params or {}, "application/json; charset=utf-8",
                       headers)[2]

    def ok(self, method, params=None, **kw):
        out = self.api(method, params, **kw)
        self.assertTrue(out.get("ok"), out)
        return out

    def fails(self, method, params, error, **kw):
        out = self.api(method, params, **kw)
        self.assertEqual((out.get("ok"), out.get("error")), (False, error), out)
        return out

    def control(self, path, body=None, expect=200):
        status, _, out = request("%s/_test/%s" % (self.base, path), body, timeout=40)
        self.assertEqual(status, expect, out)
        return out

    def say(self, text, channel="D0ANN", user="U0ANN", **kw):
        return self.control("message", dict({"channel": channel, "user": user, "text": text}, **kw))

    def connect(self):
        url = self.ok("apps.connections.open", token=APP)["url"]
        ws = Ws(url)
        self.sockets.append(ws)
        ws.hello = ws.recv()
        self.assertEqual(ws.hello["type"], "hello")
        return ws

    def post(self, text="hello", channel="D0ANN", **kw):
        return self.ok("chat.postMessage", dict({"channel": channel, "text": text}, **kw))


class WebApi(Base):
    def test_auth_test_describes_the_bot(self):
        out = self.ok("auth.test")
        self.assertEqual({k: out[k] for k in ("team_id", "user_id", "bot_id", "user")},
                         {"team_id": "T0TEAM", "user_id": "U0BOT", "bot_id": "B0BOT", "user": "sessionturn"})
        self.assertTrue(out["url"].startswith("https://"))

    def test_tokens_are_checked_by_kind(self):
        self.fails("auth.test", None, "not_authed", token=None)
        self.fails("auth.test", None, "invalid_auth", token="xoxb-wrong")
        self.fails("chat.postMessage", {"channel": "D0ANN", "text": "x"}, "not_allowed_token_type", token=APP)
        self.fails("apps.connections.open", None, "not_allowed_token_type", token=BOT)
        self.fails("apps.connections.open", {"token": APP}, "not_authed", token=None, form=True)
        self.fails("nope.method", None, "unknown_method")
        calls = self.control("calls")
        self.assertEqual([c["token"] for c in calls], ["none", "invalid", "app", "bot", "none", "bot"])
        self.assertEqual(calls[-1]["response"]["req_method"], "nope.method")

    def test_parameters_come_from_query_form_and_json(self):
        a = request("%s/api/chat.postMessage?channel=D0ANN&text=query" % self.base,
                    headers={"Authorization": "Bearer " + BOT})[2]
        b = request("%s/api/chat.postMessage" % self.base, ("token=%s&channel=D0ANN&text=form" % BOT).encode(),
                    "application/x-www-form-urlencoded")[2]
        c = request("%s/api/chat.postMessage" % self.base, {"channel": "D0ANN", "text": "json"},
                    headers={"Authorization": "Bearer " + BOT})[2]
        d = request("%s/api/chat.postMessage" % self.base, {"channel": "D0ANN", "text": "x", "token": BOT})[2]
        self.assertEqual([x["message"]["text"] for x in (a, b, c)], ["query", "form", "json"])
        self.assertEqual(c["warning"], "missing_charset")
        self.assertEqual(d["error"], "not_authed")
        self.assertNotIn("token", json.dumps(self.control("calls")).replace('"token":', ""))

    def test_post_message_answers_with_the_stored_message_and_increasing_ts(self):
        first = self.post("one")
        second = self.post("two", channel="C0GENERAL")
        third = self.post("three")
        for out in (first, second, third):
            self.assertRegex(out["ts"], r"^\d{10}\.\d{6}$")
            self.assertEqual(out["message"]["ts"], out["ts"])
        self.assertLess(float(first["ts"]), float(third["ts"]))
        m = first["message"]
        self.assertEqual((m["user"], m["bot_id"], m["app_id"], m["text"], m["type"]),
                         ("U0BOT", "B0BOT", "A0APP", "one", "message"))
        self.assertEqual(first["channel"], "D0ANN")
        self.assertEqual(self.post("to ann's app DM", channel="U0ANN")["channel"], "D0ANN")

    def test_post_message_errors(self):
        self.fails("chat.postMessage", {"channel": "D0ANN"}, "no_text")
        self.fails("chat.postMessage", {"channel": "D0ANN", "text": "", "blocks": []}, "no_text")
        self.fails("chat.postMessage", {"channel": "D0ANN", "text": "x" * 40001}, "msg_too_long")
        self.ok("chat.postMessage", {"channel": "D0ANN", "text": "x" * 40000})
        self.fails("chat.postMessage", {"channel": "C0NOPE", "text": "x"}, "channel_not_found")
        self.control("channels", {"id": "C0PRIV", "type": "group", "name": "secret", "bot_member": False})
        self.fails("chat.postMessage", {"channel": "C0PRIV", "text": "x"}, "not_in_channel")
        self.fails("chat.postMessage", {"channel": "D0ANN", "text": "x", "thread_ts": "123.000001"},
                   "invalid_thread_ts")

    def test_block_kit_limits(self):
        def blocks_error(blocks):
            return self.fails("chat.postMessage", {"channel": "D0ANN", "text": "t", "blocks": blocks},
                              "invalid_blocks")["errors"]
        section = {"type": "section", "text": {"type": "mrkdwn", "text": "s"}}
        self.assertIn("[json-pointer:/blocks]", blocks_error([section] * 51)[0])
        self.ok("chat.postMessage", {"channel": "D0ANN", "text": "t", "blocks": [dict(section) for _ in range(50)]})
        long = {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}
        self.assertEqual(blocks_error([long]),
                         ["must be less than 3001 characters [json-pointer:/blocks/0/text/text]"])
        widest = {"type": "section", "text": {"type": "plain_text", "text": "x" * 3000}}
        self.ok("chat.postMessage", {"channel": "D0ANN", "text": "t", "blocks": [widest]})
        empty = {"type": "section", "text": {"type": "mrkdwn", "text": ""}}
        self.assertIn("/blocks/0/text/text", blocks_error([empty])[0])

        def button(**kw):
            return dict({"type": "button", "text": {"type": "plain_text", "text": "ok"}}, **kw)
        self.assertIn("/elements/0/text/text", blocks_error([{"type": "actions", "elements": [
            button(text={"type": "plain_text", "text": "x" * 76})]}])[0])
        self.assertIn("/elements/0/text/type", blocks_error([{"type": "actions", "elements": [
            button(text={"type": "mrkdwn", "text": "b"})]}])[0])
        self.assertIn("/elements/0/value", blocks_error([{"type": "actions", "elements": [
            button(value="v" * 2001)]}])[0])
        self.assertIn("/elements/0/action_id", blocks_error([{"type": "actions", "elements": [
            button(action_id="a" * 256)]}])[0])
        self.assertIn("/blocks/0/elements/1/action_id", blocks_error([{"type": "actions", "elements": [
            button(action_id="same"), button(action_id="same")]}])[0])
        self.assertIn("/blocks/0/elements", blocks_error([{"type": "actions", "elements": [button()] * 26}])[0])
        self.ok("chat.postMessage", {"channel": "D0ANN", "text": "t", "blocks": [
            {"type": "actions", "elements": [button(action_id="same")]},
            {"type": "actions", "elements": [button(action_id="same")]}]})
        self.assertIn("/blocks/0/type", blocks_error([{"type": "nonsense"}])[0])
        self.fails("chat.postMessage", {"channel": "D0ANN", "text": "t", "blocks": "[not json"},
                   "invalid_blocks_format", form=True)
        out = self.ok("chat.postMessage", {"channel": "D0ANN", "text": "t", "blocks": BUTTONS}, form=True)
        self.assertEqual(out["message"]["blocks"][1]["elements"][0]["action_id"], "a-yes")
        self.assertTrue(out["message"]["blocks"][0]["block_id"])  # Slack adds block ids

    def test_threads_and_conversations_replies(self):
        ann = self.say("question")
        r1 = self.post("answer 1", thread_ts=ann["ts"])
        self.say("follow up", thread_ts=ann["ts"])
        r3 = self.post("answer 2", thread_ts=r1["ts"])  # a reply's ts threads under its parent
        self.assertEqual((r1["message"]["thread_ts"], r3["message"]["thread_ts"]), (ann["ts"], ann["ts"]))
        out = self.ok("conversations.replies", {"channel": "D0ANN", "ts": ann["ts"]})
        texts = [m["text"] for m in out["messages"]]
        self.assertEqual(texts, ["question", "answer 1", "follow up", "answer 2"])
        parent = out["messages"][0]
        self.assertEqual((parent["reply_count"], parent["latest_reply"], parent["reply_users"]),
                         (3, r3["ts"], ["U0BOT", "U0ANN"]))
        self.assertTrue(all(m["parent_user_id"] == "U0ANN" for m in out["messages"][1:]))
        self.assertFalse(out["has_more"])
        alone = self.ok("conversations.replies", {"channel": "D0ANN", "ts": r1["ts"]})["messages"]
        self.assertEqual([m["text"] for m in alone], ["answer 1"])
        self.fails("conversations.replies", {"channel": "D0ANN", "ts": "1.000001"}, "thread_not_found")

    def test_replies_pages_with_the_parent_first_on_each(self):
        root = self.say("root")["ts"]
        replies = [self.post("r%d" % i, thread_ts=root)["ts"] for i in range(5)]
        pages, cursor = [], None
        while True:
            params = {"channel": "D0ANN", "ts": root, "limit": 3}
            if cursor:
                params["cursor"] = cursor
            out = self.ok("conversations.replies", params, form=True)
            pages.append([m["text"] for m in out["messages"]])
            if not out["has_more"]:
                break
            cursor = out["response_metadata"]["next_cursor"]
        self.assertEqual(pages, [["root", "r0", "r1"], ["root", "r2", "r3"], ["root", "r4"]])
        self.fails("conversations.replies", {"channel": "D0ANN", "ts": root, "cursor": "bogus!"}, "invalid_cursor")
        window = self.ok("conversations.replies", {"channel": "D0ANN", "ts": root, "oldest": replies[1],
                                                   "latest": replies[3], "inclusive": True})
        self.assertEqual([m["text"] for m in window["messages"]], ["root", "r1", "r2", "r3"])
        window = self.ok("conversations.replies", {"channel": "D0ANN", "ts": root, "oldest": replies[1],
                                                   "latest": replies[3]})
        self.assertEqual([m["text"] for m in window["messages"]], ["root", "r2"])

    def test_update_follows_slacks_rules_for_text_and_blocks(self):
        ts = self.post("first", blocks=BUTTONS)["ts"]
        out = self.ok("chat.update", {"channel": "D0ANN", "ts": ts, "blocks": BUTTONS[:1]})
        self.assertEqual((out["text"], len(out["message"]["blocks"])), ("first", 1))
        self.assertNotIn("edited", out["message"])
        out = self.ok("chat.update", {"channel": "D0ANN", "ts": ts, "text": "second"})
        self.assertNotIn("blocks", out["message"])  # new text without blocks drops them
        self.assertEqual(out["message"]["edited"]["user"], "U0BOT")
        self.fails("chat.update", {"channel": "D0ANN", "ts": ts}, "no_text")
        self.fails("chat.update", {"channel": "D0ANN", "ts": "1.000001", "text": "x"}, "message_not_found")
        ann = self.say("mine")["ts"]
        self.fails("chat.update", {"channel": "D0ANN", "ts": ann, "text": "x"}, "cant_update_message")
        self.fails("chat.update", {"channel": "D0ANN", "ts": ts, "text": "y" * 40001}, "msg_too_long")
        view = [m for m in self.control("messages?channel=D0ANN") if m["ts"] == ts][0]
        self.assertEqual((view["text"], view["updates"], view["blocks"]), ("second", 2, None))

    def test_delete_and_tombstones(self):
        lone = self.post("lone")["ts"]
        self.ok("chat.delete", {"channel": "D0ANN", "ts": lone})
        self.fails("chat.delete", {"channel": "D0ANN", "ts": lone}, "message_not_found")
        parent = self.post("parent")["ts"]
        self.say("reply", thread_ts=parent)
        self.ok("chat.delete", {"channel": "D0ANN", "ts": parent})
        msgs = self.ok("conversations.replies", {"channel": "D0ANN", "ts": parent})["messages"]
        self.assertEqual([m.get("subtype") for m in msgs], ["tombstone", None])
        ann = self.say("not yours")["ts"]
        self.fails("chat.delete", {"channel": "D0ANN", "ts": ann}, "cant_delete_message")

    def test_post_ephemeral(self):
        out = self.ok("chat.postEphemeral", {"channel": "C0GENERAL", "user": "U0BOB", "text": "only you"})
        self.assertRegex(out["message_ts"], r"^\d+\.\d{6}$")
        self.fails("chat.postEphemeral", {"channel": "D0ANN", "user": "U0BOB", "text": "x"}, "user_not_in_channel")
        self.fails("chat.postEphemeral", {"channel": "D0ANN", "user": "U0NOBODY", "text": "x"}, "user_not_found")
        self.assertEqual([(e["user"], e["text"]) for e in self.control("ephemerals")], [("U0BOB", "only you")])
        self.assertEqual([m["text"] for m in self.control("messages?channel=C0GENERAL")], [])

    def test_users_info(self):
        self.control("users", {"id": "U0CAT", "name": "cat", "real_name": "Cat Person", "display_name": "kitty"})
        user = self.ok("users.info", {"user": "U0CAT"})["user"]
        self.assertEqual((user["id"], user["name"], user["real_name"], user["is_bot"], user["team_id"]),
                         ("U0CAT", "cat", "Cat Person", False, "T0TEAM"))
        self.assertEqual(user["profile"]["display_name"], "kitty")
        self.assertTrue(self.ok("users.info", {"user": "U0BOT"})["user"]["is_bot"])
        self.fails("users.info", {"user": "U0NONE"}, "user_not_found")

    def test_assistant_status(self):
        root = self.say("help me")["ts"]
        self.ok("assistant.threads.setStatus", {"channel_id": "D0ANN", "thread_ts": root, "status": "is thinking..."})
        self.assertEqual([s["status"] for s in self.control("statuses")], ["is thinking..."])
        reply = self.post("done", thread_ts=root)["ts"]
        self.assertEqual(self.control("statuses"), [])  # a reply clears it
        self.fails("assistant.threads.setStatus", {"channel_id": "D0ANN", "thread_ts": reply, "status": "x"},
                   "invalid_thread_ts")
        self.fails("assistant.threads.setStatus", {"channel_id": "D0ANN", "status": "x"}, "invalid_arguments")
        self.control("fault", {"method": "assistant.threads.setStatus", "kind": "error", "error": "missing_scope",
                               "needed": "assistant:write", "provided": "chat:write", "count": -1})
        for _ in range(2):
            out = self.fails("assistant.threads.setStatus", {"channel_id": "D0ANN", "thread_ts": root, "status": "x"},
                             "missing_scope")
            self.assertEqual(out["needed"], "assistant:write")
        self.control("fault", {"method": "assistant.threads.setStatus", "clear": True})
        self.ok("assistant.threads.setStatus", {"channel_id": "D0ANN", "thread_ts": root, "status": ""})

    def test_faults(self):
        self.control("fault", {"method": "chat.postMessage", "kind": "ratelimited", "retry_after": 7})
        status, headers, body = request("%s/api/chat.postMessage" % self.base, {"channel": "D0ANN", "text": "x"},
                                        headers={"Authorization": "Bearer " + BOT})
        self.assertEqual((status, headers["Retry-After"], body), (429, "7", {"ok": False, "error": "ratelimited"}))
        self.post("after the limit")
        self.control("fault", {"method": "auth.test", "kind": "http500"})
        status, _, body = request("%s/api/auth.test" % self.base, headers={"Authorization": "Bearer " + BOT})
        self.assertEqual(status, 500)
        self.assertIn("Internal Server Error", body)
        self.control("fault", {"method": "auth.test", "kind": "drop"})
        with self.assertRaises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(urllib.request.Request("%s/api/auth.test" % self.base,
                                                          headers={"Authorization": "Bearer " + BOT}), timeout=5)
        self.ok("auth.test")
        statuses = [(c["method"], c["status"], c["error"]) for c in self.control("calls")]
        self.assertEqual(statuses, [("chat.postMessage", 429, "ratelimited"), ("chat.postMessage", 200, None),
                                    ("auth.test", 500, "http500"), ("auth.test", 0, "dropped"),
                                    ("auth.test", 200, None)])


class SocketMode(Base):
    extra = ("--ack-timeout", "1.5", "--ping-interval", "0")

    def test_connections_open_gives_a_single_use_ticket_url(self):
        url = self.ok("apps.connections.open", token=APP)["url"]
        self.assertRegex(url, r"^ws://127\.0\.0\.1:%d/link/\?ticket=[0-9a-f-]{36}&app_id=A0APP$" % self.port)
        ws = Ws(url)
        self.sockets.append(ws)
        hello = ws.recv()
        self.assertEqual(hello, {"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A0APP"},
                                 "debug_info": {"host": "applink-fake-0", "build_number": 1,
                                                "approximate_connection_time": 3600}})
        with self.assertRaises(websockets.exceptions.InvalidStatusCode) as used:
            Ws(url)
        with self.assertRaises(websockets.exceptions.InvalidStatusCode) as bad:
            Ws(url.replace("ticket=", "ticket=x"))
        self.assertEqual((used.exception.status_code, bad.exception.status_code), (410, 401))
        self.assertEqual([r["status"] for r in self.control("refusals")], [410, 401])
        self.assertEqual(self.connect().hello["num_connections"], 2)

    def test_a_message_arrives_as_an_events_api_envelope(self):
        ws = self.connect()
        self.control("config", {"ack_timeout": 1.0})
        sent = self.say("hello there")
        env = ws.recv_event(ack=False)
        self.assertEqual(set(env), {"envelope_id", "payload", "type", "accepts_response_payload", "retry_attempt",
                                    "retry_reason"})
        self.assertEqual((env["type"], env["accepts_response_payload"], env["retry_attempt"], env["retry_reason"]),
                         ("events_api", False, 0, ""))
        p = env["payload"]
        self.assertEqual((p["type"], p["team_id"], p["api_app_id"], p["event_id"], p["is_ext_shared_channel"]),
                         ("event_callback", "T0TEAM", "A0APP", sent["event_ids"][0], False))
        self.assertEqual(p["authorizations"][0]["user_id"], "U0BOT")
        ev = p["event"]
        self.assertEqual({k: ev[k] for k in ("type", "channel", "channel_type", "user", "text", "ts", "event_ts",
                                             "team")},
                         {"type": "message", "channel": "D0ANN", "channel_type": "im", "user": "U0ANN",
                          "text": "hello there", "ts": sent["ts"], "event_ts": sent["ts"], "team": "T0TEAM"})
        self.assertTrue(ev["client_msg_id"])
        self.assertEqual(ev["blocks"][0]["type"], "rich_text")
        ws.send({"envelope_id": env["envelope_id"]})
        ack = self.control("wait", {"acked": sent["event_ids"][0]})["match"]
        self.assertFalse(ack["late"])
        self.assertLess(ack["latency"], 1)
        time.sleep(1.2)  # past the ack timeout: no retry
        self.assertEqual(len(self.control("deliveries")), 1)

    def test_a_mention_in_a_channel_is_also_an_app_mention(self):
        ws = self.connect()
        sent = self.say("hey <@U0BOT> look", channel="C0GENERAL")
        self.assertEqual(len(sent["event_ids"]), 2)
        envs = [ws.recv_event(), ws.recv_event()]
        kinds = [(e["payload"]["event"]["type"], e["payload"]["event"]["ts"], e["payload"]["event_id"]) for e in envs]
        self.assertEqual(kinds, [("message", sent["ts"], sent["event_ids"][0]),
                                 ("app_mention", sent["ts"], sent["event_ids"][1])])
        self.assertEqual(envs[0]["payload"]["event"]["channel_type"], "channel")
        im = self.say("hi <@U0BOT>")  # in an IM Slack sends no app_mention
        self.assertEqual(len(im["event_ids"]), 1)

    def test_an_unacked_event_is_redelivered_three_times_as_new_envelopes(self):
        ws = self.connect()
        self.control("config", {"ack_timeout": 0.3})
        sent = self.say("nobody acks this")
        envs = [ws.recv_event(3, ack=False) for _ in range(4)]
        self.assertEqual([(e["retry_attempt"], e["retry_reason"]) for e in envs],
                         [(0, ""), (1, "timeout"), (2, "timeout"), (3, "timeout")])
        self.assertEqual({e["payload"]["event_id"] for e in envs}, {sent["event_ids"][0]})
        self.assertEqual(len({e["envelope_id"] for e in envs}), 4)
        job = self.control("wait", {"what": "events", "state": "given_up"})["match"]
        self.assertEqual(job["attempts"], 4)
        ws.send({"envelope_id": envs[0]["envelope_id"]})  # far too late
        ack = self.control("wait", {"what": "acks"})["match"]
        self.assertTrue(ack["late"])

    def test_an_ack_of_a_retry_stops_the_retries(self):
        ws = self.connect()
        self.control("config", {"ack_timeout": 1.0})
        self.say("ack the second")
        ws.recv_event(ack=False)
        second = ws.recv_event(3, ack=False)
        ws.send({"envelope_id": second["envelope_id"], "payload": {}})
        self.control("wait", {"what": "events", "state": "acked"})
        time.sleep(1.2)
        self.assertEqual([d["retry_attempt"] for d in self.control("deliveries")], [0, 1])

    def test_the_bots_own_posts_come_back_as_events(self):
        ws = self.connect()
        ts = self.post("from the bot", blocks=BUTTONS)["ts"]
        ev = ws.recv_event()["payload"]["event"]
        self.assertEqual((ev["type"], ev["user"], ev["bot_id"], ev["ts"], ev["channel"]),
                         ("message", "U0BOT", "B0BOT", ts, "D0ANN"))
        self.ok("chat.update", {"channel": "D0ANN", "ts": ts, "text": "changed"})
        ev = ws.recv_event()["payload"]["event"]
        self.assertEqual((ev["subtype"], ev["message"]["text"], ev["previous_message"]["text"]),
                         ("message_changed", "changed", "from the bot"))
        self.control("config", {"echo_bot_messages": False})
        self.post("quiet")
        self.say("from ann")
        self.assertEqual(ws.recv_event()["payload"]["event"]["text"], "from ann")

    def test_edits_deletions_and_files_are_events(self):
        ws = self.connect()
        sent = self.say("typo")
        ws.recv_event()
        self.control("edit", {"channel": "D0ANN", "ts": sent["ts"], "text": "fixed"})
        ev = ws.recv_event()["payload"]["event"]
        self.assertEqual((ev["subtype"], ev["hidden"], ev["message"]["text"], ev["message"]["ts"],
                          ev["previous_message"]["text"], ev["message"]["edited"]["user"]),
                         ("message_changed", True, "fixed", sent["ts"], "typo", "U0ANN"))
        self.control("delete", {"channel": "D0ANN", "ts": sent["ts"]})
        ev = ws.recv_event()["payload"]["event"]
        self.assertEqual((ev["subtype"], ev["deleted_ts"], ev["previous_message"]["text"]),
                         ("message_deleted", sent["ts"], "fixed"))
        self.say("see attached", files=[{"name": "notes.txt", "preview": "line one"}])
        ev = ws.recv_event()["payload"]["event"]
        self.assertEqual((ev["subtype"], ev["files"][0]["name"], ev["files"][0]["preview"]),
                         ("file_share", "notes.txt", "line one"))

    def test_envelopes_wait_for_a_connection_and_go_round_robin(self):
        self.say("before anyone connected")
        a = self.connect()
        self.assertEqual(a.recv_event()["payload"]["event"]["text"], "before anyone connected")
        b = self.connect()
        self.control("config", {"echo_bot_messages": False})
        for i in range(4):
            self.say("m%d" % i)
        got_a = [a.recv_event()["payload"]["event"]["text"] for _ in range(2)]
        got_b = [b.recv_event()["payload"]["event"]["text"] for _ in range(2)]
        self.assertEqual(sorted(got_a + got_b), ["m0", "m1", "m2", "m3"])
        conns = self.control("connections")
        self.assertEqual([len(c["envelopes"]) for c in conns], [3, 2])

    def test_disconnect_refresh_requested_then_the_server_closes(self):
        ws = self.connect()
        self.control("socket", {"action": "disconnect", "reason": "refresh_requested", "close_after": 0.3})
        msg = ws.recv()
        self.assertEqual((msg["type"], msg["reason"]), ("disconnect", "refresh_requested"))
        self.assertIn("host", msg["debug_info"])
        self.assertEqual(ws.wait_closed(), 1000)
        conn = self.control("wait", {"closed_connections": 1})["match"]
        self.assertEqual((conn["disconnect_reason"], conn["closed_by"]), ("refresh_requested", "server"))

    def test_drop_close_and_client_close(self):
        a, b, c = self.connect(), self.connect(), self.connect()
        self.control("socket", {"action": "drop", "connection": 0})
        self.assertEqual(a.wait_closed(), 1006)
        self.control("socket", {"action": "close", "code": 4000, "connection": 1})
        self.assertEqual(b.wait_closed(), 4000)
        c.run(c.ws.close(1000, "bye"))
        conns = self.control("wait", {"closed_connections": 3})["matches"]
        self.assertEqual([(x["closed_by"], x["close_code"]) for x in conns],
                         [("server_drop", None), ("server", 4000), ("client", 1000)])

    def test_a_muted_connection_is_half_open(self):
        a = self.connect()
        b = self.connect()
        self.control("socket", {"action": "mute", "connection": 0})
        self.control("config", {"ack_timeout": 0.5})
        self.assertFalse(a.ping(b"anyone?", timeout=0.5))
        self.assertTrue(b.ping(b"still here"))
        self.control("config", {"echo_bot_messages": False})
        sent = self.say("into the void")
        env = b.recv_event(3)  # the first delivery went to the muted one; the retry goes round
        self.assertEqual((env["payload"]["event_id"], env["retry_attempt"]), (sent["event_ids"][0], 1))
        deliveries = self.control("deliveries")
        self.assertEqual([(d["connection"], d["written"]) for d in deliveries], [(0, False), (1, True)])
        self.assertEqual(self.control("connections")[1]["client_pings"], 1)
        self.control("socket", {"action": "drop", "connection": 0})  # a half-open socket answers no close frame
        self.assertEqual(a.wait_closed(), 1006)

    def test_too_many_websockets(self):
        self.extra = ("--max-connections", "1")
        self.tearDown()
        self.setUp()
        self.connect()
        extra = self.connect()
        msg = extra.recv()
        self.assertEqual((msg["type"], msg["reason"]), ("disconnect", "too_many_websockets"))

    def test_press_builds_block_actions_from_the_message(self):
        ws = self.connect()
        self.control("config", {"echo_bot_messages": False})
        root = self.say("choose")["ts"]
        ws.recv_event()
        msg = self.post("Pick", channel="D0ANN", blocks=BUTTONS, thread_ts=root)
        out = self.control("press", {"channel": "D0ANN", "ts": msg["ts"], "user": "U0ANN", "label": "No"})
        env = ws.recv_event()
        self.assertEqual((env["type"], env["accepts_response_payload"]), ("interactive", False))
        self.assertNotIn("retry_attempt", env)
        p = env["payload"]
        self.assertEqual(p, out["payload"])
        self.assertEqual((p["type"], p["user"], p["api_app_id"], p["channel"], p["team"]["id"]),
                         ("block_actions", {"id": "U0ANN", "username": "ann", "name": "ann", "team_id": "T0TEAM"},
                          "A0APP", {"id": "D0ANN", "name": "directmessage"}, "T0TEAM"))
        self.assertEqual(p["container"], {"type": "message", "message_ts": msg["ts"], "channel_id": "D0ANN",
                                          "is_ephemeral": False, "thread_ts": root})
        action = p["actions"][0]
        self.assertEqual((action["type"], action["action_id"], action["block_id"], action["value"],
                          action["text"]["text"]), ("button", "a-no", "choice", "no", "No"))
        self.assertEqual(p["message"]["ts"], msg["ts"])
        self.assertTrue(p["trigger_id"] and p["response_url"].startswith(self.base))
        self.control("press", {"channel": "D0ANN", "ts": msg["ts"], "user": "U0ANN", "value": "maybe"}, expect=400)
        status, _, answer = request(p["response_url"], {"replace_original": True, "text": "You said no"})
        self.assertEqual((status, answer), (200, {"ok": True}))
        self.assertEqual(self.control("messages?channel=D0ANN&thread_ts=%s" % root)[-1]["text"], "You said no")

    def test_slash_command_envelope_and_ack_response(self):
        ws = self.connect()
        self.control("command", {"channel": "C0GENERAL", "user": "U0BOB", "command": "/sessionturn",
                                 "text": "status"})
        env = ws.recv_event(ack=False)
        self.assertEqual((env["type"], env["accepts_response_payload"]), ("slash_commands", True))
        p = env["payload"]
        self.assertEqual({k: p[k] for k in ("command", "text", "user_id", "user_name", "channel_id", "channel_name",
                                            "team_id", "api_app_id")},
                         {"command": "/sessionturn", "text": "status", "user_id": "U0BOB", "user_name": "bob",
                          "channel_id": "C0GENERAL", "channel_name": "general", "team_id": "T0TEAM",
                          "api_app_id": "A0APP"})
        ws.send({"envelope_id": env["envelope_id"], "payload": {"text": "All good"}})
        eph = self.control("wait", {"what": "ephemerals", "text_contains": "All good"})["match"]
        self.assertEqual((eph["user"], eph["via"]), ("U0BOB", "ack"))

    def test_unacked_interactive_payloads_are_not_retried(self):
        ws = self.connect()
        self.control("config", {"echo_bot_messages": False})
        msg = self.post("Pick", blocks=BUTTONS)
        self.control("config", {"ack_timeout": 0.3})
        self.control("press", {"channel": "D0ANN", "ts": msg["ts"], "user": "U0ANN", "action_id": "a-yes"})
        ws.recv_event(ack=False)
        job = self.control("wait", {"what": "events", "state": "given_up"})["match"]
        self.assertEqual((job["type"], job["attempts"]), ("interactive", 1))


class Pings(Base):
    extra = ("--ping-interval", "0.2")

    def test_server_pings_are_recorded_with_their_pongs_and_client_pings_answered(self):
        ws = self.connect()
        self.assertTrue(ws.ping(b"client ping"))
        time.sleep(1.2)
        conn = self.control("connections")[0]
        self.assertGreaterEqual(conn["pings_sent"], 3)
        self.assertGreaterEqual(conn["pongs"], 3)
        self.assertTrue(all(x < 0.5 for x in conn["pong_latencies"]))
        self.assertEqual(conn["client_pings"], 1)


class EventsOverHttp(Base):
    extra = ("--ack-timeout", "1.0")

    def setUp(self):
        super().setUp()
        self.receiver = Receiver()
        self.control("config", {"events_url": self.receiver.url, "echo_bot_messages": False})

    def verify(self, req):
        h = req["headers"]
        base = b"v0:" + h["X-Slack-Request-Timestamp"].encode() + b":" + req["body"]
        return h["X-Slack-Signature"] == "v0=" + hmac.new(SECRET.encode(), base, hashlib.sha256).hexdigest()

    def test_events_are_posted_signed(self):
        sent = self.say("over http")
        req = self.receiver.wait(1)[0]
        self.assertEqual(req["headers"]["Content-Type"], "application/json")
        self.assertTrue(self.verify(req))
        self.assertLess(abs(int(req["headers"]["X-Slack-Request-Timestamp"]) - time.time()), 5)
        body = json.loads(req["body"])
        self.assertEqual((body["type"], body["event_id"], body["event"]["text"]),
                         ("event_callback", sent["event_ids"][0], "over http"))
        self.assertNotIn("X-Slack-Retry-Num", req["headers"])
        self.control("wait", {"what": "events", "state": "acked"})
        self.assertEqual(self.control("deliveries")[0]["status"], 200)

    def test_signing_modes(self):
        got = {}
        for i, mode in enumerate(("forged", "stale", "missing", "bad_format", "valid")):
            self.control("config", {"signing": mode, "max_retries": 0})
            self.say(mode)
            got[mode] = self.receiver.wait(i + 1)[-1]
        self.assertTrue(self.verify(got["valid"]))
        self.assertFalse(self.verify(got["forged"]))
        stale = got["stale"]["headers"]
        self.assertGreater(time.time() - int(stale["X-Slack-Request-Timestamp"]), 590)
        self.assertTrue(self.verify(got["stale"]))  # rightly signed, only old
        self.assertNotIn("X-Slack-Signature", got["missing"]["headers"])
        self.assertTrue(got["bad_format"]["headers"]["X-Slack-Signature"].startswith("sha256="))

    def test_errors_and_timeouts_are_retried_with_retry_headers(self):
        self.receiver.status = 500
        self.say("fails")
        reqs = self.receiver.wait(4)
        self.assertEqual([(r["headers"].get("X-Slack-Retry-Num"), r["headers"].get("X-Slack-Retry-Reason"))
                          for r in reqs], [(None, None), ("1", "http_error"), ("2", "http_error"), ("3", "http_error")])
        self.assertEqual(len({json.loads(r["body"])["event_id"] for r in reqs}), 1)
        self.control("wait", {"what": "events", "state": "given_up"})
        self.receiver.status, self.receiver.delay = 200, 1.5
        self.say("slow")
        reqs = self.receiver.wait(6)
        self.assertEqual(reqs[5]["headers"].get("X-Slack-Retry-Reason"), "http_timeout")
        self.receiver.delay = 0
        self.control("wait", {"what": "events", "state": "acked"})
        self.receiver.status, self.receiver.no_retry = 503, True
        sent = self.say("no retry please")
        self.control("wait", {"what": "events", "state": "given_up", "count": 2})
        self.assertEqual(len([r for r in self.receiver.requests
                              if json.loads(r["body"])["event_id"] == sent["event_ids"][0]]), 1)

    def test_interactivity_and_commands_are_form_encoded(self):
        msg = self.post("Pick", blocks=BUTTONS)
        self.control("press", {"channel": "D0ANN", "ts": msg["ts"], "user": "U0ANN", "value": "yes"})
        req = self.receiver.wait(1)[0]
        self.assertEqual(req["headers"]["Content-Type"], "application/x-www-form-urlencoded")
        self.assertTrue(self.verify(req))
        payload = json.loads(urllib.parse.parse_qs(req["body"].decode())["payload"][0])
        self.assertEqual((payload["type"], payload["actions"][0]["value"]), ("block_actions", "yes"))
        self.control("command", {"channel": "D0ANN", "user": "U0ANN", "command": "/sessionturn", "text": "help"})
        form = urllib.parse.parse_qs(self.receiver.wait(2)[1]["body"].decode())
        self.assertEqual((form["command"], form["text"], form["user_id"]), (["/sessionturn"], ["help"], ["U0ANN"]))

    def test_url_verification(self):
        out = self.control("url_verification", {})
        self.assertEqual((out["status"], out["echoed"]), (200, False))  # the receiver answers "ok"
        req = self.receiver.requests[-1]
        self.assertEqual(json.loads(req["body"])["type"], "url_verification")
        self.assertTrue(self.verify(req))


class Control(Base):
    def test_wait_times_out_with_408_and_finds_bot_messages(self):
        out = self.control("wait", {"method": "chat.postMessage", "timeout": 0.3}, expect=408)
        self.assertEqual(out["matches"], [])
        self.post("hello world", channel="C0GENERAL")
        found = self.control("wait", {"channel": "C0GENERAL", "text_contains": "world"})["match"]
        self.assertEqual((found["by_bot"], found["text"], found["user"]), (True, "hello world", "U0BOT"))
        call = self.control("wait", {"method": "chat.postMessage", "channel": "C0GENERAL"})["match"]
        self.assertEqual((call["status"], call["ok"], call["token"]), (200, True, "bot"))
        since = call["seq"]
        self.ok("auth.test")
        self.assertEqual([c["method"] for c in self.control("calls?since=%d" % since)], ["auth.test"])

    def test_mistakes_are_400(self):
        self.control("message", {"channel": "C0NOPE", "user": "U0ANN", "text": "x"}, expect=400)
        self.control("message", {"channel": "D0ANN", "user": "U0NOPE", "text": "x"}, expect=400)
        self.control("message", {"channel": "D0BOB", "user": "U0ANN", "text": "x"}, expect=400)
        self.control("fault", {"method": "chat.postMessage", "kind": "explode"}, expect=400)
        self.control("socket", {"action": "drop"}, expect=400)
        self.control("config", {"signing": "sloppy"}, expect=400)
        self.control("channels", {"id": "D0X", "type": "im", "user": "U0NOPE"}, expect=400)

    def test_users_and_channels_can_be_added(self):
        self.control("users", {"id": "U0DAN", "name": "dan"})
        self.control("channels", {"id": "C0OPS", "type": "channel", "name": "ops"})
        sent = self.say("joined", channel="C0OPS", user="U0DAN")
        info = self.ok("conversations.info", {"channel": "C0OPS"})["channel"]
        self.assertEqual((info["name"], info["is_channel"], info["is_private"]), ("ops", True, False))
        self.assertEqual(self.control("messages?channel=C0OPS")[0]["ts"], sent["ts"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
