#!/usr/bin/python3
"""Checks the Telegram fake (tests/fakes/telegram_api.py) against grammy, the Bot API client library: starts the
fake and bot.mjs (grammy long polling against it), plays a user through /_test/, and checks what grammy called and
what the chats hold. Stops both, even on failure. Without node or node_modules it prints SESSIONTURN_TEST_SKIPPED
and exits 0 (npm install --prefix tests/fakes/telegram_check brings grammy).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(os.path.dirname(HERE), "telegram_api.py")
TOKEN = "987654:GRAMMY-CHECK-TOKEN"
USER = {"id": 5001, "first_name": "Ann", "username": "ann"}
FORUM = -1002000000001


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


def control(base, path, body=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + "/_test/" + path, data=data, headers={"Content-Type": "application/json"},
                                 method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def wait_for(base, **what):
    status, out = control(base, "wait", dict({"timeout": 20}, **what), timeout=40)
    if status != 200:
        raise AssertionError("timed out waiting for %s: %s" % (what, out))
    return out["match"]


def start_fake(work):
    log = open(os.path.join(work, "fake.log"), "w")
    proc = subprocess.Popen([sys.executable, FAKE, "--dir", work, "--token", TOKEN, "--bot-username", "grammy_check_bot"],
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


def scenario(base, check):
    control(base, "chats", {"id": USER["id"], "type": "private", "first_name": "Ann", "username": "ann"})
    control(base, "chats", {"id": FORUM, "type": "supergroup", "title": "Team", "is_forum": True})
    topic = control(base, "topics", {"chat_id": FORUM, "name": "Deploys", "quiet": True})[1]["message_thread_id"]
    wait_for(base, method="getUpdates", started=True)

    calls = control(base, "calls")[1]
    names = [c["method"] for c in calls]
    check.that("grammy calls getMe first (bot.init)", names[:1] == ["getMe"], names)
    commands = [c for c in calls if c["method"] == "setMyCommands"]
    check.that("setMyCommands took grammy's commands", commands and commands[0]["status"] == 200 and
               [c["command"] for c in commands[0]["params"]["commands"]] == ["start", "help"], commands)
    check.that("bot.start() deletes any webhook before polling", "deleteWebhook" in names, names)
    first_poll = next(c for c in calls if c["method"] == "getUpdates")
    check.that("the first getUpdates sends allowed_updates and a 30 s timeout",
               first_poll["params"].get("allowed_updates") == ["message", "callback_query"]
               and first_poll["params"].get("timeout") == 30, first_poll["params"])

    start = control(base, "send", {"chat_id": USER["id"], "from": USER, "text": "/start"})[1]
    welcome = wait_for(base, chat_id=USER["id"], text_contains="Welcome")
    check.that("/start is answered as a reply", welcome["reply_to_message_id"] == start["message"]["message_id"],
               welcome)

    hello = control(base, "send", {"chat_id": USER["id"], "from": USER, "text": "hello <world> & co"})[1]
    echo = wait_for(base, chat_id=USER["id"], text_contains="Echo")
    check.that("HTML is parsed: the text has no tags and a bold entity",
               echo["text"] == "Echo: hello <world> & co" and echo["entities"] == [
                   {"type": "bold", "offset": 0, "length": 5}], echo)
    check.that("the echo replies to the message and carries the button",
               echo["reply_to_message_id"] == hello["message"]["message_id"] and
               echo["reply_markup"] == {"inline_keyboard": [[{"text": "Done", "callback_data": "done:%d" %
                                                              hello["message"]["message_id"]}]]}, echo)

    press = control(base, "press", {"chat_id": USER["id"], "message_id": echo["message_id"], "from": USER,
                                    "data": "done:%d" % hello["message"]["message_id"]})[1]
    wait_for(base, method="editMessageText")
    answers = control(base, "callback_answers")[1]
    check.that("the press is answered once with grammy's text",
               [(a["callback_query_id"], a["text"]) for a in answers] == [(press["callback_query_id"],
                                                                           "Marked as done")], answers)
    edited = [m for m in control(base, "messages?chat_id=%d" % USER["id"])[1] if m["message_id"] == echo["message_id"]]
    check.that("the message is edited in place and its button is gone",
               edited and edited[0]["text"].startswith("Done") and edited[0]["edit_count"] == 1
               and edited[0]["reply_markup"] is None and edited[0]["entities"][0]["type"] == "italic", edited)

    control(base, "send", {"chat_id": FORUM, "from": USER, "text": "in the topic", "message_thread_id": topic})
    in_topic = wait_for(base, chat_id=FORUM, text_contains="Echo")
    check.that("a reply in a forum topic stays in the topic (grammy passes message_thread_id)",
               in_topic["message_thread_id"] == topic and in_topic["message"].get("is_topic_message") is True,
               in_topic)

    # A 429 on getUpdates: grammy waits retry_after and polls on. The message wakes the waiting poll, so the
    # next one (grammy's poll after handling it) is the one that gets the 429.
    control(base, "faults", {"method": "getUpdates", "status": 429, "retry_after": 1, "count": 1})
    control(base, "send", {"chat_id": USER["id"], "from": USER, "text": "before the flood wait"})
    wait_for(base, chat_id=USER["id"], text_contains="before the flood wait")
    wait_for(base, method="getUpdates", text_contains=None, status=429)
    control(base, "send", {"chat_id": USER["id"], "from": USER, "text": "after the flood wait"})
    wait_for(base, chat_id=USER["id"], text_contains="after the flood wait")
    polls = control(base, "calls?method=getUpdates")[1]
    limited = [p for p in polls if p["status"] == 429]
    check.that("grammy got the 429 with retry_after and kept polling",
               limited and limited[0]["response"]["parameters"] == {"retry_after": 1}, limited)
    later = [p for p in polls[1:] if p["status"] == 200]
    check.that("later polls leave allowed_updates out and confirm with offset",
               later and all("allowed_updates" not in p["params"] for p in later)
               and all(isinstance(p["params"].get("offset"), int) for p in later), [p["params"] for p in later])
    return polls


def confirmed_after_stop(base, check):
    updates = control(base, "updates")[1]
    check.that("grammy's stop() confirms every update it handled", updates and all(u["confirmed"] for u in updates),
               [(u["update_id"], u["confirmed"]) for u in updates])


def main():
    node = shutil.which("node")
    if node is None:
        print("SESSIONTURN_TEST_SKIPPED: node is not installed")
        return 0
    if not os.path.isdir(os.path.join(HERE, "node_modules", "grammy")):
        print("SESSIONTURN_TEST_SKIPPED: grammy is not installed (npm install --prefix tests/fakes/telegram_check)")
        return 0
    work = tempfile.mkdtemp(prefix="grammy-check-")
    check = Check()
    fake = bot = None
    bot_log_path = os.path.join(work, "bot.log")
    try:
        fake, base = start_fake(work)
        env = dict(os.environ, FAKE_PORT=base.rsplit(":", 1)[1], FAKE_TOKEN=TOKEN)
        with open(bot_log_path, "w") as bot_log:
            bot = subprocess.Popen([node, os.path.join(HERE, "bot.mjs")], cwd=HERE, env=env, stdout=bot_log,
                                   stderr=subprocess.STDOUT)
        scenario(base, check)
        bot.send_signal(signal.SIGTERM)
        check.that("the bot stops on SIGTERM", bot.wait(20) == 0)
        confirmed_after_stop(base, check)
    except Exception as e:  # a failed step is a failed check; both processes still stop below
        check.that("the scenario runs to its end", False, repr(e))
    finally:
        for proc in (bot, fake):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
        logs = ""
        for name in ("bot.log", "fake.log"):
            path = os.path.join(work, name)
            if os.path.exists(path):
                with open(path) as f:
                    logs += f.read()
        check.that("no log holds the token", TOKEN not in logs and TOKEN.split(":")[1] not in logs)
        if check.failed:
            print("--- bot and fake output ---\n" + logs)
        shutil.rmtree(work, ignore_errors=True)
    print("grammy: %d passed, %d failed" % (check.passed, len(check.failed)))
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
