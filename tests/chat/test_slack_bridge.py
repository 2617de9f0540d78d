#!/usr/bin/python3
"""Whole-bridge tests: sessionturn-slack, as a user runs it, against the Slack fake (tests/fakes/slack_api.py) with
the local backend and sessionturn-local-runtime, in Socket Mode and with the Events API. Each test starts its own
fake and bridge and ends both. The build dir comes from $SESSIONTURN_BINARY_DIR. Run: python3 test_slack_bridge.py
"""

import os
import re
import signal
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from slack_bridge_support import (ANN, APP_TOKEN, BOB, BOT_TOKEN, BOT_USER, DM_ANN, GENERAL,  # noqa: E402
                                  SIGNING_SECRET, SlackCase, request)

MENTION = "<@%s>" % BOT_USER


def events_of(fake, **query):
    return [e for e in fake.get("events") if all(e.get(k) == v for k, v in query.items())]


class Conversations(SlackCase):
    def test_direct_messages_are_one_conversation_edited_in_place(self):
        fake, _ = self.start_connected()
        fake.say(DM_ANN, "hello there")
        r1 = fake.wait_reply(DM_ANN, "echo #1:")
        self.assertIn("hello there", r1["text"])
        self.assertIn("[slack message from", r1["text"])  # the envelope names the platform and the author
        fake.say(DM_ANN, "and again")
        r2 = fake.wait_reply(DM_ANN, "echo #2:")
        self.assertIn("and again", r2["text"])
        # Each reply is its turn's placeholder edited in place: no other bot message, none in a thread.
        self.assertEqual([m["ts"] for m in fake.bot_messages(DM_ANN)], [r1["ts"], r2["ts"]])
        self.assertFalse(r1.get("thread_ts"))
        self.assertGreaterEqual(r1["updates"], 1)
        posts = [c for c in fake.calls("chat.postMessage") if c["ok"]]
        self.assertEqual(len(posts), 2, posts)
        self.assertIn("Working on it", posts[0]["params"]["text"])
        self.assertTrue(posts[0]["params"].get("blocks"), "the placeholder is Block Kit")
        # The author's name came from users.info, asked once (cached).
        self.assertEqual(len(fake.calls("users.info")), 1)

    def test_a_channel_needs_a_mention_and_each_mention_is_a_thread(self):
        fake, _ = self.start_connected()
        fake.say(GENERAL, "no mention here")
        self.assert_no_bot_message(fake, 1.5, channel=GENERAL)
        first = fake.say(GENERAL, MENTION + " first topic")
        r1 = fake.wait_reply(GENERAL, "echo #1:")
        self.assertEqual(r1["thread_ts"], first["ts"], "the reply is in a thread under the mention")
        self.assertIn("first topic", r1["text"])
        # A reply in that thread needs no mention: same Session.
        fake.say(GENERAL, "more on it", thread_ts=first["ts"])
        r2 = fake.wait_reply(GENERAL, "echo #2:")
        self.assertEqual(r2["thread_ts"], first["ts"])
        self.assertNotIn("Earlier messages", r2["text"], "only a thread's first turn carries its context")
        # Another mention: another thread, another Session.
        second = fake.say(GENERAL, MENTION + " second topic", user=BOB)
        r3 = fake.wait_reply(GENERAL, "echo #1:", thread_ts=second["ts"])
        self.assertIn("second topic", r3["text"])
        # The app_mention and the message event of each mention were one turn each (deduped).
        self.assert_no_bot_message(fake, 1, channel=GENERAL, text_contains="echo #", count=4)

    def test_a_mention_inside_a_thread_brings_its_earlier_messages(self):
        fake, _ = self.start_connected()
        root = fake.say(GENERAL, "the build is red", user=BOB)
        fake.say(GENERAL, "job 7 failed", user=ANN, thread_ts=root["ts"])
        self.assert_no_bot_message(fake, 1, channel=GENERAL)
        fake.say(GENERAL, MENTION + " can you look?", thread_ts=root["ts"])
        r = fake.wait_reply(GENERAL, "echo #1:")
        self.assertEqual(r["thread_ts"], root["ts"])
        self.assertIn("Earlier messages", r["text"])
        self.assertIn("the build is red", r["text"])
        self.assertIn("job 7 failed", r["text"])
        self.assertIn("bob:", r["text"])  # names, not ids

    def test_a_thread_reply_after_a_restart_needs_no_mention(self):
        fake, bridge = self.start_connected()
        first = fake.say(GENERAL, MENTION + " remember me")
        fake.wait_reply(GENERAL, "echo #1:")
        self.assertEqual(bridge.stop(), 0, bridge.stderr())
        self.start_bridge(fake)
        fake.wait_connections(1)
        fake.say(GENERAL, "still here?", thread_ts=first["ts"])
        r2 = fake.wait_reply(GENERAL, "echo #2:")
        self.assertIn("still here?", r2["text"])
        # A thread the bot is not in stays quiet.
        other = fake.say(GENERAL, "people talking", user=BOB)
        fake.say(GENERAL, "among themselves", user=ANN, thread_ts=other["ts"])
        self.assert_no_bot_message(fake, 1.5, channel=GENERAL, thread_ts=other["ts"])

    def test_a_thread_under_an_old_reply_goes_to_its_session(self):
        fake, _ = self.start_connected()
        fake.say(DM_ANN, "one")
        old = fake.wait_reply(DM_ANN, "echo #1:")
        fake.say(DM_ANN, "new")
        fake.wait_text(DM_ANN, "Now talking to")
        fake.say(DM_ANN, "two")
        self.assertIn("two", fake.wait_reply(DM_ANN, "echo #1:", count=2)["text"])
        fake.say(DM_ANN, "back to the first", thread_ts=old["ts"])
        self.assertIn("back to the first", fake.wait_reply(DM_ANN, "echo #2:")["text"])

    def test_edit_of_a_queued_message_runs_edited(self):
        fake, _ = self.start_connected(provider="queued_edit.json")
        fake.say(DM_ANN, "the first")
        fake.wait_text(DM_ANN, "Working on it")
        queued = fake.say(DM_ANN, "the original second")
        fake.wait_text(DM_ANN, "Queued")
        fake.post("edit", {"channel": DM_ANN, "ts": queued["ts"], "text": "the edited second"})
        fake.wait_reply(DM_ANN, "first turn:")
        reply = fake.wait_reply(DM_ANN, "second turn:")
        self.assertIn("the edited second", reply["text"])
        self.assertNotIn("original", reply["text"])


class Commands(SlackCase):
    def test_mention_commands_and_the_slash_command(self):
        fake, _ = self.start_connected()
        fake.say(DM_ANN, "help")
        self.assertIn("sessions", fake.wait_text(DM_ANN, "help")["text"])
        fake.say(DM_ANN, "hello")
        fake.wait_reply(DM_ANN, "echo #1:")
        fake.say(DM_ANN, "new fix-login")
        fake.wait_text(DM_ANN, "fix-login")
        fake.post("command", {"channel": DM_ANN, "user": ANN, "command": "/sessionturn", "text": "sessions"})
        listing = fake.wait_text(DM_ANN, "fix-login", count=2)
        self.assertTrue(any(b.get("type") == "actions" for b in listing.get("blocks") or []),
                        "the picker has buttons: %s" % listing)
        # A sentence that starts with a command word goes to the agent.
        fake.say(DM_ANN, "help me with the tests")
        self.assertIn("help me with the tests", fake.wait_reply(DM_ANN, "echo #1:", count=2)["text"])

    def test_answer_by_button_and_by_reply(self):
        fake, _ = self.start_connected(provider="question.json")
        fake.say(DM_ANN, "pick one")
        question = fake.wait_text(DM_ANN, "Which language?")
        fake.post("press", {"channel": DM_ANN, "ts": question["ts"], "user": ANN, "label": "Python"})
        fake.wait_reply(DM_ANN, "Answers: lang=Python")
        fake.wait_text(DM_ANN, "Answered by")
        fake.say(DM_ANN, "pick again")
        fake.wait_text(DM_ANN, "Which language?")
        fake.say(DM_ANN, "c++")
        fake.wait_reply(DM_ANN, "Answers: lang=C++")
        self.assert_no_bot_message(fake, 1, channel=DM_ANN, text_contains="echo #")

    def test_stop_ends_a_long_turn(self):
        fake, _ = self.start_connected(provider="long.json")
        started = time.monotonic()
        fake.say(DM_ANN, "take your time")
        fake.wait_text(DM_ANN, "started")
        fake.say(DM_ANN, "stop")
        fake.wait_text(DM_ANN, "Stopping the running turn")
        fake.wait_text(DM_ANN, "The turn was interrupted", timeout=15)
        self.assertLess(time.monotonic() - started, 25)


class Delivery(SlackCase):
    def test_disconnect_mid_turn_loses_and_doubles_nothing(self):
        fake, bridge = self.start_connected(provider="slow.json")
        fake.say(DM_ANN, "before the refresh")
        fake.wait_text(DM_ANN, "thinking")
        fake.post("socket", {"action": "disconnect", "reason": "refresh_requested", "close_after": 2})
        fake.wait_connections(2)  # the next connection said hello while the old one still drains
        fake.say(DM_ANN, "during the refresh")
        fake.wait_reply(DM_ANN, "slow reply #1", timeout=20)
        fake.wait_reply(DM_ANN, "slow reply #2", timeout=20)
        self.assert_no_bot_message(fake, 1.5, channel=DM_ANN, text_contains="slow reply", count=3)
        self.assertEqual(len(fake.bot_messages(DM_ANN)), 2, fake.bot_texts(DM_ANN))
        # A dropped connection (no close frame) is replaced too.
        fake.post("socket", {"action": "drop"})
        fake.wait(timeout=15, connections=3)
        fake.say(DM_ANN, "after the drop")
        fake.wait_reply(DM_ANN, "slow reply #3", timeout=20)
        self.assertIn("Socket Mode connection", bridge.stderr())

    def test_a_half_open_connection_is_noticed_and_its_events_come_again(self):
        fake = self.start_fake("--ack-timeout", "2")
        bridge = self.start_bridge(fake, "--socket-ping-ms", "500")
        fake.wait_connections(1)
        fake.post("socket", {"action": "mute"})  # half-open: nothing reaches the bridge, pings unanswered
        sent = fake.say(DM_ANN, "through a dead socket")
        # The bridge misses its pong, drops the connection and opens another; Slack's retry comes there.
        self.assertIsNotNone(fake.wait(timeout=15, closed_connections=1), fake.get("connections"))
        r = fake.wait_reply(DM_ANN, "echo #1:", timeout=20)
        self.assertIn("through a dead socket", r["text"])
        self.assert_no_bot_message(fake, 1.5, channel=DM_ANN, text_contains="echo #", count=2)
        self.assertTrue(sent["event_ids"])
        self.assertRegex(bridge.stderr(), r"no pong|presumed dead")

    def test_sigkill_mid_turn_then_restart_delivers_once(self):
        fake, bridge = self.start_connected(provider="slow.json")
        fake.say(DM_ANN, "survive this")
        placeholder = fake.wait_text(DM_ANN, "Working on it")
        fake.wait_text(DM_ANN, "thinking")
        bridge.kill()
        self.start_bridge(fake, provider="slow.json")
        reply = fake.wait_reply(DM_ANN, "slow reply #1", timeout=25)
        self.assertEqual(reply["ts"], placeholder["ts"], "the reply is the same placeholder")
        self.assert_no_bot_message(fake, 1.5, channel=DM_ANN, text_contains="slow reply", count=2)
        self.assertEqual(len(fake.bot_messages(DM_ANN)), 1, fake.bot_texts(DM_ANN))

    def test_429_storm(self):
        fake, bridge = self.start_connected(provider="slow.json")
        fake.fault(method="chat.postMessage", kind="ratelimited", retry_after=1, count=3)
        fake.say(DM_ANN, "through the storm")
        first = fake.wait_reply(DM_ANN, "slow reply #1", timeout=30)
        fake.say(DM_ANN, "and the next one")
        placeholder = fake.wait_text(DM_ANN, "Working on it")
        fake.fault(method="chat.update", kind="ratelimited", retry_after=1, count=3)
        second = fake.wait_reply(DM_ANN, "slow reply #2", timeout=30)
        self.assertEqual(second["ts"], placeholder["ts"])
        self.assert_no_bot_message(fake, 1, channel=DM_ANN, text_contains="slow reply", count=3)
        self.assertEqual([m["ts"] for m in fake.bot_messages(DM_ANN)], [first["ts"], second["ts"]])
        limited = [c["method"] for c in fake.calls() if c["status"] == 429]
        self.assertEqual(limited.count("chat.postMessage"), 3, limited)
        self.assertGreaterEqual(limited.count("chat.update"), 1, limited)
        _, metrics = request(bridge.base + "/metrics")
        m = re.search(r'^sessionturn_platform_errors_total\{code="ratelimited"\} (\S+)$', str(metrics), re.M)
        self.assertTrue(m and float(m.group(1)) >= 4, metrics)

    def test_refused_blocks_go_as_text(self):
        fake, bridge = self.start_connected()
        fake.fault(method="chat.postMessage", kind="error", error="invalid_blocks", count=1)
        fake.say(DM_ANN, "plain please")
        r = fake.wait_reply(DM_ANN, "echo #1:")
        self.assertIn("plain please", r["text"])
        self.assertIn("text only", bridge.stderr())


class EventsApi(SlackCase):
    def start_events(self, fake, **kw):
        bridge = self.start_bridge(fake, mode="events", **kw)
        fake.post("config", {"events_url": bridge.base + "/slack/events"})
        return bridge

    def test_signed_events_work_and_bad_signatures_are_refused(self):
        fake = self.start_fake()
        bridge = self.start_events(fake)
        verified = fake.post("url_verification", {})
        self.assertEqual(verified["status"], 200, verified)
        self.assertTrue(verified["echoed"], verified)
        fake.say(DM_ANN, "over http")
        self.assertIn("over http", fake.wait_reply(DM_ANN, "echo #1:")["text"])
        for signing in ("forged", "stale", "missing", "bad_format"):
            fake.post("config", {"signing": signing, "max_retries": 0})
            fake.say(DM_ANN, "signed " + signing)
            delivery = self.wait_for(lambda: [d for d in fake.get("deliveries")
                                              if d.get("signing") == signing and d.get("status") is not None],
                                     "the answer to a delivery signed " + signing)[0]
            self.assertEqual(delivery["status"], 401, delivery)
        self.assert_no_bot_message(fake, 1.5, channel=DM_ANN, text_contains="echo #2")
        self.assertRegex(bridge.stderr(), r"refused.*(stale|does not match|no X-Slack-Signature)")
        fake.post("config", {"signing": "valid"})
        fake.say(DM_ANN, "valid again")
        # The reply itself, not a progress edit that shows only the tail of the streamed text.
        self.assertIn("echo #2:", fake.wait_text(DM_ANN, "valid again")["text"])

    def test_buttons_and_commands_over_http(self):
        fake = self.start_fake()
        self.start_events(fake, provider="question.json")
        fake.say(DM_ANN, "pick one")
        question = fake.wait_text(DM_ANN, "Which language?")
        fake.post("press", {"channel": DM_ANN, "ts": question["ts"], "user": ANN, "label": "C++"})
        fake.wait_reply(DM_ANN, "Answers: lang=C++")
        fake.post("command", {"channel": DM_ANN, "user": ANN, "command": "/sessionturn", "text": "status"})
        fake.wait_text(DM_ANN, "No turn is running")

    def test_events_mode_needs_the_secret_and_listen(self):
        fake = self.start_fake()
        no_secret = self.start_bridge(fake, mode="events", env={"SLACK_SIGNING_SECRET": None}, wait_ready=False)
        self.assertEqual(no_secret.wait_exit(), 2, no_secret.stderr())
        self.assertIn("SLACK_SIGNING_SECRET", no_secret.stderr())
        no_listen = self.start_bridge(fake, mode="events", listen=None, wait_ready=False)
        self.assertEqual(no_listen.wait_exit(), 2, no_listen.stderr())
        self.assertIn("--listen", no_listen.stderr())


class Operations(SlackCase):
    def test_tokens_are_never_printed(self):
        fake, bridge = self.start_connected()
        fake.say(DM_ANN, "hello")
        fake.wait_reply(DM_ANN, "echo #1:")
        fake.fault(method="users.info", kind="http500", count=3)  # a failed lookup, logged at debug
        fake.say("D0BOB", "hi from bob", user=BOB)
        fake.wait_reply("D0BOB", "echo #1:")
        fake.post("socket", {"action": "drop"})
        fake.wait(timeout=15, connections=2)
        self.assertEqual(bridge.stop(), 0, bridge.stderr())
        outputs = {"bridge stderr": bridge.stderr(), "bridge stdout": bridge.stdout(), "fake": fake.output()}
        for base, _, files in os.walk(bridge.state_dir):
            for name in files:
                if name.endswith(".log"):
                    with open(os.path.join(base, name), errors="replace") as f:
                        outputs[name] = f.read()
        for what, text in outputs.items():
            for secret in (BOT_TOKEN, APP_TOKEN, SIGNING_SECRET):
                self.assertNotIn(secret, text, "%s shows a secret:\n%s" % (what, text))

    def test_exit_statuses(self):
        fake = self.start_fake()
        none = self.start_bridge(fake, env={"SLACK_BOT_TOKEN": None}, wait_ready=False)
        self.assertEqual(none.wait_exit(), 2, none.stderr())
        self.assertIn("SLACK_BOT_TOKEN", none.stderr())
        no_app = self.start_bridge(fake, env={"SLACK_APP_TOKEN": None}, wait_ready=False)
        self.assertEqual(no_app.wait_exit(), 2, no_app.stderr())
        self.assertIn("SLACK_APP_TOKEN", no_app.stderr())
        for flag, value in (("--questions", "maybe"), ("--mode", "push")):
            bad = self.start_bridge(fake, flag, value, wait_ready=False)
            self.assertEqual(bad.wait_exit(), 2, bad.stderr())
            self.assertIn(flag, bad.stderr())
        wrong = self.start_bridge(fake, env={"SLACK_BOT_TOKEN": "xoxb-WRONG-TOKEN"}, wait_ready=False)
        self.assertEqual(wrong.wait_exit(), 3, wrong.stderr())
        self.assertIn("invalid_auth", wrong.stderr())
        self.assertNotIn("WRONG-TOKEN", wrong.stderr())
        wrong_app = self.start_bridge(fake, env={"SLACK_APP_TOKEN": "xapp-WRONG-TOKEN"}, wait_ready=False)
        self.assertEqual(wrong_app.wait_exit(), 3, wrong_app.stderr())
        self.assertIn("app token", wrong_app.stderr())
        self.assertNotIn("WRONG-TOKEN", wrong_app.stderr())
        good = self.start_bridge(fake)
        fake.wait_connections(1)
        self.assertEqual(good.stop(signal.SIGTERM), 0, good.stderr())

    def test_not_ready_while_the_backend_is_unreachable(self):
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        kubeconfig = os.path.join(self.root, "kubeconfig")
        with open(kubeconfig, "w") as f:
            f.write("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:%d', "
                    "insecure-skip-tls-verify: true}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n"
                    "  context: {cluster: c, user: u, namespace: ns}\ncurrent-context: x\n" % port)
        fake = self.start_fake()
        bridge = self.start_bridge(fake, "--backend", "kubernetes", "--kubeconfig", kubeconfig, "--spawner", "sp")
        fake.wait_connections(1)
        # The socket is counted when the fake accepts it; the bridge is connected once it read the hello
        # (later under a sanitizer): until then /readyz names the platform, not the backend.
        deadline = time.monotonic() + 15
        while True:
            status, text = request(bridge.base + "/readyz")
            if "platform is not connected" not in text or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(status, 503, text)
        self.assertIn("backend is not reachable", text)
        self.assertIn("127.0.0.1:%d" % port, text)

    def test_link_disabled_ends_the_bridge(self):
        fake, bridge = self.start_connected()
        fake.post("socket", {"action": "disconnect", "reason": "link_disabled"})
        self.assertEqual(bridge.wait_exit(15), 1, bridge.stderr())
        self.assertIn("link_disabled", bridge.stderr())

    def test_ready_health_and_metrics(self):
        fake, bridge = self.start_connected()
        self.wait_for(lambda: request(bridge.base + "/readyz")[0] == 200, "/readyz 200 once connected", timeout=5)
        self.assertEqual(request(bridge.base + "/healthz")[0], 200)
        fake.say(DM_ANN, "count me")
        fake.wait_reply(DM_ANN, "echo #1:")

        def metric(name):
            status, text = request(bridge.base + "/metrics")
            m = re.search(r"^%s(?:\{[^}]*\})? (\S+)$" % name, str(text), re.M)
            return float(m.group(1)) if status == 200 and m else None

        self.wait_for(lambda: (metric("sessionturn_turns_completed_total") or 0) >= 1, "a completed turn", timeout=5)
        self.assertGreaterEqual(metric("sessionturn_slack_socket_connections_total"), 1)
        fake.post("socket", {"action": "drop"})
        self.wait_for(lambda: (metric("sessionturn_slack_socket_disconnects_total") or 0) >= 1, "a disconnect",
                      timeout=10)


if __name__ == "__main__":
    unittest.main(verbosity=2)
