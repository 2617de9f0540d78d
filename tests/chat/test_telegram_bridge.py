#!/usr/bin/python3
"""Whole-bridge tests: sessionturn-telegram, as a user runs it, against the Telegram fake (tests/fakes/telegram_api.py)
with the local backend and sessionturn-local-runtime. Each test starts its own fake and bridge and ends both.
The build dir comes from $SESSIONTURN_BINARY_DIR (default /work/main/build-me). Run: python3 test_telegram_bridge.py
"""

import os
import re
import signal
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bridge_support import (ANN, BOB, BOT, BRIDGE, RUNTIME, SCRIPTS, TOKEN, BridgeCase,  # noqa: E402
                            request)

GROUP = -2001
FORUM = -1001234567890


def button(message, label):
    """The callback_data of the button labelled label on a bot message."""
    for row in (message.get("reply_markup") or {}).get("inline_keyboard", []):
        for b in row:
            if b.get("text") == label:
                return b["callback_data"]
    raise AssertionError("no button %r on %s" % (label, message))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Conversations(BridgeCase):
    def test_private_chat_remembers_and_edits_the_placeholder(self):
        fake = self.start_fake()
        self.start_bridge(fake)
        first = fake.send(42, "hello there")
        r1 = fake.wait_reply(42, "echo #1:")
        self.assertIn("hello there", r1["text"])
        second = fake.send(42, "and again")
        r2 = fake.wait_reply(42, "echo #2:")
        self.assertIn("and again", r2["text"])
        # Each reply is the placeholder posted for its turn, edited in place: no other bot message.
        self.assertEqual([m["message_id"] for m in fake.bot_messages(42)], [r1["message_id"], r2["message_id"]])
        self.assertEqual((r1["reply_to_message_id"], r2["reply_to_message_id"]),
                         (first["message_id"], second["message_id"]))
        self.assertGreaterEqual(r1["edit_count"], 1)
        self.assertGreaterEqual(r2["edit_count"], 1)
        sent = [c for c in fake.calls("sendMessage") if c["status"] == 200]
        self.assertEqual(len(sent), 2, sent)
        self.assertIn("Working on it", sent[0]["params"]["text"])

    def test_group_needs_a_mention_or_a_reply(self):
        fake = self.start_fake()
        self.start_bridge(fake)
        quiet = self.post_group(fake, "nobody asked you")
        mention = self.post_group(fake, "@%s what is up" % BOT)
        r1 = fake.wait_reply(GROUP, "echo #1:")
        # The unmentioned message reached the bridge first and no Session: this is the Session's first turn.
        self.assertIn("what is up", r1["text"])
        self.assertNotIn("nobody asked", r1["text"])
        self.assertEqual(r1["reply_to_message_id"], mention["message"]["message_id"])
        self.wait_confirmed(fake, quiet["update_id"])
        fake.post("send", {"chat_id": GROUP, "from": BOB, "text": "a reply without a mention",
                           "reply_to_message_id": r1["message_id"]})
        r2 = fake.wait_reply(GROUP, "echo #2:")
        self.assertIn("a reply without a mention", r2["text"])
        later = self.post_group(fake, "still nobody asked")
        self.wait_confirmed(fake, later["update_id"])
        self.assert_none_within(fake, 1, chat_id=GROUP, count=3)

    @staticmethod
    def post_group(fake, text):
        return fake.post("send", {"chat_id": GROUP, "from": ANN, "text": text})

    def test_forum_topics_are_sessions_of_their_own(self):
        fake = self.start_fake()
        bridge = self.start_bridge(fake)
        fake.post("chats", {"id": FORUM, "type": "supergroup", "title": "Forum", "is_forum": True})
        alpha = fake.post("topics", {"chat_id": FORUM, "name": "alpha"})["message_thread_id"]
        beta = fake.post("topics", {"chat_id": FORUM, "name": "beta"})["message_thread_id"]
        for thread, text in ((alpha, "in alpha"), (beta, "in beta"), (None, "in general")):
            body = {"chat_id": FORUM, "from": ANN, "text": "@%s %s" % (BOT, text)}
            if thread:
                body["message_thread_id"] = thread
            fake.post("send", body)
            reply = fake.wait_text(FORUM, text)
            self.assertTrue(reply["text"].startswith("echo #1:"), reply["text"])
            self.assertEqual(reply["message_thread_id"], thread, reply)
        fake.post("send", {"chat_id": FORUM, "from": ANN, "text": "@%s alpha again" % BOT,
                           "message_thread_id": alpha})
        again = fake.wait_text(FORUM, "alpha again")
        self.assertTrue(again["text"].startswith("echo #2:"), again["text"])
        self.assertEqual(again["message_thread_id"], alpha)
        sessions = os.listdir(os.path.join(bridge.state_dir, "sessions"))
        self.assertEqual(len(sessions), 3, sessions)

    def test_a_reply_goes_to_the_session_that_posted(self):
        fake = self.start_fake()
        self.start_bridge(fake)
        fake.send(42, "one")
        fake.wait_reply(42, "echo #1:")
        fake.send(42, "one more")
        old = fake.wait_reply(42, "echo #2:")
        fake.send(42, "/new")
        fake.wait_text(42, "Now talking to")
        fake.send(42, "two")
        self.assertIn("two", fake.wait_reply(42, "echo #1:", count=2)["text"])
        fake.post("send", {"chat_id": 42, "from": ANN, "text": "to the first", "reply_to_message_id": old["message_id"]})
        self.assertIn("to the first", fake.wait_reply(42, "echo #3:")["text"])
        fake.send(42, "three")
        self.assertIn("three", fake.wait_reply(42, "echo #2:", count=2)["text"])


class Commands(BridgeCase):
    def test_help_new_status_sessions_use(self):
        fake = self.start_fake()
        self.start_bridge(fake)
        fake.send(42, "/help")
        self.assertIn("/new", fake.wait_text(42, "Commands")["text"])
        fake.send(42, "/help@%s" % BOT)
        fake.wait_text(42, "Commands", count=2)
        fake.send(42, "/new fix-login")
        fake.wait_text(42, "Now talking to")
        fake.send(42, "/status")
        fake.wait_text(42, "No turn is running")
        fake.send(42, "/new other")
        fake.wait_text(42, "Now talking to", count=2)
        for n, text in ((1, "hi other"), (2, "hi other again")):
            fake.send(42, text)
            fake.wait_reply(42, "echo #%d: [telegram message from Ann (42)]\n%s" % (n, text))
        fake.send(42, "/use fix-login")
        fake.wait_text(42, "Now talking to", count=3)
        fake.send(42, "for fix-login")
        fake.wait_reply(42, "echo #1: [telegram message from Ann (42)]\nfor fix-login")
        fake.send(42, "/sessions")
        listing = fake.wait_text(42, "Sessions of this chat")
        self.assertIn("fix-login", listing["text"])
        self.assertIn("other", listing["text"])
        pressed = fake.post("press", {"chat_id": 42, "message_id": listing["message_id"], "from": ANN,
                                      "data": button(listing, "Use other")})
        fake.wait_text(42, "Now talking to", count=4)
        self.wait_for(lambda: any(a.get("callback_query_id") == pressed["callback_query_id"]
                                  for a in fake.get("callback_answers")), "the press to be answered")
        fake.send(42, "back to other")
        fake.wait_reply(42, "echo #3: [telegram message from Ann (42)]\nback to other")
        # No command ever reached an agent: the echo counts above would be off.
        self.assertFalse([t for t in fake.bot_texts(42) if t.startswith("echo") and "/" in t])

    def test_new_use_and_status_show_the_name_given(self):
        fake = self.start_fake()
        self.start_bridge(fake)
        fake.send(42, "/new fix-login")
        self.assertIn("fix-login", fake.wait_text(42, "Now talking to")["text"])
        fake.send(42, "/status")
        self.assertIn("fix-login", fake.wait_text(42, "No turn is running")["text"])
        fake.send(42, "/new other")
        fake.send(42, "/use fix-login")
        self.assertIn("fix-login", fake.wait_text(42, "Now talking to", count=3)["text"])

    def test_names_show_without_markdown_escapes(self):
        fake = self.start_fake()
        self.start_bridge(fake, "--admins", str(ANN["id"]))
        fake.send(42, "/new fix-login")
        fake.wait_text(42, "Now talking to")
        texts = []
        for command, answer in (("/sessions", "Sessions of this chat"), ("/new fix-login", "already"),
                                ("/delete fix-login", "again within a minute")):
            fake.send(42, command)
            texts.append(fake.wait_text(42, answer)["text"])
        self.assertEqual([t for t in texts if "\\" in t], [], "Markdown escapes show in the chat")

    def test_a_command_for_another_bot_is_ignored(self):
        fake = self.start_fake()
        self.start_bridge(fake)
        other = fake.post("send", {"chat_id": GROUP, "from": ANN, "text": "/help@some_other_bot"})
        self.wait_confirmed(fake, other["update_id"])
        fake.post("send", {"chat_id": GROUP, "from": ANN, "text": "/status@%s" % BOT})
        fake.wait_text(GROUP, "No turn is running")
        self.assertFalse([t for t in fake.bot_texts(GROUP) if "Commands" in t])
        fake.send(42, "/start")  # an unknown command gets the help, never the agent
        fake.wait_text(42, "Commands")
        self.assertFalse([t for t in fake.bot_texts(42) if t.startswith("echo")])


class Questions(BridgeCase):
    def test_answer_by_button_and_by_reply(self):
        fake = self.start_fake()
        self.start_bridge(fake, provider="question.json")
        fake.send(42, "pick one")
        question = fake.wait_text(42, "Which language?")
        pressed = fake.post("press", {"chat_id": 42, "message_id": question["message_id"], "from": ANN,
                                      "data": button(question, "Python")})
        fake.wait_reply(42, "Answers: lang=Python")
        self.wait_for(lambda: any(a.get("callback_query_id") == pressed["callback_query_id"]
                                  for a in fake.get("callback_answers")), "answerCallbackQuery")
        self.assertNotIn("Which language?", fake.wait_text(42, "Answered by Ann: Python")["text"])
        fake.send(42, "pick again")
        second = fake.wait_text(42, "Which language?")
        fake.post("send", {"chat_id": 42, "from": ANN, "text": "c++", "reply_to_message_id": second["message_id"]})
        fake.wait_reply(42, "Answers: lang=C++")
        # The reply was an answer, not a third prompt.
        self.assert_none_within(fake, 1, chat_id=42, text_contains="Which language?", count=2)

    def test_declined_questions(self):
        fake = self.start_fake()
        self.start_bridge(fake, "--questions", "decline", provider="question.json")
        fake.send(42, "pick one")
        fake.wait_text(42, "declines questions")
        fake.wait_text(42, "The question was declined.")
        self.assertFalse([m for m in fake.bot_messages(42) if "Which language?" in (m["text"] or "")])

    def test_stop_ends_a_long_turn(self):
        fake = self.start_fake()
        self.start_bridge(fake, provider="long.json")
        started = time.monotonic()
        fake.send(42, "take your time")
        fake.wait_text(42, "started")  # the placeholder shows the streamed text: the turn runs
        fake.send(42, "/stop")
        fake.wait_text(42, "Stopping the running turn")
        fake.wait_text(42, "The turn was interrupted", timeout=15)
        self.assertLess(time.monotonic() - started, 25)
        self.assertFalse([t for t in fake.bot_texts(42) if "the long turn finished" in t])


class Delivery(BridgeCase):
    def test_sigkill_mid_turn_then_restart_delivers_once(self):
        fake = self.start_fake()
        bridge = self.start_bridge(fake, provider="slow.json")
        fake.send(42, "survive this")
        placeholder = fake.wait_text(42, "Working on it")
        fake.wait_text(42, "thinking")  # edited: the bridge has the placeholder's id in its store
        bridge.kill()
        again = self.start_bridge(fake, provider="slow.json")
        reply = fake.wait_reply(42, "slow reply #1", timeout=20)
        self.assertEqual(reply["message_id"], placeholder["message_id"], "the reply is the same placeholder")
        self.assert_none_within(fake, 1.5, chat_id=42, text_contains="slow reply", count=2)
        self.assertEqual(len(fake.bot_messages(42)), 1, fake.bot_texts(42))
        self.assertIn("ready:", again.stderr())

    def test_429_storm(self):
        fake = self.start_fake()
        self.start_bridge(fake, provider="slow.json")
        # On sendMessage: the placeholder is refused, the reply posted once after the waits.
        fake.fault(method="sendMessage", status=429, retry_after=1, count=3)
        fake.send(42, "through the storm")
        first = fake.wait_reply(42, "slow reply #1", timeout=30)
        self.assertEqual(len(fake.bot_messages(42)), 1, fake.bot_texts(42))
        # On editMessageText: the placeholder is there, the progress and the reply edits are refused.
        fake.send(42, "and the next one")
        placeholder = fake.wait_text(42, "Working on it")
        fake.fault(method="editMessageText", status=429, retry_after=1, count=3)
        second = fake.wait_reply(42, "slow reply #2", timeout=30)
        self.assertEqual(second["message_id"], placeholder["message_id"], "the reply is the placeholder")
        self.assert_none_within(fake, 1, chat_id=42, text_contains="slow reply", count=3)
        self.assertEqual([m["message_id"] for m in fake.bot_messages(42)],
                         [first["message_id"], second["message_id"]], fake.bot_texts(42))
        limited = [c["method"] for c in fake.calls() if c["status"] == 429]
        self.assertEqual(limited.count("sendMessage"), 3, limited)
        self.assertGreaterEqual(limited.count("editMessageText"), 1, limited)

    def test_html_refused_goes_as_plain_text(self):
        fake = self.start_fake()
        self.start_bridge(fake, provider="markup.json")
        refusal = "Bad Request: can't parse entities: Unsupported start tag \"b\" at byte offset 0"
        fake.fault(method="sendMessage", status=400, description=refusal, count=1)
        fake.fault(method="editMessageText", status=400, description=refusal, count=1)
        fake.send(42, "format this")
        reply = fake.wait_text(42, "bold and code & <tag> #1")
        sends = fake.calls("sendMessage")
        self.assertEqual([c["status"] for c in sends], [400, 200], sends)
        self.assertEqual(sends[0]["params"].get("parse_mode"), "HTML")
        self.assertNotIn("parse_mode", sends[1]["params"])
        edits = fake.calls("editMessageText")
        self.assertEqual(edits[0]["status"], 400)
        self.assertNotIn("parse_mode", edits[1]["params"], edits[1])
        self.assertEqual(edits[1]["status"], 200)
        if len(edits) == 2:  # the reply was the first edit: it is plain text, with no entities
            self.assertFalse(reply["entities"], reply)
        self.assertNotIn("<b>", reply["text"])

    def test_an_edited_queued_prompt_runs_edited(self):
        fake = self.start_fake()
        self.start_bridge(fake, provider="queued_edit.json")
        fake.send(42, "the first")
        fake.wait_text(42, "Working on it")
        queued = fake.send(42, "the original second")
        fake.wait_text(42, "Queued")
        fake.post("edit", {"chat_id": 42, "message_id": queued["message_id"], "text": "the edited second"})
        fake.wait_reply(42, "first turn:")
        reply = fake.wait_reply(42, "second turn:")
        self.assertIn("the edited second", reply["text"])
        self.assertNotIn("original", reply["text"])


class Webhook(BridgeCase):
    SECRET = "hook-secret_123"

    def test_secret_checked_and_setwebhook_recorded(self):
        fake = self.start_fake()
        port = free_port()
        bridge = self.start_bridge(fake, "--mode", "webhook", "--public-url", "http://127.0.0.1:%d" % port,
                                   listen="127.0.0.1:%d" % port, env={"TELEGRAM_WEBHOOK_SECRET": self.SECRET})
        hooks = [c for c in fake.calls("setWebhook") if c["status"] == 200]
        self.assertEqual(len(hooks), 1, fake.calls("setWebhook"))
        self.assertEqual(hooks[0]["params"]["url"], "http://127.0.0.1:%d/telegram" % port)
        self.assertEqual(hooks[0]["params"]["secret_token"], self.SECRET)
        update = {"update_id": 900001, "message": {"message_id": 7, "date": int(time.time()), "text": "forged",
                                                   "from": {"id": 66, "is_bot": False, "first_name": "Eve"},
                                                   "chat": {"id": 66, "type": "private", "first_name": "Eve"}}}
        fake.post("chats", {"id": 66, "type": "private", "first_name": "Eve"})  # so that the bot can answer
        url = bridge.base + "/telegram"
        status, _ = request(url, update, headers={"X-Telegram-Bot-Api-Secret-Token": "wrong"})
        self.assertEqual(status, 401)
        status, _ = request(url, update)
        self.assertEqual(status, 401)
        self.assertEqual(fake.get("calls", method="sendMessage"), [])
        update["message"]["text"] = "rightly sent"
        status, _ = request(url, update, headers={"X-Telegram-Bot-Api-Secret-Token": self.SECRET})
        self.assertEqual(status, 200)
        reply = fake.wait_reply(66, "echo #1:")
        self.assertIn("rightly sent", reply["text"])
        self.assertFalse([c for c in fake.calls() if "forged" in str(c["params"].get("text", ""))])
        # And what the fake itself delivers, with the secret it was given.
        fake.send(42, "through the hook")
        self.assertIn("through the hook", fake.wait_reply(42, "echo #1:")["text"])
        self.assertTrue(all(d["status"] == 200 for d in fake.get("deliveries")), fake.get("deliveries"))


class Operations(BridgeCase):
    def test_the_token_is_never_printed(self):
        token = "987654:SECRET-never_printed-x1"
        fake = self.start_fake(token=token)
        bridge = self.start_bridge(fake, token=token)
        fake.send(42, "hello")
        fake.wait_reply(42, "echo #1:")
        fake.fault(method="getUpdates", status=500, count=3)  # a failed poll, logged
        fake.send(42, "end the long poll")  # the next poll meets the faults
        self.wait_for(lambda: "getUpdates failed" in bridge.stderr(), "a logged getUpdates failure")
        fake.stop()  # and a connection that fails: its error names the URL, which holds the token
        self.wait_for(lambda: re.search(r"getUpdates failed \(.*connect", bridge.stderr()),
                      "a logged connection failure", timeout=15)
        self.assertEqual(bridge.stop(), 0, bridge.stderr())
        secret = token.split(":", 1)[1]
        outputs = {"bridge stderr": bridge.stderr(), "bridge stdout": bridge.stdout(), "fake": fake.output()}
        for base, _, files in os.walk(bridge.state_dir):
            for name in files:
                if name.endswith(".log"):
                    with open(os.path.join(base, name), errors="replace") as f:
                        outputs[name] = f.read()
        for what, text in outputs.items():
            self.assertNotIn(secret, text, "%s shows the token:\n%s" % (what, text))

    def test_exit_statuses(self):
        fake = self.start_fake()
        none = self.start_bridge(fake, token=None, wait_ready=False)
        self.assertEqual(none.wait_exit(), 2, none.stderr())
        self.assertIn("TELEGRAM_BOT_TOKEN", none.stderr())
        for flag, value in (("--questions", "maybe"), ("--max-queued", "0"), ("--mode", "push")):
            bad = self.start_bridge(fake, flag, value, wait_ready=False)
            self.assertEqual(bad.wait_exit(), 2, bad.stderr())
            self.assertIn(flag, bad.stderr())
        wrong = self.start_bridge(fake, token="123456:WRONG-TOKEN", wait_ready=False)
        self.assertEqual(wrong.wait_exit(), 3, wrong.stderr())
        self.assertIn("refused", wrong.stderr())
        self.assertNotIn("WRONG-TOKEN", wrong.stderr())
        good = self.start_bridge(fake)
        self.assertEqual(good.stop(signal.SIGTERM), 0, good.stderr())
        self.assertIn("shut down", good.stderr())

    def test_a_second_poller_is_a_conflict(self):
        fake = self.start_fake()
        bridge = self.start_bridge(fake)
        fake.wait(method="getUpdates", started=True)
        stop = threading.Event()

        def poll():  # another program polling with the same token
            while not stop.is_set():
                request(fake.url + "/bot%s/getUpdates?timeout=1" % TOKEN)

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        self.addCleanup(thread.join, 10)
        self.addCleanup(stop.set)
        status = bridge.wait_exit(15)
        self.assertEqual(status, 1, bridge.stderr())  # the platform failed while running
        self.assertRegex(bridge.stderr(), r"another program is polling|[Cc]onflict")

    def test_ready_once_polling(self):
        fake = self.start_fake()
        bridge = self.start_bridge(fake)
        fake.wait(method="getUpdates", started=True)  # the bridge is polling, and nothing has come yet
        self.wait_for(lambda: request(bridge.base + "/readyz")[0] == 200, "/readyz 200 while polling", timeout=5)

    def test_health_and_metrics(self):
        fake = self.start_fake()
        bridge = self.start_bridge(fake)
        self.assertEqual(request(bridge.base + "/healthz")[0], 200)
        fake.send(42, "count me")
        fake.wait_reply(42, "echo #1:")

        def completed():
            status, text = request(bridge.base + "/metrics")
            m = re.search(r"^sessionturn_turns_completed_total(?:\{[^}]*\})? (\S+)$", str(text), re.M)
            return status == 200 and m and float(m.group(1)) >= 1

        self.wait_for(completed, "sessionturn_turns_completed_total >= 1 in /metrics", timeout=5)


class Config(BridgeCase):
    def write(self, name, text):
        path = os.path.join(self.root, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_yaml_config_and_flags_win(self):
        fake = self.start_fake()
        config = self.write("bridge.yaml", "api-url: %s\nprovider: echo\nquestions: decline\n" % fake.url)
        self.start_bridge(None, "--config", config, provider="question.json")
        fake.send(42, "from the config")
        # The config's api-url and questions took effect; the flag's provider won over the config's echo.
        fake.wait_text(42, "The question was declined.")
        self.assertFalse([t for t in fake.bot_texts(42) if t.startswith("echo")])

    def test_unknown_config_key(self):
        fake = self.start_fake()
        config = self.write("bad.yaml", "api-url: %s\nno-such-flag: 1\n" % fake.url)
        bridge = self.start_bridge(None, "--config", config, wait_ready=False)
        self.assertEqual(bridge.wait_exit(), 2, bridge.stderr())
        self.assertIn("no-such-flag", bridge.stderr())


if __name__ == "__main__":
    missing = [p for p in (BRIDGE, RUNTIME) if not os.access(p, os.X_OK)]
    if missing:
        print("SESSIONTURN_TEST_SKIPPED: not built: %s" % ", ".join(missing))
        sys.exit(0)
    if not os.path.isdir(SCRIPTS):
        sys.exit("no script directory %s" % SCRIPTS)
    unittest.main(verbosity=2)
