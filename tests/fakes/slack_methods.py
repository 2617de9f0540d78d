"""The Web API methods of the Slack fake (slack_api.py). Each takes (state, params) with state.cv held and returns
the fields of {"ok": true, ...} or raises ApiError. Parameters are strings (query, form) or JSON values."""

import base64
import binascii
import copy
import json
import time
import uuid

from slack_blocks import BlockError, validate
from slack_state import ApiError

MAX_TEXT = 40000


def p_str(params, name):
    v = params.get(name)
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    return v if isinstance(v, str) else json.dumps(v) if isinstance(v, (dict, list)) else str(v)


def p_bool(params, name):
    v = params.get(name)
    return v if isinstance(v, bool) else str(v).lower() in ("true", "1") if v is not None else False


def p_int(params, name, default):
    v = params.get(name)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except (TypeError, ValueError):
        raise ApiError("invalid_arguments", response_metadata={"messages": ["[ERROR] %s must be a number" % name]})


def p_blocks(params):
    """The blocks argument: None when left out, else the checked list (a JSON array or its text)."""
    v = params.get("blocks")
    if v is None:
        return None
    if isinstance(v, str):
        if v == "":
            return None
        try:
            v = json.loads(v)
        except ValueError:
            raise ApiError("invalid_blocks_format")
    if not isinstance(v, list):
        raise ApiError("invalid_blocks_format")
    try:
        return validate(copy.deepcopy(v))
    except BlockError as e:
        raise ApiError("invalid_blocks", errors=e.errors,
                       response_metadata={"messages": ["[ERROR] " + x for x in e.errors]})


def bot_channel(state, params, name="channel"):
    cid = p_str(params, name)
    if not cid:
        raise ApiError("channel_not_found")
    if cid in state.users:  # a user id posts to the IM between the bot and that user (the app's DM), as on Slack
        cid = next((c.id for c in state.channels.values() if c.type == "im" and c.info.get("user") == cid), cid)
    ch = state.channel(cid)
    if state.opts.bot_user not in ch.members:
        raise ApiError("not_in_channel")
    return ch


def content(params, require=True):
    """(text or None, blocks or None) of a message, checked as chat.postMessage checks them."""
    text = p_str(params, "text")
    blocks = p_blocks(params)
    if require and not text and not blocks:
        raise ApiError("no_text")
    if text is not None and len(text) > MAX_TEXT:
        raise ApiError("msg_too_long")
    return text, blocks


def bot_message(state, ts, text, blocks):
    msg = {"user": state.opts.bot_user, "type": "message", "ts": ts, "bot_id": state.opts.bot_id,
           "app_id": state.opts.app_id, "text": text or "", "team": state.opts.team,
           "bot_profile": state.bot_profile()}
    if blocks:
        msg["blocks"] = blocks
    return msg


def post_message(state, params):
    ch = bot_channel(state, params)
    text, blocks = content(params)
    root = None
    thread_ts = p_str(params, "thread_ts")
    if thread_ts:
        root = state.thread_root(ch, thread_ts)
        if root is None or (root.deleted and not root.replies):
            raise ApiError("invalid_thread_ts")
    msg = bot_message(state, state.next_ts(), text, blocks)
    if root is not None:
        msg["thread_ts"] = root.ts
        msg["parent_user_id"] = root.msg.get("user")
        if p_bool(params, "reply_broadcast"):
            msg["subtype"] = "thread_broadcast"
        state.statuses.pop("%s:%s" % (ch.id, root.ts), None)  # a reply clears the assistant thread's status
    rec = state.store(ch, msg, True)
    state.deliver_message(ch, rec)
    return {"channel": ch.id, "ts": msg["ts"], "message": copy.deepcopy(msg)}


def own_message(state, params, refusal):
    ch = state.channel(p_str(params, "channel") or "")
    rec = ch.messages.get(p_str(params, "ts") or "")
    if rec is None or rec.deleted:
        raise ApiError("message_not_found")
    if rec.msg.get("bot_id") != state.opts.bot_id:
        raise ApiError(refusal)
    return ch, rec


def update(state, params):
    ch, rec = own_message(state, params, "cant_update_message")
    text, blocks = content(params)
    previous = copy.deepcopy(rec.msg)
    # docs.slack.dev (chat.update): blocks left out are kept only when text is left out too; new text without
    # blocks removes them. An update through blocks shows no "edited" mark.
    if blocks is not None:
        if blocks:
            rec.msg["blocks"] = blocks
        else:
            rec.msg.pop("blocks", None)
    elif text is not None:
        rec.msg.pop("blocks", None)
    if text is not None:
        rec.msg["text"] = text
    if blocks is None:
        rec.msg["edited"] = {"user": state.opts.bot_user, "ts": state.next_ts()}
    rec.updates += 1
    state.cv.notify_all()
    state.deliver_change(ch, rec, previous)
    out = {k: copy.deepcopy(v) for k, v in rec.msg.items() if k not in ("ts", "thread_ts", "parent_user_id")}
    return {"channel": ch.id, "ts": rec.ts, "text": rec.msg["text"], "message": out}


def delete(state, params):
    ch, rec = own_message(state, params, "cant_delete_message")
    rec.deleted = True
    state.cv.notify_all()
    state.deliver_deletion(ch, rec)
    return {"channel": ch.id, "ts": rec.ts}


def post_ephemeral(state, params):
    ch = bot_channel(state, params)
    uid = p_str(params, "user")
    if uid not in state.users:
        raise ApiError("user_not_found")
    if uid not in ch.members:
        raise ApiError("user_not_in_channel")
    text, blocks = content(params)
    ts = state.next_ts()
    state.ephemerals.append({"channel": ch.id, "user": uid, "text": text or "", "blocks": blocks,
                             "thread_ts": p_str(params, "thread_ts"), "message_ts": ts, "time": time.time()})
    state.cv.notify_all()
    return {"message_ts": ts}


def _cursor(ts):
    return base64.b64encode(("next_ts:" + ts.replace(".", "")).encode()).decode()


def _from_cursor(cursor):
    try:
        raw = base64.b64decode(cursor.encode(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ApiError("invalid_cursor")
    if not raw.startswith("next_ts:") or not raw[8:].isdigit() or len(raw) < 15:
        raise ApiError("invalid_cursor")
    digits = raw[8:]
    return digits[:-6] + "." + digits[-6:]


def _ts_key(ts):
    try:
        sec, _, frac = str(ts).partition(".")
        return int(sec) * 1000000 + int((frac + "000000")[:6])
    except ValueError:
        raise ApiError("invalid_ts_latest" if ts else "invalid_ts_oldest")


def replies(state, params):
    ch = state.channel(p_str(params, "channel") or "")
    ts = p_str(params, "ts")
    rec = ch.messages.get(ts or "")
    if rec is None:
        raise ApiError("thread_not_found")
    if rec.thread_ts and rec.thread_ts != rec.ts:  # a reply's ts: Slack answers with that message alone
        if rec.deleted:
            raise ApiError("thread_not_found")
        view = rec.api_view(state)
        return {"messages": [view], "has_more": False}
    children = [ch.messages[t] for t in rec.replies if not ch.messages[t].deleted]
    if rec.deleted and not children:
        raise ApiError("thread_not_found")
    limit = max(1, min(p_int(params, "limit", 1000), 1000))
    inclusive = p_bool(params, "inclusive")
    oldest = _ts_key(p_str(params, "oldest") or "0")
    latest = _ts_key(p_str(params, "latest")) if p_str(params, "latest") else None
    if p_str(params, "cursor"):
        start = _ts_key(_from_cursor(p_str(params, "cursor")))
        children = [c for c in children if _ts_key(c.ts) >= start]

    def within(key):
        if key < oldest or (key == oldest and not inclusive and oldest):
            return False
        return latest is None or key < latest or (key == latest and inclusive)

    children = [c for c in children if within(_ts_key(c.ts))]
    # The parent leads every page (as on Slack); a page holds `limit` messages but always one reply when any remain.
    take = max(1, limit - 1)
    page, rest = children[:take], children[take:]
    messages = [rec.api_view(state)]
    for c in page:
        view = c.api_view(state)
        view["parent_user_id"] = rec.msg.get("user")
        messages.append(view)
    out = {"messages": messages, "has_more": bool(rest)}
    if rest:
        out["response_metadata"] = {"next_cursor": _cursor(rest[0].ts)}
    return out


def users_info(state, params):
    uid = p_str(params, "user")
    if uid not in state.users:
        raise ApiError("user_not_found")
    return {"user": copy.deepcopy(state.users[uid])}


def conversations_info(state, params):
    return {"channel": state.channel(p_str(params, "channel") or "").api_info()}


def auth_test(state, params):
    o = state.opts
    return {"url": "https://%s.slack.test/" % o.team_domain, "team": "Fake Team", "user": o.bot_name,
            "team_id": o.team, "user_id": o.bot_user, "bot_id": o.bot_id, "is_enterprise_install": False}


def connections_open(state, params):
    ticket = str(uuid.uuid4())
    state.tickets[ticket] = {"used": False, "time": time.time()}
    return {"url": "ws://127.0.0.1:%d/link/?ticket=%s&app_id=%s" % (state.opts.port, ticket, state.opts.app_id)}


def set_status(state, params):
    missing = [n for n in ("channel_id", "thread_ts") if not p_str(params, n)]
    if "status" not in params:
        missing.append("status")
    if missing:
        raise ApiError("invalid_arguments", response_metadata={
            "messages": ["[ERROR] missing required field: %s" % n for n in missing]})
    ch = bot_channel(state, params, "channel_id")
    rec = ch.messages.get(p_str(params, "thread_ts"))
    if rec is None or (rec.thread_ts and rec.thread_ts != rec.ts):
        raise ApiError("invalid_thread_ts")  # as Slack answers a reply's ts: it wants the thread's parent
    key = "%s:%s" % (ch.id, rec.ts)
    status = p_str(params, "status") or ""
    if status:
        state.statuses[key] = {"channel_id": ch.id, "thread_ts": rec.ts, "status": status, "time": time.time(),
                               "loading_messages": params.get("loading_messages")}
    else:
        state.statuses.pop(key, None)
    state.cv.notify_all()
    return {}


# method -> (handler, token kind it wants)
METHODS = {
    "auth.test": (auth_test, "bot"),
    "apps.connections.open": (connections_open, "app"),
    "chat.postMessage": (post_message, "bot"),
    "chat.update": (update, "bot"),
    "chat.delete": (delete, "bot"),
    "chat.postEphemeral": (post_ephemeral, "bot"),
    "conversations.replies": (replies, "bot"),
    "conversations.info": (conversations_info, "bot"),
    "users.info": (users_info, "bot"),
    "assistant.threads.setStatus": (set_status, "bot"),
}
