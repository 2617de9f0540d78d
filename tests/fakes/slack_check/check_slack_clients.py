#!/usr/bin/python3
"""Checks the Slack fake (tests/fakes/slack_api.py) against Slack's own Node clients: starts the fake and bot.mjs
(@slack/socket-mode's SocketModeClient and @slack/web-api's WebClient against it, the Events API served over HTTP
with @slack/bolt's verifySlackRequest checking every signature), plays a user through /_test/, and checks what
the clients called, acked and answered. Stops both, even on failure. Without node or node_modules it prints
SESSIONTURN_TEST_SKIPPED and exits 0 (npm ci --prefix tests/fakes/slack_check installs them).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(os.path.dirname(HERE), "slack_api.py")
BOT_TOKEN = "xoxb-42-CLIENT-CHECK-BOT-TOKEN"
APP_TOKEN = "xapp-1-A0APP-42-CLIENT-CHECK-APP-TOKEN"
SECRET = "client-check-signing-secret-9f8e7d"


class Check:
    def __init__(self):
        self.passed = 0
        self.failed = []

    def that(self, name, cond, detail=""):
        if cond:
            self.passed += 1
            print("ok - " + name)
        else:
            self.failed.append(name)
            print("FAILED - %s %s" % (name, detail))


def control(base, path, body=None, timeout=40):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + "/_test/" + path, data=data, headers={"Content-Type": "application/json"},
                                 method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as e:
        raise AssertionError("%s %s: %s" % (path, e.code, e.read().decode()))


def wait_for(base, **what):
    return control(base, "wait", dict({"timeout": 20}, **what))["match"]


def wait_log(path, pattern, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(path) as f:
            m = re.search(pattern, f.read())
        if m:
            return m
        time.sleep(0.1)
    raise AssertionError("the bot never logged %r" % pattern)


def start_fake(work):
    log = open(os.path.join(work, "fake.log"), "w")
    proc = subprocess.Popen([sys.executable, FAKE, "--dir", work, "--bot-token", BOT_TOKEN, "--app-token", APP_TOKEN,
                             "--signing-secret", SECRET, "--ping-interval", "1", "--ack-timeout", "3"],
                            stdout=log, stderr=subprocess.STDOUT)
    ready = os.path.join(work, "ready.json")
    for _ in range(200):
        if os.path.exists(ready):
            with open(ready) as f:
                return proc, "http://127.0.0.1:%d" % json.load(f)["port"]
        if proc.poll() is not None:
            raise RuntimeError("the fake exited with %s" % proc.returncode)
        time.sleep(0.05)
    raise RuntimeError("the fake did not get ready")


def socket_mode(base, check, bot_log):
    wait_for(base, connections=1)
    calls = control(base, "calls")
    check.that("WebClient calls auth.test with the bot token first",
               [(c["method"], c["token"]) for c in calls[:1]] == [("auth.test", "bot")], calls[:1])
    opens = [c for c in calls if c["method"] == "apps.connections.open"]
    check.that("SocketModeClient opens a connection with the app token (POST, Authorization header)",
               opens and opens[0]["token"] == "app" and opens[0]["http_method"] == "POST" and opens[0]["ok"], opens)

    sent = control(base, "message", {"channel": "D0ANN", "user": "U0ANN", "text": "hello bot"})
    reply = wait_for(base, channel="D0ANN", text_contains="Hi Ann Example")
    ack = wait_for(base, acked=sent["event_ids"][0])
    check.that("the message event is acked once, in time", not ack["late"] and ack["latency"] < 3, ack)
    check.that("users.info was asked for the author",
               any(c["params"].get("user") == "U0ANN" and c["ok"] for c in control(base, "calls?method=users.info")))
    button = [e for b in reply["blocks"] or [] for e in b.get("elements", []) if e.get("type") == "button"]
    check.that("the reply is in the thread, with blocks holding a Done button (form-encoded by WebClient)",
               reply["thread_ts"] == sent["ts"] and button and button[0]["action_id"] == "done", reply)
    time.sleep(0.5)
    echoes = [a for a in control(base, "acks") if a.get("event_id") != sent["event_ids"][0]]
    check.that("the bot's own post came back as an event, was acked and not answered",
               echoes and len(control(base, "messages?channel=D0ANN&thread_ts=%s" % sent["ts"])) == 2, echoes)

    control(base, "press", {"channel": "D0ANN", "ts": reply["ts"], "user": "U0ANN", "label": "Done"})
    done = wait_for(base, channel="D0ANN", text_contains="Done by <@U0ANN>")
    check.that("the block_actions press is acked and the message updated, its blocks removed",
               done["blocks"] is None and done["updates"] == 1 and "(done:%s)" % sent["ts"] in done["text"], done)
    count = wait_for(base, channel="D0ANN", text_contains="The thread has")
    check.that("conversations.replies gave the parent and the bot's reply",
               count["text"] == "The thread has 2 messages" and count["thread_ts"] == sent["ts"], count)

    control(base, "command", {"channel": "C0GENERAL", "user": "U0BOB", "command": "/sessionturn", "text": "ping"})
    eph = wait_for(base, what="ephemerals", text_contains="pong: ping")
    check.that("a slash command ack with a payload reaches the user", eph["user"] == "U0BOB" and eph["via"] == "ack",
               eph)

    control(base, "socket", {"action": "disconnect", "reason": "refresh_requested"})
    closed = wait_for(base, closed_connections=1)
    second = wait_for(base, connections=1)
    opens = control(base, "calls?method=apps.connections.open")
    check.that("on disconnect (refresh_requested) the client closes (1000) and reconnects with a new ticket",
               closed["closed_by"] == "client" and closed["close_code"] == 1000 and len(opens) == 2
               and second["index"] == 1, (closed, len(opens)))
    after = control(base, "message", {"channel": "D0ANN", "user": "U0ANN", "text": "after the refresh"})
    wait_for(base, channel="D0ANN", text_contains="after the refresh")
    acked = wait_for(base, acked=after["event_ids"][0])
    check.that("events flow on the new connection", acked["connection"] == 1, acked)

    control(base, "fault", {"method": "chat.postMessage", "kind": "ratelimited", "retry_after": 1})
    control(base, "message", {"channel": "D0ANN", "user": "U0ANN", "text": "rate limited"})
    wait_for(base, channel="D0ANN", text_contains="rate limited", timeout=30)
    posts = [c for c in control(base, "calls?method=chat.postMessage") if "rate limited" in str(c["params"])]
    check.that("WebClient waits Retry-After after a 429 and retries",
               [c["status"] for c in posts] == [429, 200] and posts[1]["time"] - posts[0]["time"] >= 1.0,
               [(c["status"], c["time"]) for c in posts])

    conns = control(base, "connections")
    check.that("the client answers the fake's pings and pings it (answered)",
               conns[1]["pongs"] >= 1 and conns[1]["client_pings"] >= 1, conns[1])
    unexpected = [u for c in conns for u in c["unexpected"]]
    check.that("the client sent nothing but acks", not unexpected, unexpected)


def events_api(base, check, bot_log):
    port = wait_log(bot_log, r"EVENTS_PORT (\d+)").group(1)
    url = "http://127.0.0.1:%s/slack/events" % port
    control(base, "config", {"events_url": url, "signing": "valid", "echo_bot_messages": False})
    check.that("url_verification: the challenge is verified and echoed",
               control(base, "url_verification", {})["echoed"])
    sent = control(base, "message", {"channel": "D0ANN", "user": "U0ANN", "text": "over http"})
    job = wait_for(base, what="events", event_id=sent["event_ids"][0], state="acked")
    check.that("verifySlackRequest accepts the fake's signature (200)",
               control(base, "deliveries")[job["deliveries"][0] - 1]["status"] == 200, job)
    retried = control(base, "message", {"channel": "D0ANN", "user": "U0ANN", "text": "retry me"})
    job = wait_for(base, what="events", event_id=retried["event_ids"][0], state="acked")
    tries = [control(base, "deliveries")[d - 1] for d in job["deliveries"]]
    check.that("a retry after a 500 carries X-Slack-Retry-Num and a valid signature",
               [(d["status"], d["retry_attempt"], d["retry_reason"]) for d in tries] ==
               [(500, 0, ""), (200, 1, "http_error")], tries)
    control(base, "config", {"max_retries": 0})
    statuses = {}
    for mode in ("forged", "stale", "missing", "bad_format"):
        control(base, "config", {"signing": mode})
        bad = control(base, "message", {"channel": "D0ANN", "user": "U0ANN", "text": "signed " + mode})
        job = wait_for(base, what="events", event_id=bad["event_ids"][0], state="given_up")
        statuses[mode] = control(base, "deliveries")[job["deliveries"][0] - 1]["status"]
    check.that("verifySlackRequest refuses forged, stale, missing and malformed signatures (401)",
               set(statuses.values()) == {401}, statuses)
    logged = open(bot_log).read()
    check.that("the bot saw Bolt's reasons", "signature mismatch" in logged and "stale" in logged, logged[-800:])


def main():
    node = shutil.which("node")
    if node is None:
        print("SESSIONTURN_TEST_SKIPPED: node is not installed")
        return 0
    for pkg in ("socket-mode", "web-api", "bolt"):
        if not os.path.isdir(os.path.join(HERE, "node_modules", "@slack", pkg)):
            print("SESSIONTURN_TEST_SKIPPED: @slack/%s is not installed "
                  "(npm ci --prefix tests/fakes/slack_check)" % pkg)
            return 0
    work = tempfile.mkdtemp(prefix="slack-check-")
    check = Check()
    fake = bot = None
    bot_log = os.path.join(work, "bot.log")
    started = time.time()
    try:
        fake, base = start_fake(work)
        env = dict(os.environ, FAKE_PORT=base.rsplit(":", 1)[1], SLACK_APP_TOKEN=APP_TOKEN, SLACK_BOT_TOKEN=BOT_TOKEN,
                   SLACK_SIGNING_SECRET=SECRET)
        with open(bot_log, "w") as out:
            bot = subprocess.Popen([node, os.path.join(HERE, "bot.mjs")], cwd=HERE, env=env, stdout=out,
                                   stderr=subprocess.STDOUT)
        socket_mode(base, check, bot_log)
        events_api(base, check, bot_log)
        bot.send_signal(signal.SIGTERM)
        check.that("the bot stops on SIGTERM", bot.wait(20) == 0)
    except Exception as e:  # a failed step is a failed check; both processes still stop below
        check.that("the scenario runs to its end", False, repr(e))
    finally:
        for proc in (bot, fake):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
        logs = ""
        for name in ("bot.log", "fake.log", "ready.json"):
            path = os.path.join(work, name)
            if os.path.exists(path):
                with open(path) as f:
                    logs += f.read()
        check.that("no log holds a token or the signing secret",
                   not any(s in logs for s in (BOT_TOKEN, APP_TOKEN, SECRET)))
        if check.failed:
            print("--- bot and fake output ---\n" + logs)
        shutil.rmtree(work, ignore_errors=True)
    print("slack clients: %d passed, %d failed (%.1f s)" % (check.passed, len(check.failed), time.time() - started))
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
