#!/usr/bin/python3
"""A faithful fake of Slack (Web API, Socket Mode, Events API over HTTP) for sessionturn's tests: standard library
only, loopback only. Helper modules: slack_state (workspace and payloads), slack_methods (Web API), slack_blocks
(Block Kit checks), slack_socket (Socket Mode server, HTTP deliveries, retries), slack_control (/_test/).

Usage: slack_api.py --dir DIR [--bot-token xoxb-1-TEST-BOT-TOKEN] [--app-token xapp-1-TEST-APP-TOKEN]
         [--signing-secret 8f742231b10e8888abcd99yyyzzz85a5] [--team T0TEAM] [--bot-user U0BOT] [--bot-id B0BOT]
         [--bot-name sessionturn] [--app-id A0APP] [--events-url URL] [--ack-timeout 3] [--ping-interval 10]
         [--max-connections 10] [--port 0]
Once listening on 127.0.0.1 it writes DIR/ready.json {"port": N} (atomically) and prints "READY <port>". It never
prints or writes a token or the signing secret, and records only the kind of token a call used.

The workspace starts with users U0ANN "ann" and U0BOB "bob" (and the bot user), the public channel C0GENERAL
"general" (ann, bob and the bot are members) and the IMs D0ANN (with ann) and D0BOB (with bob).

Web API: GET or POST /api/<method>. Parameters from the query, an application/x-www-form-urlencoded body (the token
may be the `token` field) or an application/json body (the token only in `Authorization: Bearer`; a JSON body
without "; charset=utf-8" is answered with "warning":"missing_charset" as Slack does). Answers are HTTP 200
{"ok":true,...} or {"ok":false,"error":"..."}; unknown_method (with req_method) for other methods; not_authed
(no token), invalid_auth (an unknown token), not_allowed_token_type (the app token on a bot method or the reverse).
  auth.test              url, team, user, team_id, user_id (the bot user), bot_id, is_enterprise_install
  apps.connections.open  app token in the Authorization header only -> url "ws://127.0.0.1:PORT/link/?ticket=
                         <uuid>&app_id=A0APP"; a ticket opens one connection
  chat.postMessage       channel (a user id means the bot's IM with that user; channel_not_found;
                         not_in_channel where the bot is no member), text (at most
                         40,000 characters: msg_too_long), blocks (array or its JSON text; invalid_blocks_format,
                         or invalid_blocks with "errors" and response_metadata.messages, see slack_blocks.py:
                         50 blocks, section text 1-3000, button text 1-75, value 2000, action_id 255 and unique in
                         its block), neither: no_text; thread_ts (a reply's ts threads under its parent; unknown:
                         invalid_thread_ts), reply_broadcast (subtype thread_broadcast); unfurl_* ignored ->
                         {channel, ts, message{user, type, ts, bot_id, app_id, text, team, bot_profile, blocks?,
                         thread_ts?, parent_user_id?}}. A reply in a thread clears its assistant status.
  chat.update            channel, ts (message_not_found; cant_update_message unless the bot's), text, blocks: as
                         docs.slack.dev says, blocks left out are kept only when text is left out too, new text
                         without blocks drops them, blocks [] drop them; "edited" unless updated through blocks ->
                         {channel, ts, text, message}
  chat.delete            channel, ts (message_not_found, cant_delete_message) -> {channel, ts}; a parent with
                         replies stays as a tombstone
  chat.postEphemeral     channel, user (user_not_found, user_not_in_channel), text, blocks, thread_ts ->
                         {message_ts}; kept apart (GET /_test/ephemerals), never in the history
  conversations.replies  channel, ts (thread_not_found), limit (1-1000, default 1000), cursor (invalid_cursor),
                         oldest, latest, inclusive -> {messages, has_more, response_metadata.next_cursor}: oldest
                         first, the parent leading every page (as Slack does) with reply_count, reply_users,
                         latest_reply; replies carry thread_ts and parent_user_id; a reply's ts answers that
                         message alone
  conversations.info     channel -> {channel{id, name, is_im, is_channel, is_group, is_mpim, is_private, user?}}
  users.info             user (user_not_found) -> {user{id, team_id, name, real_name, is_bot, profile{
                         display_name, real_name, ...}}}
  assistant.threads.setStatus  channel_id, thread_ts (the thread's parent, else invalid_thread_ts), status ("" clears;
                         missing fields: invalid_arguments) -> {}
Faults (POST /_test/fault) answer ratelimited (HTTP 429, Retry-After: N, {"ok":false,"error":"ratelimited"}),
an error of the test's choice (with needed/provided, as missing_scope has), HTTP 500 (an HTML page) or drop the
connection unanswered. Every call is recorded: {seq, method, params (never a token), token: bot|app|none|invalid,
http_method, content_type, status, ok, error, response, time}.

Socket Mode: a WebSocket at /link/?ticket=... (an unknown ticket: 401; a used one: 410). After the upgrade:
{"type":"hello","num_connections":N,"debug_info":{"host":"applink-fake-I","build_number":1,
"approximate_connection_time":3600},"connection_info":{"app_id":"A0APP"}}. Envelopes: {"envelope_id","type":
"events_api"|"interactive"|"slash_commands","payload","accepts_response_payload" (true for slash commands),
"retry_attempt","retry_reason" (events_api only)}. The app acks with {"envelope_id":...,"payload"?}. An events_api
envelope not acked within --ack-timeout seconds is delivered again as a new envelope (new envelope_id, same payload
and event_id, retry_attempt + 1, retry_reason "timeout"), at most 3 times; interactive and slash command envelopes
are not retried (Slack shows the user an error). Each envelope goes to one open connection, round robin,
preferring connections not told to disconnect; with none open it waits. The fake pings every --ping-interval
seconds (0: never; the default, 10, stays inside @slack/socket-mode's 30 s watchdog), answers the app's pings, and
records pongs with their latency. More than --max-connections open: the newest is told too_many_websockets.
Events API over HTTP: with an events_url (--events-url or /_test/config), what would go over Socket Mode is POSTed
there instead: JSON event_callback; interactive payloads as application/x-www-form-urlencoded payload=<json>;
slash commands as form fields (interactivity_url and commands_url may differ). Signed with X-Slack-Signature
"v0=" + hex HMAC-SHA256(secret, "v0:" + timestamp + ":" + body) and X-Slack-Request-Timestamp; /_test/config
{"signing"} chooses valid, forged (another secret), stale (10 minutes old), missing or bad_format ("sha256=...").
An event not answered 2xx within --ack-timeout seconds is retried (at most 3 times, after 0.1, 0.5, 1 s where
Slack waits up to 5 minutes) with X-Slack-Retry-Num and X-Slack-Retry-Reason (http_timeout, http_error,
connection_failed), unless the answer had X-Slack-No-Retry: 1.

What users do (the events Slack sends for it, event ids "Ev...", each its own job):
  message        `message` (channel, channel_type im|channel|group|mpim, user, text, ts, event_ts, team,
                 client_msg_id, blocks: rich_text, thread_ts?, parent_user_id?, files? with subtype file_share)
                 and, for a non-IM message mentioning <@BOT>, also `app_mention` (same ts, its own event_id).
                 The bot's own posts come back as `message` events too (bot_id, app_id, bot_profile), as on Slack,
                 unless /_test/config {"echo_bot_messages": false}; so do its edits and deletions.
  edit / delete  `message` subtype message_changed (hidden, message with the new text and edited,
                 previous_message) / message_deleted (hidden, deleted_ts, previous_message)
  press          interactive block_actions (user{id, username, name, team_id}, team, channel{id, name},
                 container{type message, message_ts, channel_id, is_ephemeral, thread_ts?}, message, state,
                 actions[{type button, action_id, block_id, value, text, action_ts}], trigger_id, response_url,
                 api_app_id, token). POSTs to response_url (replace_original, delete_original, response_type)
                 take effect and are recorded.
  command        slash_commands (token, team_id, team_domain, channel_id, channel_name, user_id, user_name,
                 command, text, api_app_id, is_enterprise_install, response_url, trigger_id); an ack payload with
                 text is shown to the user (an ephemeral).

Control API under /_test/ (no token; JSON in and out; a test's mistake is 400 {"error": "..."}):
  POST /_test/users     {id, name, real_name?, display_name?, is_bot?, bot_id?} -> the user
  POST /_test/channels  {id, type: im|channel|group|mpim, name?, user (im), members? (every user known then),
                        bot_member? (true)}; a user posting in a public channel joins it
  POST /_test/message   {channel, user, text, thread_ts?, files?: [{name, preview?, mimetype?, size?}],
                        bot_id?, subtype?, username?} -> {ts, event_ids, message}
  POST /_test/edit      {channel, ts, text} -> {event_ids, message};  POST /_test/delete {channel, ts}
  POST /_test/press     {channel, ts, user, value? | action_id? | label?} -> {job, payload}
  POST /_test/command   {channel, user, command: "/sessionturn", text} -> {job, payload}
  POST /_test/fault     {method ("*" any), kind: ratelimited|error|http500|drop, count? (1; -1 forever),
                        retry_after? (1), error?, needed?, provided?} or {method, clear: true}
  POST /_test/socket    {action: disconnect, reason?: refresh_requested|warning|link_disabled|too_many_websockets,
                        close_after? (s; 5, none for warning)} | {action: drop} | {action: close, code?} |
                        {action: mute | unmute}; to every open connection or {connection: i}
  POST /_test/config    {events_url?, interactivity_url?, commands_url?, signing?, echo_bot_messages?,
                        ack_timeout?, max_retries?} -> the config
  POST /_test/url_verification {url?, signing?} -> {status, answer, challenge, echoed}: sends the challenge now
  POST /_test/wait      waits (timeout? 10 s; 408 with what matched so far) until there are count? (1) of:
                        {method, channel?, text_contains?, ok?, error?}   finished Web API calls
                        {connections: N}                                  open connections that got hello
                        {closed_connections: N}
                        {acked: event_id | envelope_id | job}            an ack of it
                        {what: acks | deliveries | events | ephemerals | statuses, event_type?, type?, state?,
                         transport?, retry_attempt?, event_id?, channel?}
                        {channel?, thread_ts?, text_contains?, updates?}  (the default) bot messages
                        -> {match, matches}
  GET  /_test/calls[?method=M&since=SEQ]  /_test/messages?channel=C[&thread_ts=T]  (every message, bot's and
       users': seq, channel, ts, thread_ts, user, bot_id, by_bot, text, blocks, files, edited, updates, deleted,
       reply_count, message)  /_test/events (jobs: id, type, event_id, event_type, state pending|inflight|posting|
       acked|given_up, attempts, deliveries, response)  /_test/deliveries (seq, job, transport socket|http,
       envelope_id, connection, retry_attempt, retry_reason, acked, ack_latency; http: url, signing, status,
       answer, error)  /_test/acks (envelope_id, connection, payload, latency, late, known, event_id)
       /_test/connections (index, status open|closing|closed, hello_sent, envelopes, acks, pings_sent, pongs,
       pong_latencies, client_pings, closed_by, close_code, draining, muted)  /_test/refusals  /_test/ephemerals
       /_test/statuses  /_test/responses  /_test/verifications  /_test/users  /_test/channels
"""

import argparse
import json
import os
import secrets
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import slack_control  # noqa: E402
import slack_socket  # noqa: E402
from slack_methods import METHODS  # noqa: E402
from slack_state import ApiError, State  # noqa: E402

STATE = None
MAX_BODY = 8 << 20
SERVER_ERROR = (b"<html><head><title>500 Internal Server Error</title></head><body><h1>Internal Server Error</h1>"
                b"</body></html>\n")


def parse_body(content_type, body):
    kind = content_type.split(";", 1)[0].strip().lower()
    if not body:
        return {}
    if kind == "application/json":
        try:
            value = json.loads(body)
        except ValueError:
            raise ApiError("invalid_json")
        if not isinstance(value, dict):
            raise ApiError("invalid_json")
        return value
    if kind == "application/x-www-form-urlencoded":
        return {k: v[-1] for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace"),
                                                           keep_blank_values=True).items()}
    raise ApiError("invalid_form_data")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "Apache"

    def log_message(self, fmt, *args):  # quiet: request lines could hold a token
        pass

    def setup(self):
        super().setup()
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def send_json(self, code, value, headers=None, content_type="application/json; charset=utf-8"):
        data = value if isinstance(value, bytes) else json.dumps(value, ensure_ascii=False).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True

    def do_any(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path in ("/link", "/link/"):
            return self.socket_mode(url)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.close_connection = True
            return self.send_json(413, {"ok": False, "error": "request_too_large"})
        body = self.rfile.read(length) if length else b""
        if url.path.startswith("/_test/"):
            return self.control(url, body)
        if url.path.startswith("/api/"):
            return self.web_api(url, body)
        if url.path.startswith(("/actions/", "/commands/")) and self.command == "POST":
            try:
                value = json.loads(body or b"{}")
            except ValueError:
                value = {"text": body.decode("utf-8", "replace")}
            with STATE.cv:
                code, out = slack_control.respond(STATE, url.path.lstrip("/"), value)
            return self.send_json(code, out)
        self.send_json(404, {"ok": False, "error": "not_found"})

    do_GET = do_POST = do_any

    # ---- the Web API -------------------------------------------------------------------------------------------

    def web_api(self, url, body):
        state = STATE
        method = url.path[len("/api/"):]
        ctype = self.headers.get("Content-Type", "")
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        error = None
        try:
            params.update(parse_body(ctype, body))
        except ApiError as e:
            error = e
        auth = self.headers.get("Authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        body_token = params.pop("token", None)
        if token is None and not ctype.lower().startswith("application/json") and method != "apps.connections.open":
            token = body_token
        o = state.opts
        kind = "none" if not token else "bot" if token == o.bot_token else "app" if token == o.app_token else "invalid"
        headers = {}
        with state.cv:
            call = {"seq": len(state.calls) + 1, "method": method, "params": params, "token": kind,
                    "http_method": self.command, "content_type": ctype, "status": None, "ok": None, "error": None,
                    "response": None, "time": time.time()}
            state.calls.append(call)
            entry = METHODS.get(method)
            fault = None
            try:
                if entry is None:
                    raise ApiError("unknown_method", req_method=method)
                if kind == "none":
                    raise ApiError("not_authed")
                if kind == "invalid":
                    raise ApiError("invalid_auth")
                if kind != entry[1]:
                    raise ApiError("not_allowed_token_type")
                if error is not None:
                    raise error
                fault = slack_control.take_fault(state, method)
                if fault is not None and fault["kind"] != "drop":
                    raise self.fault_error(fault)
                if fault is None:
                    code, answer = 200, dict({"ok": True}, **entry[0](state, params))
                    if ctype.split(";")[0].strip().lower() == "application/json" and "charset" not in ctype.lower():
                        answer["warning"] = "missing_charset"
                        answer.setdefault("response_metadata", {}).setdefault("warnings", []).append("missing_charset")
            except _Http500:
                code, answer = 500, SERVER_ERROR
            except ApiError as e:
                code, answer = e.status, dict({"ok": False, "error": e.error}, **e.extra)
                if e.error == "ratelimited":
                    headers["Retry-After"] = str(e.extra.pop("retry_after"))
                    answer.pop("retry_after", None)
            if fault is not None and fault["kind"] == "drop":
                call.update({"status": 0, "error": "dropped"})
            else:
                ok = isinstance(answer, dict) and answer.get("ok") is True
                call.update({"status": code, "ok": ok, "response": answer if isinstance(answer, dict) else None,
                             "error": None if ok else answer.get("error") if isinstance(answer, dict) else "http500"})
            state.cv.notify_all()
        if fault is not None and fault["kind"] == "drop":
            time.sleep(0.1)
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if isinstance(answer, bytes):
            return self.send_json(code, answer, content_type="text/html")
        self.send_json(code, answer, headers)

    @staticmethod
    def fault_error(fault):
        if fault["kind"] == "ratelimited":
            return ApiError("ratelimited", status=429, retry_after=fault["retry_after"])
        if fault["kind"] == "http500":
            return _Http500()
        return ApiError(fault["error"], **fault["extra"])

    # ---- Socket Mode ---------------------------------------------------------------------------------------------

    def socket_mode(self, url):
        state = STATE
        ticket = urllib.parse.parse_qs(url.query).get("ticket", [""])[0]
        upgrade = self.headers.get("Upgrade", "").lower() == "websocket"
        key = self.headers.get("Sec-WebSocket-Key")
        with state.cv:
            known = state.tickets.get(ticket)
            refusal = None
            if not upgrade or not key or self.headers.get("Sec-WebSocket-Version") != "13":
                refusal = (400, "a WebSocket upgrade is required")
            elif known is None:
                refusal = (401, "invalid_ticket")
            elif known["used"]:
                refusal = (410, "ticket_already_used")
            else:
                known["used"] = True
            if refusal is not None:
                state.refusals.append({"status": refusal[0], "reason": refusal[1], "time": time.time()})
                state.cv.notify_all()
        if refusal is not None:
            self.close_connection = True
            return self.send_json(refusal[0], {"ok": False, "error": refusal[1]})
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", slack_socket.accept_key(key))
        self.end_headers()
        with state.cv:
            conn = slack_socket.Connection(state, self.connection, self.rfile, ticket)
        conn.run()
        self.close_connection = True

    # ---- /_test/ ---------------------------------------------------------------------------------------------

    def control(self, url, body):
        state = STATE
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        try:
            value = json.loads(body) if body else {}
        except ValueError:
            return self.send_json(400, {"error": "the body is not JSON"})
        if self.command == "POST" and not isinstance(value, dict):
            return self.send_json(400, {"error": "the body must be a JSON object"})
        if url.path == "/_test/url_verification" and self.command == "POST":
            return self.url_verification(value)
        with state.cv:
            try:
                if self.command == "POST" and url.path in slack_control.POST:
                    code, out = slack_control.POST[url.path](state, value)
                elif self.command == "GET" and url.path in slack_control.GET:
                    code, out = slack_control.GET[url.path](state, query)
                elif self.command == "GET" and url.path == "/_test/refusals":
                    code, out = 200, state.refusals
                else:
                    code, out = 404, {"error": "no control endpoint %s %s" % (self.command, url.path)}
            except slack_control.ControlError as e:
                code, out = 400, {"error": str(e)}
            out = json.loads(json.dumps(out))  # a snapshot taken under the lock
        self.send_json(code, out)

    def url_verification(self, value):
        state = STATE
        with state.cv:
            target = value.get("url") or state.config.get("events_url")
            mode = value.get("signing") or state.config["signing"]
        if not target or mode not in slack_control.SIGNING:
            return self.send_json(400, {"error": "url_verification needs an events_url and a known signing"})
        challenge = secrets.token_urlsafe(24)
        body = json.dumps({"token": state.opts.verification_token, "challenge": challenge,
                           "type": "url_verification"}).encode()
        headers = {"Content-Type": "application/json", "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)"}
        headers.update(slack_socket.signed_headers(state.opts.signing_secret, mode, body))
        status, answer, failure, _ = slack_socket.post(target, body, headers, state.config["ack_timeout"])
        echoed = answer.strip() == challenge
        try:
            echoed = echoed or json.loads(answer).get("challenge") == challenge
        except (ValueError, AttributeError):
            pass
        out = {"url": target, "signing": mode, "status": status, "answer": answer, "error": failure,
               "challenge": challenge, "echoed": echoed, "time": time.time()}
        with state.cv:
            state.verifications.append(out)
            state.cv.notify_all()
        self.send_json(200, out)


class _Http500(ApiError):
    def __init__(self):
        super().__init__("http500", status=500)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


def main():
    global STATE
    ap = argparse.ArgumentParser(description="A fake of Slack's Web API, Socket Mode and Events API.")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--bot-token", default="xoxb-1-TEST-BOT-TOKEN")
    ap.add_argument("--app-token", default="xapp-1-TEST-APP-TOKEN")
    ap.add_argument("--signing-secret", default="8f742231b10e8888abcd99yyyzzz85a5")
    ap.add_argument("--verification-token", default="fakeVerificationToken00")
    ap.add_argument("--team", default="T0TEAM")
    ap.add_argument("--team-domain", default="fake-team")
    ap.add_argument("--bot-user", default="U0BOT")
    ap.add_argument("--bot-id", default="B0BOT")
    ap.add_argument("--bot-name", default="sessionturn")
    ap.add_argument("--app-id", default="A0APP")
    ap.add_argument("--events-url", default=None)
    ap.add_argument("--ack-timeout", type=float, default=3.0)
    ap.add_argument("--ping-interval", type=float, default=10.0)
    ap.add_argument("--max-connections", type=int, default=10)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    srv = Server(("127.0.0.1", args.port), Handler)
    args.port = srv.server_address[1]
    STATE = State(args)
    threading.Thread(target=slack_socket.delivery_loop, args=(STATE,), daemon=True).start()
    tmp = os.path.join(args.dir, "ready.json.tmp")
    with open(tmp, "w") as f:
        json.dump({"port": args.port}, f)
    os.replace(tmp, os.path.join(args.dir, "ready.json"))
    print("READY %d" % args.port, flush=True)
    try:
        srv.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
