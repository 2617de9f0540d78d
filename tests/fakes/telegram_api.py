#!/usr/bin/python3
"""A faithful fake of the Telegram Bot API server for sessionturn's tests (standard library only; loopback only).

Usage: telegram_api.py --dir DIR [--token TOKEN] [--bot-username NAME] [--privacy-mode] [--webhook-attempts N]
                       [--port 0]
Once listening on 127.0.0.1 it writes DIR/ready.json {"port": N} (atomically) and prints "READY <port>". It never
prints or writes the token (tests check that a token appears in no log). The default token is "123456:TEST-TOKEN";
the bot's user id is the token's number.

Bot API: GET or POST /bot<token>/<method>; parameters from the query and from an application/json,
application/x-www-form-urlencoded or multipart/form-data body (simple fields; a file part is recorded as its name
and size). Method names are case-insensitive. Answers are {"ok":true,"result":...} (setWebhook and deleteWebhook
add "description") or {"ok":false,"error_code":N,"description":"..."}, with "parameters":{"retry_after":N} and a
Retry-After header on 429. A wrong token answers 401 "Unauthorized", an unknown method 404 "Not Found".
  getMe               the bot: id, is_bot, first_name, username, can_join_groups, can_read_all_group_messages
                      (false in --privacy-mode), supports_inline_queries
  getUpdates          offset (confirms every lower id; negative: keep only the last -offset pending updates), limit
                      (clamped to 1-100), timeout (long poll, clamped to 0-50 s, answered as soon as an update
                      arrives), allowed_updates (kept for later calls that leave it out; [] = every type but
                      chat_member, message_reaction and message_reaction_count; an update of a type not asked for
                      is dropped when reached). A newer getUpdates ends a waiting one with 409 "Conflict: terminated
                      by other getUpdates request; ..."; while a webhook is set: 409 "Conflict: can't use getUpdates
                      method while webhook is active; ..."
  setWebhook          url (http or https on a loopback address only: unlike the real server, which wants public
                      HTTPS), secret_token (1-256 of A-Za-z0-9_-), allowed_updates, max_connections,
                      drop_pending_updates; url "" deletes it
  deleteWebhook       drop_pending_updates
  getWebhookInfo      url, has_custom_certificate, pending_update_count, max_connections, allowed_updates,
                      last_error_date, last_error_message
  sendMessage         chat_id (number or @username), text, parse_mode (HTML parsed as TDLib does; Markdown and
                      MarkdownV2 accepted but not parsed), message_thread_id, reply_parameters {message_id,
                      allow_sending_without_reply} or reply_to_message_id + allow_sending_without_reply,
                      reply_markup (inline_keyboard validated: callback_data 1-64 bytes), link_preview_options and
                      disable_web_page_preview ignored. The text is trimmed and measured after entity parsing, in
                      UTF-16 units (empty: "message text is empty"; over 4096: "message is too long").
                      message_thread_id 1 (General) is answered "message thread not found": the real server wants
                      it omitted for General, so the fake makes sending it an error an adapter notices.
  editMessageText     chat_id + message_id, text, parse_mode, reply_markup (left out: the keyboard goes, as on
                      the real server); same text, entities and markup: 400 "message is not modified: ..."
  deleteMessage       chat_id, message_id ("message to delete not found")
  answerCallbackQuery callback_query_id (once; unknown or answered: "query is too old and ..."), text, show_alert,
                      url, cache_time
  sendChatAction      chat_id, action (typing and the other documented actions), message_thread_id
  setMyCommands       commands [{command, description}] (1-32 of a-z0-9_, description 1-256), scope,
                      language_code
  getMyCommands       scope, language_code

Messages: message_id counts up per chat (in a forum from 2: id 1 is the General topic). A forum topic's
message_thread_id is the id of its creation service message (forum_topic_created); every message in a topic has
message_thread_id and is_topic_message, and one that replies to nothing has reply_to_message = that service
message, as real Telegram sends it. A message in General has neither field. In a supergroup that is not a forum, a
reply carries message_thread_id = the reply thread's first message (and no is_topic_message). A private chat
has a positive id, a group or supergroup a negative one. The server finds "mention" (@name) and "bot_command"
(/cmd, /cmd@bot, anywhere in the text) entities in users' texts. With --privacy-mode a group message reaches the
bot only when it is a command (for it), mentions it or replies to it.

Webhook: while one is set, each pending update (in order, one at a time) is POSTed as JSON to the url with
X-Telegram-Bot-Api-Secret-Token when a secret is set; a non-2xx answer or a connection failure is retried after
0.1, 0.2, 0.4... s (at most --webhook-attempts tries, default 5, then the update is given up), and shows in
getWebhookInfo's last_error_message ("Wrong response from the webhook: 500 Internal Server Error",
"Connection refused", "Read timeout expired").

Control API under /_test/ (no token; JSON in and out; a test's mistake is 400 {"error": "..."}):
  POST /_test/chats    {id, type: private|group|supergroup, title?, first_name?, is_forum?, username?} -> the Chat
                       (a chat used by /_test/send before is made then: private for a positive id, else a group,
                       or a supergroup for an id of -100xxxxxxxxxx)
  POST /_test/topics   {chat_id, name, icon_color?, from?, quiet?} -> {message_thread_id, update_id, message}: the
                       forum_topic_created service message, delivered as an update unless quiet
  POST /_test/send     {chat_id, from: {id, first_name, username?, is_bot?}, text? | photo + caption?,
                       message_thread_id?, reply_to_message_id?, entities?} -> {update_id, message} (update_id
                       null when privacy mode hides it from the bot)
  POST /_test/edit     {chat_id, message_id, text, entities?} -> {update_id, message}: an edited_message update
  POST /_test/press    {chat_id, message_id, from, data} -> {update_id, callback_query_id, callback_query}: the
                       message must be the bot's and have a button with that callback_data
  GET  /_test/calls[?method=M]        every Bot API call in order: {seq, method, params, status, response, time}
                                      (status null while it runs, 0 when its connection was dropped)
  GET  /_test/messages?chat_id=C[&message_thread_id=T]  the chat's messages (users' and the bot's, 1 = General):
                                      {seq, message_id, from, by_bot, text, caption, entities, reply_markup,
                                      message_thread_id, reply_to_message_id, edit_count, deleted, message}
  GET  /_test/callback_answers        the answerCallbackQuery calls that took effect
  GET  /_test/updates                 every update made: {update_id, update, confirmed, given_up}
  GET  /_test/deliveries              every webhook POST: {update_id, attempt, status, error, time}
  POST /_test/faults   {method ("*" for any), status: 429|500|502|400, description?, retry_after?, count?} or
                       {method: "getUpdates", kind: "drop", count?} or {method, kind: "result", result, count?}:
                       the next count (default 1) calls of the method fail so (502 is nginx's HTML page, as the
                       real front end sends it; drop closes the connection without an answer mid-poll; result
                       answers ok with that result and does nothing, for answers of unexpected shape)
  POST /_test/wait     {method?, chat_id?, text_contains?, count?, started?, status?, timeout? (10 s)} ->
                       {match, matches}: waits for count bot messages (no method) or finished calls of method
                       (started: also calls still running, such as a long poll; status: only calls answered so)
                       that match, else 408
  POST /_test/reset    forgets everything but the token and the bot
"""

import argparse
import email.parser
import email.policy
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import telegram_control  # noqa: E402
from telegram_methods import METHODS  # noqa: E402
from telegram_state import ApiError, State  # noqa: E402

STATE = None
BAD_GATEWAY = (b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1>"
               b"</center>\r\n<hr><center>nginx/1.18.0</center>\r\n</body>\r\n</html>\r\n")
DEFAULT_FAULT_TEXT = {500: "Internal Server Error", 400: "Bad Request: fault injected by the test"}


def parse_body(content_type, body):
    """The parameters in a request body, by its content type."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if not body:
        return {}
    if kind == "application/json":
        try:
            value = json.loads(body)
        except ValueError:
            raise ApiError(400, "Bad Request: can't parse JSON object")
        if not isinstance(value, dict):
            raise ApiError(400, "Bad Request: can't parse JSON object")
        return value
    if kind == "application/x-www-form-urlencoded":
        return {k: v[-1] for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace"),
                                                           keep_blank_values=True).items()}
    if kind == "multipart/form-data":
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
        out = {}
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition")
            data = part.get_payload(decode=True) or b""
            if part.get_filename():
                out[name] = {"filename": part.get_filename(), "size": len(data)}
            else:
                out[name] = data.decode("utf-8", "replace")
        return out
    return {}


def take_fault(state, method):
    for fault in state.faults:
        if fault["count"] > 0 and fault["method"] in (method, "*"):
            fault["count"] -= 1
            return fault
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "nginx/1.18.0"

    def log_message(self, fmt, *args):  # quiet: a request line would hold the token
        pass

    def setup(self):
        super().setup()
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def send_json(self, code, value, headers=None, content_type="application/json"):
        data = value if isinstance(value, bytes) else json.dumps(value, ensure_ascii=False).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True  # the client gave up (an aborted long poll)

    def do_any(self):
        url = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if url.path.startswith("/_test/"):
            return self.control(url, body)
        parts = url.path.split("/")
        if len(parts) != 3 or not parts[1].startswith("bot") or not parts[2]:
            return self.send_json(404, {"ok": False, "error_code": 404, "description": "Not Found"})
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        try:
            params.update(parse_body(self.headers.get("Content-Type", ""), body))
        except ApiError as e:
            return self.bot_api(parts[2], params, error=e)
        self.bot_api(parts[2], params, token_ok=parts[1][3:] == STATE.token)

    do_GET = do_POST = do_any

    def bot_api(self, method, params, token_ok=True, error=None):
        state = STATE
        with state.cv:
            call = {"seq": len(state.calls) + 1, "method": method, "params": params, "status": None,
                    "response": None, "time": time.time()}
            state.calls.append(call)
            fn = METHODS.get(method.lower())
            fault = take_fault(state, method.lower()) if token_ok and fn and error is None else None
        if fault and fault["kind"] == "drop":
            time.sleep(0.2)
            with state.cv:
                call["status"] = 0
                state.cv.notify_all()
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # the client went first
            return
        headers = {}
        content_type = "application/json"
        with state.cv:
            try:
                if error is not None:
                    raise error
                if not token_ok:
                    raise ApiError(401, "Unauthorized")
                if fn is None:
                    raise ApiError(404, "Not Found")
                if fault and fault["kind"] == "result":
                    result = fault["result"]  # what a broken or future server might answer; nothing happens
                elif fault:
                    raise self.fault_error(fault)
                else:
                    result = fn(state, params)
                code, answer = 200, {"ok": True, "result": result}
                if isinstance(result, tuple):
                    answer = {"ok": True, "result": result[0], "description": result[1]}
            except ApiError as e:
                code = e.code
                answer = {"ok": False, "error_code": e.code, "description": e.description}
                if e.retry_after is not None:
                    answer["parameters"] = {"retry_after": e.retry_after}
                    headers["Retry-After"] = str(e.retry_after)
                if e.code == 502:
                    answer, content_type = BAD_GATEWAY, "text/html"
            call["status"] = code
            call["response"] = answer if isinstance(answer, dict) else answer.decode()
            state.cv.notify_all()
        self.send_json(code, answer, headers, content_type)

    @staticmethod
    def fault_error(fault):
        status = fault["status"]
        if status == 429:
            return ApiError(429, fault["description"] or "Too Many Requests: retry after %d" % fault["retry_after"],
                            retry_after=fault["retry_after"])
        return ApiError(status, fault["description"] or DEFAULT_FAULT_TEXT.get(status, "Bad Gateway"))

    def control(self, url, body):
        state = STATE
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        try:
            value = json.loads(body) if body else {}
        except ValueError:
            return self.send_json(400, {"error": "the body is not JSON"})
        with state.cv:
            try:
                if url.path == "/_test/reset" and self.command == "POST":
                    state.reset()
                    code, out = 200, {"ok": True}
                elif self.command == "POST" and url.path in telegram_control.POST:
                    if not isinstance(value, dict):
                        raise telegram_control.ControlError("the body must be a JSON object")
                    code, out = telegram_control.POST[url.path](state, value)
                elif self.command == "GET" and url.path in telegram_control.GET:
                    code, out = telegram_control.GET[url.path](state, query)
                else:
                    code, out = 404, {"error": "no control endpoint %s %s" % (self.command, url.path)}
            except telegram_control.ControlError as e:
                code, out = 400, {"error": str(e)}
        self.send_json(code, out)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError, socket.timeout, OSError)):
            return
        super().handle_error(request, client_address)


def next_delivery(state):
    """The webhook and the first update to POST to it, or None; updates of types it does not want go."""
    hook = state.webhook
    if hook is None:
        return None
    kinds = hook.get("allowed_updates") or []
    for u in state.updates:
        if u["confirmed"]:
            continue
        if (u["type"] not in kinds) if kinds else u["type"] in ("chat_member", "message_reaction",
                                                                 "message_reaction_count"):
            u["confirmed"] = True
            continue
        return hook, u
    return None


def post_update(url, secret, update):
    """(HTTP status or None, error message or None) for one webhook POST."""
    headers = {"Content-Type": "application/json"}
    if secret:
        headers["X-Telegram-Bot-Api-Secret-Token"] = secret
    req = urllib.request.Request(url, data=json.dumps(update).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            resp.read()
            return resp.status, None
    except urllib.error.HTTPError as e:
        return e.code, "Wrong response from the webhook: %d %s" % (e.code, e.reason)
    except (socket.timeout, TimeoutError):
        return None, "Read timeout expired"
    except urllib.error.URLError as e:
        refused = isinstance(e.reason, ConnectionRefusedError)
        return None, "Connection refused" if refused else str(e.reason)
    except OSError as e:
        return None, str(e)


def deliver_forever(state, max_attempts):
    while True:
        with state.cv:
            job = next_delivery(state)
            while job is None:
                state.cv.wait(1)
                job = next_delivery(state)
            hook, u = job
            url, secret, update = hook["url"], hook["secret_token"], u["update"]
        status, error = post_update(url, secret, update)
        ok = status is not None and 200 <= status < 300
        with state.cv:
            n = u["attempts"] = u.get("attempts", 0) + 1
            state.deliveries.append({"update_id": u["update_id"], "attempt": n, "status": status,
                                     "error": error, "time": time.time()})
            if ok:
                u["confirmed"] = True
            elif state.webhook is hook:
                state.webhook_error = (int(time.time()), error or "Wrong response from the webhook: %s" % status)
                if n >= max_attempts:
                    u["confirmed"] = u["given_up"] = True
            state.cv.notify_all()
        if not ok:
            time.sleep(min(0.1 * 2 ** (n - 1), 2.0))


def main():
    global STATE
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--token", default="123456:TEST-TOKEN")
    ap.add_argument("--bot-username", default="sessionturn_test_bot")
    ap.add_argument("--privacy-mode", action="store_true")
    ap.add_argument("--webhook-attempts", type=int, default=5)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    STATE = State(args.token, args.bot_username, args.privacy_mode)
    srv = Server(("127.0.0.1", args.port), Handler)
    threading.Thread(target=deliver_forever, args=(STATE, args.webhook_attempts), daemon=True).start()
    port = srv.server_address[1]
    tmp = os.path.join(args.dir, "ready.json.tmp")
    with open(tmp, "w") as f:
        json.dump({"port": port}, f)
    os.replace(tmp, os.path.join(args.dir, "ready.json"))
    print("READY %d" % port, flush=True)
    try:
        srv.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
