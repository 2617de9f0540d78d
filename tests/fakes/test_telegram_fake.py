#!/usr/bin/python3
"""Self-test of the Telegram Bot API fake (telegram_api.py) through urllib: the Bot API as clients see it, the
server's error texts, forum topics, webhooks, faults and the /_test/ control API. Run: python3 test_telegram_fake.py
"""

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

HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN = "777001:SELF-TEST-SECRET"
ANN = {"id": 42, "first_name": "Ann", "username": "ann"}


class Fake:
    """A running fake in its own directory; stop() ends it and returns what it printed."""

    def __init__(self, *extra):
        self.dir = tempfile.mkdtemp(prefix="tgfake-")
        self.out = open(os.path.join(self.dir, "output.log"), "w+")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "telegram_api.py"), "--dir", self.dir,
                                      "--token", TOKEN, "--bot-username", "st_bot", *extra],
                                     stdout=self.out, stderr=subprocess.STDOUT)
        ready = os.path.join(self.dir, "ready.json")
        for _ in range(200):
            if os.path.exists(ready):
                break
            if self.proc.poll() is not None:
                raise RuntimeError("the fake exited with %s" % self.proc.returncode)
            time.sleep(0.05)
        with open(ready) as f:
            self.base = "http://127.0.0.1:%d" % json.load(f)["port"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.out.seek(0)
        text = self.out.read()
        self.out.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return text


def request(url, body=None, content_type="application/json", method=None, timeout=30):
    """(status, headers, parsed JSON or text) for one request."""
    data = None
    headers = {}
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers["Content-Type"] = content_type
    req = urllib.request.Request(url, data=data, headers=headers, method=method or ("POST" if data else "GET"))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw, status, hdrs = resp.read(), resp.status, resp.headers
    except urllib.error.HTTPError as e:
        raw, status, hdrs = e.read(), e.code, e.headers
    try:
        return status, hdrs, json.loads(raw)
    except ValueError:
        return status, hdrs, raw.decode()


class Base(unittest.TestCase):
    extra = ()

    @classmethod
    def setUpClass(cls):
        cls.fake = Fake(*cls.extra)

    @classmethod
    def tearDownClass(cls):
        printed = cls.fake.stop()
        assert TOKEN not in printed and TOKEN.split(":")[1] not in printed, "the fake printed its token"

    def setUp(self):
        self.control("reset")

    def api(self, method, params=None, token=TOKEN, **kw):
        status, _, body = request("%s/bot%s/%s" % (self.fake.base, token, method), params if params else None,
                                  **kw)
        return status, body

    def ok(self, method, params=None):
        status, body = self.api(method, params)
        self.assertEqual((status, body.get("ok")), (200, True), body)
        return body["result"]

    def fails(self, method, params, code, description):
        status, body = self.api(method, params)
        self.assertEqual((status, body), (code, {"ok": False, "error_code": code, "description": description}))

    def control(self, path, body=None, expect=200):
        status, _, out = request("%s/_test/%s" % (self.fake.base, path), body if body is not None else
                                 ({} if path in ("reset",) else None))
        self.assertEqual(status, expect, out)
        return out

    def say(self, text, chat_id=42, **kw):
        return self.control("send", dict({"chat_id": chat_id, "from": ANN, "text": text}, **kw))


class BotApiBasics(Base):
    def test_get_me_describes_the_bot(self):
        me = self.ok("getMe")
        self.assertEqual(me, {"id": 777001, "is_bot": True, "first_name": "St Bot", "username": "st_bot",
                              "can_join_groups": True, "can_read_all_group_messages": True,
                              "supports_inline_queries": False})

    def test_a_wrong_token_is_unauthorized_and_an_unknown_method_not_found(self):
        status, body = self.api("getMe", token="777001:WRONG")
        self.assertEqual((status, body["description"]), (401, "Unauthorized"))
        status, body = self.api("getMeNow")
        self.assertEqual((status, body["description"]), (404, "Not Found"))

    def test_method_names_are_case_insensitive(self):
        self.assertEqual(self.ok("GETME")["id"], 777001)
        self.assertEqual(self.ok("getme")["id"], 777001)

    def test_parameters_come_from_query_form_json_and_multipart(self):
        self.say("hi")
        base = "%s/bot%s/sendMessage" % (self.fake.base, TOKEN)
        _, _, a = request(base + "?chat_id=42&text=query")
        _, _, b = request(base, b"chat_id=42&text=form", "application/x-www-form-urlencoded")
        _, _, c = request(base, {"chat_id": 42, "text": "json"})
        boundary = "XyZ"
        parts = "".join('--%s\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n' % (boundary, k, v)
                        for k, v in (("chat_id", "42"), ("text", "multi <b>part</b>"), ("parse_mode", "HTML")))
        _, _, d = request(base, (parts + "--%s--\r\n" % boundary).encode(), "multipart/form-data; boundary=" + boundary)
        self.assertEqual([x["result"]["text"] for x in (a, b, c, d)], ["query", "form", "json", "multi part"])
        self.assertEqual(d["result"]["entities"], [{"type": "bold", "offset": 6, "length": 4}])

    def test_every_call_is_recorded_in_order(self):
        self.ok("getMe")
        self.fails("sendMessage", {"chat_id": 5, "text": "x"}, 400, "Bad Request: chat not found")
        calls = self.control("calls")
        self.assertEqual([(c["method"], c["status"]) for c in calls], [("getMe", 200), ("sendMessage", 400)])
        self.assertEqual(calls[1]["params"], {"chat_id": 5, "text": "x"})
        self.assertEqual(calls[1]["response"]["description"], "Bad Request: chat not found")
        self.assertEqual([c["method"] for c in self.control("calls?method=getme")], ["getMe"])


class GettingUpdates(Base):
    def poll(self, **params):
        return self.ok("getUpdates", params)

    def poll_started(self):
        for _ in range(200):
            if any(c["method"] == "getUpdates" for c in self.control("calls")):
                time.sleep(0.1)  # from recorded to waiting
                return
            time.sleep(0.05)
        self.fail("the long poll never reached the fake")

    def test_offset_confirms_lower_ids(self):
        ids = [self.say("m%d" % i)["update_id"] for i in range(3)]
        self.assertEqual([u["update_id"] for u in self.poll()], ids)
        self.assertEqual([u["update_id"] for u in self.poll(offset=ids[1])], ids[1:])
        self.assertEqual([u["update_id"] for u in self.poll()], ids[1:])  # ids[0] is confirmed now
        self.assertEqual([u["confirmed"] for u in self.control("updates")], [True, False, False])

    def test_a_negative_offset_keeps_only_the_last_updates(self):
        ids = [self.say("m%d" % i)["update_id"] for i in range(4)]
        self.assertEqual([u["update_id"] for u in self.poll(offset=-1)], ids[3:])
        self.assertEqual([u["update_id"] for u in self.poll()], ids[3:])

    def test_limit_is_clamped_to_1_through_100(self):
        for i in range(3):
            self.say("m%d" % i)
        self.assertEqual(len(self.poll(limit=2)), 2)
        self.assertEqual(len(self.poll(limit=0)), 1)
        self.assertEqual(len(self.poll(limit=500)), 3)

    def test_a_long_poll_answers_when_an_update_arrives(self):
        got = {}
        t = threading.Thread(target=lambda: got.update(r=self.poll(timeout=40)))
        t.start()
        self.poll_started()
        self.say("wake up")
        t.join(20)
        self.assertFalse(t.is_alive(), "the long poll did not answer when the update came")
        self.assertEqual([u["message"]["text"] for u in got["r"]], ["wake up"])

    def test_a_newer_get_updates_ends_the_waiting_one_with_409(self):
        got = {}
        t = threading.Thread(target=lambda: got.update(r=self.api("getUpdates", {"timeout": 40})))
        t.start()
        self.poll_started()
        self.assertEqual(self.poll(timeout=0), [])
        t.join(20)
        self.assertEqual(got["r"], (409, {"ok": False, "error_code": 409, "description":
                                          "Conflict: terminated by other getUpdates request; make sure that only "
                                          "one bot instance is running"}))

    def test_allowed_updates_are_remembered_when_left_out(self):
        self.say("first")
        self.assertEqual(self.poll(allowed_updates=json.dumps(["callback_query"])), [])
        self.say("second")
        sent = self.ok("sendMessage", {"chat_id": 42, "text": "pick", "reply_markup": {
            "inline_keyboard": [[{"text": "A", "callback_data": "a"}]]}})
        self.control("press", {"chat_id": 42, "message_id": sent["message_id"], "from": ANN, "data": "a"})
        got = self.poll()
        self.assertEqual([list(u)[1] for u in got], ["callback_query"])
        self.say("third")
        self.assertEqual([u["message"]["text"] for u in self.poll(offset=got[0]["update_id"] + 1,
                                                                 allowed_updates=[])], ["third"])

    def test_user_texts_get_the_entities_the_server_finds(self):
        msg = self.say("/start@st_bot hello @st_bot, see /help")["message"]
        self.assertEqual(msg["entities"], [{"type": "bot_command", "offset": 0, "length": 13},
                                           {"type": "mention", "offset": 20, "length": 7},
                                           {"type": "bot_command", "offset": 33, "length": 5}])
        self.assertNotIn("entities", self.say("plain words")["message"])

    def test_an_edit_and_a_photo_make_updates(self):
        mid = self.say("draft")["message"]["message_id"]
        edited = self.control("edit", {"chat_id": 42, "message_id": mid, "text": "final"})
        photo = self.control("send", {"chat_id": 42, "from": ANN, "photo": True, "caption": "look /here"})
        updates = self.poll()
        self.assertEqual(updates[1], {"update_id": edited["update_id"], "edited_message": edited["message"]})
        self.assertEqual((updates[1]["edited_message"]["text"], "edit_date" in updates[1]["edited_message"]),
                         ("final", True))
        self.assertEqual(updates[2]["message"]["caption_entities"], [{"type": "bot_command", "offset": 5,
                                                                      "length": 5}])
        self.assertEqual(len(photo["message"]["photo"]), 3)


class SendingMessages(Base):
    def setUp(self):
        super().setUp()
        self.say("hello")

    def send(self, text, **kw):
        return self.api("sendMessage", dict({"chat_id": 42, "text": text, "parse_mode": "HTML"}, **kw))

    def parse_error(self, html, reason):
        self.assertEqual(self.send(html), (400, {"ok": False, "error_code": 400,
                                                 "description": "Bad Request: can't parse entities: " + reason}))

    def test_html_errors_read_like_the_server(self):
        self.parse_error("<foo>x</foo>", 'Unsupported start tag "foo" at byte offset 0')
        self.parse_error("a <b>bold", 'Can\'t find end tag corresponding to start tag "b"')
        self.parse_error("<b>x</i>", 'Unmatched end tag at byte offset 4, expected "</b>", found "</i>"')
        self.parse_error("1 < 2", 'Unsupported start tag "" at byte offset 2')
        self.parse_error("é <br>", 'Unsupported start tag "br" at byte offset 3')
        self.parse_error("x</b>", "Unexpected end tag at byte offset 1")
        self.parse_error('<span class="x">s</span>', 'Tag "span" must have class "tg-spoiler" at byte offset 0')

    def test_every_tag_of_the_html_style_is_taken(self):
        html = ('<b>b</b><strong>s</strong><i>i</i><em>e</em><u>u</u><ins>n</ins><s>s</s><strike>t</strike>'
                '<del>d</del><span class="tg-spoiler">p</span><tg-spoiler>q</tg-spoiler>'
                '<a href="https://example.com/?a=1&amp;b=2">l</a><tg-emoji emoji-id="5368324170671202286">👍'
                '</tg-emoji><code>c</code><pre>p</pre><pre><code class="language-py">x</code></pre>'
                '<blockquote>q</blockquote><blockquote expandable>x</blockquote>&lt;&gt;&amp;&quot;&#65;&#x42;')
        status, body = self.send(html)
        self.assertEqual(status, 200, body)
        msg = body["result"]
        self.assertEqual(msg["text"], "bsieunstdpql👍cpxqx<>&\"AB")
        kinds = [e["type"] for e in msg["entities"]]
        self.assertEqual(kinds, ["bold", "bold", "italic", "italic", "underline", "underline", "strikethrough",
                                 "strikethrough", "strikethrough", "spoiler", "spoiler", "text_link",
                                 "custom_emoji", "code", "pre", "pre", "blockquote", "expandable_blockquote"])
        self.assertEqual(msg["entities"][11]["url"], "https://example.com/?a=1&b=2")
        self.assertEqual(msg["entities"][15]["language"], "py")

    def test_a_bare_ampersand_and_greater_than_are_text_as_on_the_server(self):
        status, body = self.send("Tom & Jerry > &nbsp;")
        self.assertEqual((status, body["result"]["text"]), (200, "Tom & Jerry > &nbsp;"))

    def test_text_length_is_counted_after_parsing_in_utf16_units(self):
        self.assertEqual(self.send("<b>" + "a" * 4096 + "</b>")[0], 200)
        self.assertEqual(self.send("😀" * 2048)[0], 200)  # 4,096 UTF-16 units
        self.assertEqual(self.send("😀" * 2049), (400, {"ok": False, "error_code": 400,
                                                       "description": "Bad Request: message is too long"}))
        for empty in ("", "<b></b>", "  \n "):
            self.assertEqual(self.send(empty)[1]["description"], "Bad Request: message text is empty")

    def test_text_is_trimmed_with_its_entities(self):
        msg = self.send("  <b>hi</b> \n")[1]["result"]
        self.assertEqual((msg["text"], msg["entities"]), ("hi", [{"type": "bold", "offset": 0, "length": 2}]))

    def test_an_unknown_chat_and_a_long_callback_data_are_refused(self):
        self.fails("sendMessage", {"chat_id": 999, "text": "x"}, 400, "Bad Request: chat not found")
        self.fails("sendMessage", {"chat_id": 42, "text": "x", "reply_markup": {"inline_keyboard": [[
            {"text": "b", "callback_data": "é" * 33}]]}}, 400, "Bad Request: BUTTON_DATA_INVALID")
        self.assertEqual(self.send("x", reply_markup={"inline_keyboard": [[{"text": "b", "callback_data":
                                                                             "x" * 64}]]})[0], 200)

    def test_replies_need_the_message_unless_sent_without_it(self):
        msg = self.send("re", reply_parameters={"message_id": 1})[1]["result"]
        self.assertEqual(msg["reply_to_message"]["text"], "hello")
        self.assertEqual(self.send("re", reply_to_message_id=1)[1]["result"]["reply_to_message"]["message_id"], 1)
        self.fails("sendMessage", {"chat_id": 42, "text": "x", "reply_parameters": {"message_id": 99}}, 400,
                   "Bad Request: message to be replied not found")
        msg = self.send("x", reply_parameters={"message_id": 99, "allow_sending_without_reply": True})[1]["result"]
        self.assertNotIn("reply_to_message", msg)

    def test_message_ids_count_up_per_chat(self):
        self.control("chats", {"id": 7, "type": "private", "first_name": "Bo"})
        a = self.send("a")[1]["result"]["message_id"]
        b = self.send("b", chat_id=7)[1]["result"]["message_id"]
        c = self.send("c")[1]["result"]["message_id"]
        self.assertEqual((a, b, c), (2, 1, 3))

    def test_edits_follow_the_servers_rules(self):
        kb = {"inline_keyboard": [[{"text": "Go", "callback_data": "go"}]]}
        mid = self.send("<b>v1</b>", reply_markup=kb)[1]["result"]["message_id"]
        same = {"chat_id": 42, "message_id": mid, "text": "<b>v1</b>", "parse_mode": "HTML", "reply_markup": kb}
        self.fails("editMessageText", same, 400, "Bad Request: message is not modified: specified new message "
                   "content and reply markup are exactly the same as a current content and reply markup of the "
                   "message")
        edited = self.ok("editMessageText", dict(same, reply_markup=None, text="<b>v1</b>"))
        self.assertNotIn("reply_markup", edited)  # leaving it out takes the keyboard away
        self.fails("editMessageText", {"chat_id": 42, "message_id": 77, "text": "x"}, 400,
                   "Bad Request: message to edit not found")
        self.fails("editMessageText", {"chat_id": 42, "message_id": 1, "text": "x"}, 400,
                   "Bad Request: message can't be edited")
        self.assertEqual(self.control("messages?chat_id=42")[1]["edit_count"], 1)

    def test_delete_chat_action_and_callback_answers(self):
        mid = self.send("bye", reply_markup={"inline_keyboard": [[{"text": "x", "callback_data": "x"}]]})[1][
            "result"]["message_id"]
        press = self.control("press", {"chat_id": 42, "message_id": mid, "from": ANN, "data": "x"})
        self.control("press", {"chat_id": 42, "message_id": mid, "from": ANN, "data": "nope"}, expect=400)
        self.assertEqual(self.ok("answerCallbackQuery", {"callback_query_id": press["callback_query_id"],
                                                         "text": "done", "show_alert": True}), True)
        self.fails("answerCallbackQuery", {"callback_query_id": press["callback_query_id"]}, 400,
                   "Bad Request: query is too old and response timeout expired or query ID is invalid")
        self.assertEqual([(a["text"], a["show_alert"]) for a in self.control("callback_answers")], [("done", True)])
        self.assertTrue(self.ok("sendChatAction", {"chat_id": 42, "action": "typing"}))
        self.fails("sendChatAction", {"chat_id": 42, "action": "dancing"}, 400,
                   "Bad Request: wrong parameter action in request")
        self.assertTrue(self.ok("deleteMessage", {"chat_id": 42, "message_id": mid}))
        self.fails("deleteMessage", {"chat_id": 42, "message_id": mid}, 400,
                   "Bad Request: message to delete not found")
        self.assertTrue(self.control("messages?chat_id=42")[1]["deleted"])

    def test_commands_are_validated_and_kept(self):
        cmds = [{"command": "start", "description": "Start"}, {"command": "new_1", "description": "A new one"}]
        self.assertTrue(self.ok("setMyCommands", {"commands": json.dumps(cmds)}))
        self.assertEqual(self.ok("getMyCommands"), cmds)
        self.fails("setMyCommands", {"commands": [{"command": "Bad-Name", "description": "x"}]}, 400,
                   "Bad Request: BOT_COMMAND_INVALID")
        self.fails("setMyCommands", {"commands": [{"command": "x" * 33, "description": "x"}]}, 400,
                   "Bad Request: command length must not exceed 32")
        self.fails("setMyCommands", {"commands": [{"command": "ok", "description": " "}]}, 400,
                   "Bad Request: command description must be non-empty")

    def test_wait_finds_a_bot_message_or_times_out(self):
        threading.Timer(0.3, lambda: self.send("late reply")).start()
        found = self.control("wait", {"chat_id": 42, "text_contains": "late", "timeout": 10})
        self.assertEqual(found["match"]["text"], "late reply")
        self.control("wait", {"chat_id": 42, "text_contains": "never", "timeout": 0.2}, expect=408)


class ForumTopics(Base):
    FORUM = -1001234567890

    def setUp(self):
        super().setUp()
        self.control("chats", {"id": self.FORUM, "type": "supergroup", "title": "Team", "is_forum": True})
        self.topic = self.control("topics", {"chat_id": self.FORUM, "name": "Build"})["message_thread_id"]

    def test_a_topic_message_replies_to_the_topics_root(self):
        msg = self.say("in topic", self.FORUM, message_thread_id=self.topic)["message"]
        self.assertEqual((msg["message_thread_id"], msg["is_topic_message"]), (self.topic, True))
        self.assertEqual(msg["reply_to_message"]["forum_topic_created"]["name"], "Build")
        self.assertEqual(msg["reply_to_message"]["message_id"], self.topic)
        real = self.say("a real reply", self.FORUM, reply_to_message_id=msg["message_id"])["message"]
        self.assertEqual((real["message_thread_id"], real["reply_to_message"]["message_id"]),
                         (self.topic, msg["message_id"]))

    def test_general_has_no_thread_fields(self):
        msg = self.say("in general", self.FORUM)["message"]
        for field in ("message_thread_id", "is_topic_message", "reply_to_message"):
            self.assertNotIn(field, msg)
        self.assertEqual([m["text"] for m in self.control("messages?chat_id=%d&message_thread_id=1" % self.FORUM)],
                         ["in general"])

    def test_the_bot_sends_into_a_topic_and_not_into_general_by_id(self):
        msg = self.ok("sendMessage", {"chat_id": self.FORUM, "text": "hi", "message_thread_id": self.topic})
        self.assertEqual((msg["message_thread_id"], msg["is_topic_message"], msg["reply_to_message"]["message_id"]),
                         (self.topic, True, self.topic))
        for thread in (1, 999):
            self.fails("sendMessage", {"chat_id": self.FORUM, "text": "x", "message_thread_id": thread}, 400,
                       "Bad Request: message thread not found")
        self.fails("sendChatAction", {"chat_id": self.FORUM, "action": "typing", "message_thread_id": 999}, 400,
                   "Bad Request: message thread not found")
        self.assertNotIn("message_thread_id", self.ok("sendMessage", {"chat_id": self.FORUM, "text": "general"}))

    def test_a_reply_goes_to_the_topic_of_its_message(self):
        mid = self.say("q", self.FORUM, message_thread_id=self.topic)["message"]["message_id"]
        msg = self.ok("sendMessage", {"chat_id": self.FORUM, "text": "a", "reply_parameters": {"message_id": mid}})
        self.assertEqual((msg["message_thread_id"], msg["reply_to_message"]["message_id"]), (self.topic, mid))

    def test_a_reply_in_a_plain_supergroup_carries_its_reply_thread(self):
        self.control("chats", {"id": -1009, "type": "supergroup", "title": "Plain"})
        root = self.say("root", -1009)["message"]
        self.assertNotIn("message_thread_id", root)
        reply = self.say("reply", -1009, reply_to_message_id=root["message_id"])["message"]
        self.assertEqual(reply["message_thread_id"], root["message_id"])
        self.assertNotIn("is_topic_message", reply)


class Webhooks(Base):
    def setUp(self):
        super().setUp()
        self.got = []
        self.answers = []
        outer = self

        class Hook(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.got.append((self.headers.get("X-Telegram-Bot-Api-Secret-Token"), body))
                code = outer.answers.pop(0) if outer.answers else 200
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.hook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
        self.hook_up = True
        threading.Thread(target=self.hook.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d/hook" % self.hook.server_address[1]

    def tearDown(self):
        self.stop_hook()

    def stop_hook(self):
        if self.hook_up:
            self.hook.shutdown()
            self.hook.server_close()
            self.hook_up = False

    def wait_for(self, cond):
        for _ in range(200):
            if cond():
                return
            time.sleep(0.05)
        self.fail("the webhook did not get there")

    def test_updates_are_posted_in_order_with_the_secret(self):
        status, body = self.api("setWebhook", {"url": self.url, "secret_token": "s3cr-et_"})
        self.assertEqual(body, {"ok": True, "result": True, "description": "Webhook was set"})
        self.fails("getUpdates", {}, 409, "Conflict: can't use getUpdates method while webhook is active; use "
                   "deleteWebhook to delete the webhook first")
        ids = [self.say("m%d" % i)["update_id"] for i in range(3)]
        self.wait_for(lambda: len(self.got) == 3)
        self.assertEqual([(s, b["update_id"]) for s, b in self.got], [("s3cr-et_", i) for i in ids])
        self.assertEqual(self.ok("getWebhookInfo")["pending_update_count"], 0)

    def test_a_failing_webhook_is_retried_and_its_error_shown(self):
        self.answers = [500, 500]
        self.ok("setWebhook", {"url": self.url})
        self.say("retry me")
        self.wait_for(lambda: len(self.got) == 3)
        # The fake records a delivery once it has the answer, a moment after the receiver got the request.
        self.wait_for(lambda: len(self.control("deliveries")) == 3)
        self.assertEqual([d["status"] for d in self.control("deliveries")], [500, 500, 200])
        info = self.ok("getWebhookInfo")
        self.assertEqual((info["url"], info["pending_update_count"]), (self.url, 0))
        self.assertEqual(info["last_error_message"], "Wrong response from the webhook: 500 Internal Server Error")

    def test_an_unreachable_webhook_keeps_its_updates_pending(self):
        self.stop_hook()
        self.ok("setWebhook", {"url": self.url})
        self.say("nobody home")
        self.wait_for(lambda: self.control("deliveries"))
        info = self.ok("getWebhookInfo")
        self.assertEqual((info["pending_update_count"], info["last_error_message"]), (1, "Connection refused"))
        self.assertEqual(self.api("deleteWebhook", {"drop_pending_updates": True})[1]["description"],
                         "Webhook was deleted")
        self.assertEqual(self.ok("getWebhookInfo"), {"url": "", "has_custom_certificate": False,
                                                     "pending_update_count": 0})

    def test_a_secret_token_is_checked(self):
        self.fails("setWebhook", {"url": self.url, "secret_token": "a+b"}, 400,
                   "Bad Request: secret token contains unallowed characters")
        self.fails("setWebhook", {"url": self.url, "secret_token": "a" * 257}, 400,
                   "Bad Request: secret token is too long")


class Faults(Base):
    def test_429_carries_retry_after_in_body_and_header(self):
        self.control("faults", {"method": "sendMessage", "status": 429, "retry_after": 7, "count": 1})
        self.say("x")
        status, headers, body = request("%s/bot%s/sendMessage" % (self.fake.base, TOKEN), {"chat_id": 42,
                                                                                          "text": "y"})
        self.assertEqual((status, headers["Retry-After"]), (429, "7"))
        self.assertEqual(body, {"ok": False, "error_code": 429, "description": "Too Many Requests: retry after 7",
                                "parameters": {"retry_after": 7}})
        self.assertEqual(self.api("sendMessage", {"chat_id": 42, "text": "y"})[0], 200)
        self.assertEqual([m["text"] for m in self.control("messages?chat_id=42")], ["x", "y"])

    def test_500_and_502(self):
        self.control("faults", {"method": "getMe", "status": 500, "count": 1})
        self.control("faults", {"method": "getMe", "status": 502, "count": 1})
        self.assertEqual(self.api("getMe"), (500, {"ok": False, "error_code": 500,
                                                  "description": "Internal Server Error"}))
        status, body = self.api("getMe")
        self.assertEqual(status, 502)
        self.assertIn("502 Bad Gateway", body)
        self.assertEqual(self.api("getMe")[0], 200)

    def test_a_dropped_poll_closes_the_connection(self):
        self.control("faults", {"method": "getUpdates", "kind": "drop"})
        with self.assertRaises((ConnectionError, urllib.error.URLError, OSError)):
            urllib.request.urlopen("%s/bot%s/getUpdates?timeout=5" % (self.fake.base, TOKEN), timeout=10).read()
        self.assertEqual(self.control("calls")[0]["status"], 0)


class PrivacyMode(Base):
    extra = ("--privacy-mode",)

    def test_a_group_bot_sees_only_commands_mentions_and_replies(self):
        self.assertFalse(self.ok("getMe")["can_read_all_group_messages"])
        self.control("chats", {"id": -55, "type": "group", "title": "G"})
        self.assertIsNone(self.say("chatter", -55)["update_id"])
        self.assertIsNotNone(self.say("/help", -55)["update_id"])
        self.assertIsNone(self.say("/help@other_bot", -55)["update_id"])
        self.assertIsNotNone(self.say("hey @st_bot", -55)["update_id"])
        mid = self.ok("sendMessage", {"chat_id": -55, "text": "bot says"})["message_id"]
        self.assertIsNotNone(self.say("answer", -55, reply_to_message_id=mid)["update_id"])
        self.assertIsNotNone(self.say("private words")["update_id"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
