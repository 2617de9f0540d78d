"""The /_test/ control API of the Slack fake (slack_api.py): what users do (post, edit, delete, press a button, run
a slash command), the workspace, faults, the Socket Mode connections, and what tests read back or wait for. Each
function takes (state, body or query) with state.cv held and returns (status, JSON value); a ControlError is the
test's own mistake, answered 400 with its message."""

import copy
import time

from slack_blocks import buttons, rich_text
from slack_methods import METHODS
from slack_state import ApiError

FAULT_KINDS = ("ratelimited", "error", "http500", "drop")
SIGNING = ("valid", "forged", "stale", "missing", "bad_format")
DISCONNECT_REASONS = ("refresh_requested", "warning", "link_disabled", "too_many_websockets")


class ControlError(Exception):
    pass


def _channel(state, cid):
    if cid not in state.channels:
        raise ControlError("no channel %r (POST /_test/channels first)" % cid)
    return state.channels[cid]


def _user(state, uid):
    if uid not in state.users:
        raise ControlError("no user %r (POST /_test/users first)" % uid)
    return state.users[uid]


def _message(state, body):
    ch = _channel(state, body.get("channel"))
    rec = ch.messages.get(body.get("ts"))
    if rec is None or rec.deleted:
        raise ControlError("no message %r in %s" % (body.get("ts"), ch.id))
    return ch, rec


def add_user(state, body):
    if not body.get("id") or not body.get("name"):
        raise ControlError("a user needs an id and a name")
    return 200, state.add_user(body)


def add_channel(state, body):
    if not body.get("id") or body.get("type") not in ("im", "channel", "group", "mpim"):
        raise ControlError("a channel needs an id and a type: im, channel, group or mpim")
    try:
        ch = state.add_channel(body)
    except ValueError as e:
        raise ControlError(str(e))
    return 200, dict(ch.api_info(), members=ch.members)


def post(state, body):
    ch = _channel(state, body.get("channel"))
    if body.get("bot_id"):
        if body.get("user"):
            _user(state, body["user"])
    else:
        _user(state, body.get("user"))
        if body["user"] not in ch.members:
            if ch.type != "channel":
                raise ControlError("%s is not a member of %s" % (body["user"], ch.id))
            ch.members.append(body["user"])  # anyone may join a public channel
    if not body.get("text") and not body.get("files"):
        raise ControlError("a message needs text or files")
    msg = state.user_message(ch, body)
    if body.get("thread_ts"):
        root = state.thread_root(ch, body["thread_ts"])
        if root is None:
            raise ControlError("no message %r in %s to reply to" % (body["thread_ts"], ch.id))
        msg["thread_ts"] = root.ts
        msg["parent_user_id"] = root.msg.get("user")
    rec = state.store(ch, msg, False)
    ids = state.deliver_message(ch, rec)
    return 200, {"ts": rec.ts, "event_ids": ids, "message": copy.deepcopy(rec.msg)}


def edit(state, body):
    ch, rec = _message(state, body)
    if rec.by_bot or not body.get("text"):
        raise ControlError("an edit needs text and a user's message")
    previous = copy.deepcopy(rec.msg)
    rec.msg["text"] = body["text"]
    rec.msg["blocks"] = rich_text(body["text"])
    rec.msg["edited"] = {"user": rec.msg.get("user"), "ts": state.next_ts()}
    rec.updates += 1
    ids = state.deliver_change(ch, rec, previous)
    return 200, {"event_ids": ids, "message": copy.deepcopy(rec.msg)}


def delete(state, body):
    ch, rec = _message(state, body)
    rec.deleted = True
    state.cv.notify_all()
    return 200, {"event_ids": state.deliver_deletion(ch, rec)}


def _channel_name(ch):
    return {"im": "directmessage", "mpim": "mpdm-" + ch.info["name"]}.get(ch.type, ch.info["name"])


def press(state, body):
    ch, rec = _message(state, body)
    user = _user(state, body.get("user"))
    if not rec.by_bot:
        raise ControlError("message %s is not the bot's" % rec.ts)
    found = [(bid, b) for bid, b in buttons(rec.msg.get("blocks"))
             if ("value" not in body or b.get("value") == body["value"])
             and ("action_id" not in body or b.get("action_id") == body["action_id"])
             and ("label" not in body or (b.get("text") or {}).get("text") == body["label"])]
    if not found:
        raise ControlError("message %s has no button matching %s" % (rec.ts, {k: body[k] for k in (
            "value", "action_id", "label") if k in body}))
    block_id, button = found[0]
    action = {"action_id": button["action_id"], "block_id": block_id, "text": copy.deepcopy(button["text"]),
              "type": "button", "action_ts": "%.6f" % time.time()}
    for k in ("value", "style", "url"):
        if k in button:
            action[k] = button[k]
    container = {"type": "message", "message_ts": rec.ts, "channel_id": ch.id, "is_ephemeral": False}
    if rec.thread_ts:
        container["thread_ts"] = rec.thread_ts
    url = state.response_url("actions")
    state.response_urls[url.split("/", 3)[3]] = {"channel": ch.id, "ts": rec.ts, "user": user["id"],
                                                "thread_ts": rec.thread_ts}
    payload = {"type": "block_actions", "user": state.user_brief(user["id"]), "api_app_id": state.opts.app_id,
               "token": state.opts.verification_token, "container": container, "trigger_id": state.trigger_id(),
               "team": {"id": state.opts.team, "domain": state.opts.team_domain}, "enterprise": None,
               "is_enterprise_install": False, "channel": {"id": ch.id, "name": _channel_name(ch)},
               "message": copy.deepcopy(rec.msg), "state": {"values": {}}, "response_url": url, "actions": [action]}
    job = state.enqueue("interactive", payload, event_type="block_actions")
    return 200, {"job": job["id"], "payload": payload}


def command(state, body):
    ch = _channel(state, body.get("channel"))
    user = _user(state, body.get("user"))
    cmd = body.get("command") or ""
    if not cmd.startswith("/"):
        raise ControlError("a command starts with /")
    url = state.response_url("commands")
    state.response_urls[url.split("/", 3)[3]] = {"channel": ch.id, "ts": None, "user": user["id"], "thread_ts": None}
    payload = {"token": state.opts.verification_token, "team_id": state.opts.team,
               "team_domain": state.opts.team_domain, "channel_id": ch.id, "channel_name": _channel_name(ch),
               "user_id": user["id"], "user_name": user["name"], "command": cmd, "text": body.get("text", ""),
               "api_app_id": state.opts.app_id, "is_enterprise_install": "false", "response_url": url,
               "trigger_id": state.trigger_id()}
    job = state.enqueue("slash_commands", payload, event_type=cmd)
    return 200, {"job": job["id"], "payload": payload}


def fault(state, body):
    method = body.get("method")
    if method not in METHODS and method != "*":
        raise ControlError("unknown method %r (one of %s, or *)" % (method, ", ".join(sorted(METHODS))))
    if body.get("clear"):
        state.faults[:] = [f for f in state.faults if f["method"] != method]
        return 200, {"faults": state.faults}
    if body.get("kind") not in FAULT_KINDS:
        raise ControlError("kind must be one of %s" % ", ".join(FAULT_KINDS))
    f = {"method": method, "kind": body["kind"], "count": int(body.get("count", 1)),
         "retry_after": int(body.get("retry_after", 1)), "error": body.get("error") or "internal_error",
         "extra": {k: body[k] for k in ("needed", "provided", "warning") if k in body}}
    state.faults.append(f)
    return 200, f


def take_fault(state, method):
    for f in state.faults:
        if f["method"] in (method, "*") and f["count"] != 0:
            if f["count"] > 0:
                f["count"] -= 1
            return f
    return None


def socket_action(state, body):
    action = body.get("action")
    conns = [c for c in state.connections if c.status != "closed"]
    if body.get("connection") is not None:
        conns = [c for c in conns if c.index == body["connection"]]
    if not conns:
        raise ControlError("no open Socket Mode connection%s" % (
            " %s" % body["connection"] if body.get("connection") is not None else ""))
    for c in conns:
        if action == "disconnect":
            reason = body.get("reason", "refresh_requested")
            if reason not in DISCONNECT_REASONS:
                raise ControlError("reason must be one of %s" % ", ".join(DISCONNECT_REASONS))
            c.disconnect(reason, body.get("close_after", None if reason == "warning" else 5))
        elif action == "drop":
            c.drop("server_drop")
        elif action == "close":
            c.send_close(int(body.get("code", 1000)), body.get("reason", ""))
        elif action in ("mute", "unmute"):
            c.muted = action == "mute"
        else:
            raise ControlError("action must be disconnect, drop, close, mute or unmute")
    state.cv.notify_all()
    return 200, {"connections": [c.index for c in conns]}


def config(state, body):
    if "signing" in body and body["signing"] not in SIGNING:
        raise ControlError("signing must be one of %s" % ", ".join(SIGNING))
    for k in ("events_url", "interactivity_url", "commands_url", "signing", "echo_bot_messages", "ack_timeout",
              "max_retries"):
        if k in body:
            state.config[k] = body[k]
    state.cv.notify_all()
    return 200, state.config


def respond(state, path, body):
    """A POST to a response_url: replace_original, delete_original, or a new message (ephemeral by default)."""
    target = state.response_urls.get(path)
    if target is None:
        return 404, {"ok": False, "error": "expired_url"}
    state.responses.append({"path": path, "body": body, "time": time.time()})
    ch = state.channels[target["channel"]]
    params = {"channel": ch.id, "ts": target["ts"], "text": body.get("text"), "blocks": body.get("blocks"),
              "thread_ts": body.get("thread_ts") or target["thread_ts"]}
    params = {k: v for k, v in params.items() if v is not None}
    try:
        if body.get("delete_original") and target["ts"]:
            METHODS["chat.delete"][0](state, params)
        elif body.get("replace_original") and target["ts"]:
            METHODS["chat.update"][0](state, params)
        elif body.get("response_type") == "in_channel":
            METHODS["chat.postMessage"][0](state, params)
        else:
            state.ephemerals.append({"channel": ch.id, "user": target["user"], "text": body.get("text"),
                                     "blocks": body.get("blocks"), "via": "response_url", "time": time.time()})
    except ApiError as e:
        return 200, {"ok": False, "error": e.error}
    state.cv.notify_all()
    return 200, {"ok": True}


# ---- reading back and waiting ----------------------------------------------------------------------------------

def messages(state, query):
    ch = _channel(state, query.get("channel"))
    thread = query.get("thread_ts")
    out = [r.view() for r in ch.messages.values() if not thread or r.ts == thread or r.thread_ts == thread]
    return 200, sorted(out, key=lambda v: v["seq"])


def calls(state, query):
    method, since = query.get("method"), int(query.get("since") or 0)
    return 200, [c for c in state.calls if c["seq"] > since and (not method or c["method"] == method)]


def jobs(state, query):
    return 200, [{k: v for k, v in j.items() if k != "deadline"} for j in state.jobs]


def _text_of(call):
    return str(call["params"].get("text") or "")


def _matches(state, body):
    """What /_test/wait counts: (found, how many are wanted)."""
    count = int(body.get("count", 1))
    channel, needle = body.get("channel"), body.get("text_contains")
    if body.get("method"):
        found = [c for c in state.calls if c["method"] == body["method"] and c["status"] is not None
                 and (channel is None or channel in (c["params"].get("channel"), c["params"].get("channel_id")))
                 and (needle is None or needle in _text_of(c))
                 and ("ok" not in body or c["ok"] == body["ok"])
                 and ("error" not in body or c["error"] == body["error"])]
        return found, count
    if "connections" in body:
        return [c.view() for c in state.connections if c.usable()], int(body["connections"])
    if "closed_connections" in body:
        return [c.view() for c in state.connections if c.status == "closed"], int(body["closed_connections"])
    if "acked" in body:
        return [a for a in state.acks if body["acked"] in (a["envelope_id"], a.get("event_id"))
                or (isinstance(body["acked"], int) and a["job"] == body["acked"])], 1
    what = body.get("what", "bot_messages")
    if what == "acks":
        kind = body.get("event_type")
        return [a for a in state.acks if kind is None
                or (a["job"] and state.jobs[a["job"] - 1].get("event_type") == kind)], count
    if what == "deliveries":
        return [d for d in state.deliveries if all(body[k] == d.get(k) for k in (
            "event_type", "type", "transport", "retry_attempt", "event_id") if k in body)], count
    if what == "events":
        return [j for j in jobs(state, {})[1] if all(body[k] == j.get(k) for k in (
            "event_type", "type", "state", "event_id") if k in body)], count
    if what == "ephemerals":
        return [e for e in state.ephemerals if channel in (None, e["channel"])
                and (needle is None or needle in (e.get("text") or ""))], count
    if what == "statuses":
        return [s for s in state.statuses.values() if channel in (None, s["channel_id"])], count
    if what != "bot_messages":
        raise ControlError("what must be bot_messages, acks, deliveries, events, ephemerals or statuses")
    found = []
    for ch in state.channels.values():
        if channel is not None and ch.id != channel:
            continue
        for rec in ch.messages.values():
            if rec.by_bot and (needle is None or needle in (rec.msg.get("text") or "")) and \
                    body.get("thread_ts") in (None, rec.thread_ts) and rec.updates >= int(body.get("updates", 0)):
                found.append(rec.view())
    return sorted(found, key=lambda v: v["seq"]), count


def wait(state, body):
    deadline = time.monotonic() + float(body.get("timeout", 10))
    while True:
        found, count = _matches(state, body)
        if count < 1:
            raise ControlError("count must be 1 or more")
        if len(found) >= count:
            return 200, {"match": found[count - 1], "matches": found}
        left = deadline - time.monotonic()
        if left <= 0:
            return 408, {"error": "nothing matched %s in time" % body, "matches": found}
        state.cv.wait(min(left, 0.5))


POST = {"/_test/users": add_user, "/_test/channels": add_channel, "/_test/message": post, "/_test/edit": edit,
        "/_test/delete": delete, "/_test/press": press, "/_test/command": command, "/_test/fault": fault,
        "/_test/socket": socket_action, "/_test/config": config, "/_test/wait": wait}
GET = {"/_test/messages": messages, "/_test/calls": calls, "/_test/events": jobs,
       "/_test/acks": lambda state, q: (200, state.acks),
       "/_test/deliveries": lambda state, q: (200, state.deliveries),
       "/_test/connections": lambda state, q: (200, [c.view() for c in state.connections]),
       "/_test/ephemerals": lambda state, q: (200, state.ephemerals),
       "/_test/statuses": lambda state, q: (200, list(state.statuses.values())),
       "/_test/responses": lambda state, q: (200, state.responses),
       "/_test/verifications": lambda state, q: (200, state.verifications),
       "/_test/users": lambda state, q: (200, list(state.users.values())),
       "/_test/channels": lambda state, q: (200, [dict(c.api_info(), members=c.members)
                                                  for c in state.channels.values()])}
