"""The /_test/ control API of the Telegram fake (telegram_api.py): what users do (send, edit, press a button),
chats and forum topics, and what tests read back. Each function takes (state, body or query) with state.cv held
and returns (status, JSON value); a ControlError is the test's own mistake, answered 400 with its message."""

import copy
import time

from telegram_html import find_entities
from telegram_state import GENERAL_TOPIC, p_int

TOPIC_ICON_COLOR = 7322096  # the default colour the server gives a topic


class ControlError(Exception):
    pass


def _chat(state, chat_id, sender=None):
    """The chat, made on first use for a user's private chat (or a group, from the id's form)."""
    if not isinstance(chat_id, int):
        raise ControlError("chat_id must be an integer")
    if chat_id not in state.chats:
        if chat_id > 0:
            state.add_chat({"id": chat_id, "type": "private",
                            "first_name": (sender or {}).get("first_name"),
                            "username": (sender or {}).get("username")})
        else:
            state.add_chat({"id": chat_id, "type": "supergroup" if chat_id <= -1000000000000 else "group"})
    return state.chats[chat_id]


def _user(body):
    sender = body.get("from")
    if not isinstance(sender, dict) or not isinstance(sender.get("id"), int) or not sender.get("first_name"):
        raise ControlError("from must be a user {id, first_name, username?, is_bot?}")
    user = {"id": sender["id"], "is_bot": bool(sender.get("is_bot")), "first_name": sender["first_name"]}
    for k in ("last_name", "username", "language_code"):
        if sender.get(k):
            user[k] = sender[k]
    return user


def add_chat(state, body):
    try:
        return 200, state.add_chat(body)
    except ValueError as e:
        raise ControlError(str(e))


def add_topic(state, body):
    chat = _chat(state, body.get("chat_id"))
    if not chat.is_forum:
        raise ControlError("chat %s is not a forum (POST /_test/chats with is_forum true)" % chat.info["id"])
    if not body.get("name"):
        raise ControlError("a topic needs a name")
    creator = _user(body) if body.get("from") else {"id": 1000001, "is_bot": False, "first_name": "Admin"}
    mid = chat.next_id
    chat.next_id += 1
    # The topic's root is the service message that created it; its id is the topic's message_thread_id.
    msg = {"message_id": mid, "from": creator, "chat": copy.deepcopy(chat.info), "date": int(time.time()),
           "message_thread_id": mid, "is_topic_message": True,
           "forum_topic_created": {"name": body["name"], "icon_color": body.get("icon_color", TOPIC_ICON_COLOR)}}
    chat.topics[mid] = {"name": body["name"], "root": mid}
    state.store(chat, msg, False)
    update_id = None if body.get("quiet") else state.push_update("message", msg)
    return 200, {"message_thread_id": mid, "update_id": update_id, "message": msg}


def _reply_and_thread(state, chat, body):
    thread = body.get("message_thread_id")
    reply_to = None
    if body.get("reply_to_message_id") is not None:
        reply_to = chat.messages.get(body["reply_to_message_id"])
        if reply_to is None or reply_to.deleted:
            raise ControlError("no message %s in chat %s to reply to" % (body["reply_to_message_id"],
                                                                        chat.info["id"]))
        if chat.is_forum and thread is None:
            thread = reply_to.msg.get("message_thread_id")
    if thread is not None and thread != GENERAL_TOPIC:
        if not chat.is_forum:
            raise ControlError("message_thread_id needs a forum chat")
        if thread not in chat.topics:
            raise ControlError("no topic %s in chat %s" % (thread, chat.info["id"]))
    if reply_to is not None and reply_to.msg.get("forum_topic_created"):
        reply_to = None  # a reply to the root is an ordinary topic message
    return thread, reply_to


def _sees(state, chat, msg):
    """Whether the bot gets this group message; in privacy mode only commands, mentions of it and replies
    to it reach a bot, as on the real server."""
    if not state.privacy_mode or chat.info["type"] == "private":
        return True
    text = msg.get("text") or msg.get("caption") or ""
    name = state.bot["username"].lower()
    for e in msg.get("entities") or msg.get("caption_entities") or []:
        piece = text.encode("utf-16-le")[2 * e["offset"]:2 * (e["offset"] + e["length"])].decode("utf-16-le")
        if e["type"] == "bot_command" and ("@" not in piece or piece.split("@", 1)[1].lower() == name):
            return True
        if e["type"] == "mention" and piece[1:].lower() == name:
            return True
    reply = msg.get("reply_to_message") or {}
    return (reply.get("from") or {}).get("id") == state.bot["id"] and not reply.get("forum_topic_created")


def send(state, body):
    sender = _user(body)
    chat = _chat(state, body.get("chat_id"), sender)
    thread, reply_to = _reply_and_thread(state, chat, body)
    msg = state.new_message(chat, sender, thread, reply_to)
    if body.get("photo") is not None:
        msg["photo"] = [{"file_id": "photo-%d-%d" % (chat.info["id"], msg["message_id"]),
                         "file_unique_id": "p%d%d" % (abs(chat.info["id"]), msg["message_id"]),
                         "width": w, "height": w * 3 // 4, "file_size": w * 60} for w in (90, 320, 800)]
        if body.get("caption"):
            msg["caption"] = body["caption"]
            ents = body.get("entities", find_entities(body["caption"]))
            if ents:
                msg["caption_entities"] = ents
    elif body.get("text"):
        msg["text"] = body["text"]
        ents = body.get("entities", find_entities(body["text"]))
        if ents:
            msg["entities"] = ents
    else:
        raise ControlError("a message needs text, or a photo with an optional caption")
    state.store(chat, msg, False)
    update_id = state.push_update("message", msg) if _sees(state, chat, msg) else None
    return 200, {"update_id": update_id, "message": msg}


def edit(state, body):
    chat = _chat(state, body.get("chat_id"))
    rec = chat.messages.get(body.get("message_id"))
    if rec is None or rec.deleted or rec.by_bot:
        raise ControlError("no user message %s in chat %s" % (body.get("message_id"), chat.info["id"]))
    if not body.get("text") or "text" not in rec.msg:
        raise ControlError("an edit needs text, and a text message to change")
    rec.msg["text"] = body["text"]
    rec.msg.pop("entities", None)
    ents = body.get("entities", find_entities(body["text"]))
    if ents:
        rec.msg["entities"] = ents
    rec.msg["edit_date"] = int(time.time())
    rec.edit_count += 1
    update_id = state.push_update("edited_message", rec.msg) if _sees(state, chat, rec.msg) else None
    return 200, {"update_id": update_id, "message": rec.msg}


def press(state, body):
    sender = _user(body)
    chat = _chat(state, body.get("chat_id"))
    rec = chat.messages.get(body.get("message_id"))
    if rec is None or rec.deleted or not rec.by_bot:
        raise ControlError("no bot message %s in chat %s" % (body.get("message_id"), chat.info["id"]))
    buttons = [b for row in (rec.msg.get("reply_markup") or {}).get("inline_keyboard", []) for b in row]
    if not any(b.get("callback_data") == body.get("data") for b in buttons):
        raise ControlError("message %s has no button with callback_data %r" % (rec.msg["message_id"],
                                                                               body.get("data")))
    qid = str(state.next_callback_id)
    state.next_callback_id += 1
    query = {"id": qid, "from": sender, "message": copy.deepcopy(rec.msg),
             "chat_instance": str(-(abs(chat.info["id"]) * 7919 % 10 ** 18 + 5)), "data": body["data"]}
    state.callback_queries[qid] = {"query": query, "answered": False}
    update_id = state.push_update("callback_query", query)
    return 200, {"update_id": update_id, "callback_query_id": qid, "callback_query": query}


def add_fault(state, body):
    method = str(body.get("method") or "")
    if not method:
        raise ControlError("a fault needs a method (or \"*\")")
    if body.get("kind") == "drop":
        fault = {"method": method.lower(), "kind": "drop", "count": int(body.get("count", 1))}
    elif body.get("kind") == "result":
        if "result" not in body:
            raise ControlError("a result fault needs the result to answer with")
        fault = {"method": method.lower(), "kind": "result", "count": int(body.get("count", 1)),
                 "result": body["result"]}
    else:
        status = body.get("status")
        if status not in (429, 500, 502, 400):
            raise ControlError("status must be 429, 500, 502 or 400")
        fault = {"method": method.lower(), "kind": "status", "status": status, "count": int(body.get("count", 1)),
                 "description": body.get("description"), "retry_after": int(body.get("retry_after", 3))}
    state.faults.append(fault)
    return 200, fault


def messages(state, query):
    chat_id = p_int(query, "chat_id")
    if chat_id not in state.chats:
        raise ControlError("no chat %s" % query.get("chat_id"))
    thread = p_int(query, "message_thread_id")
    out = []
    for rec in sorted(state.chats[chat_id].messages.values(), key=lambda r: r.msg["message_id"]):
        if thread is None or rec.msg.get("message_thread_id") == thread or (
                thread == GENERAL_TOPIC and "message_thread_id" not in rec.msg):
            out.append(rec.view())
    return 200, out


def _matches(state, body):
    """Bot messages (no method given) or recorded calls that match the /_test/wait filter."""
    chat_id, needle = body.get("chat_id"), body.get("text_contains")
    if body.get("method"):
        method = body["method"].lower()
        started = bool(body.get("started"))
        return [c for c in state.calls if c["method"].lower() == method and (started or c["status"] is not None)
                and body.get("status") in (None, c["status"])
                and (chat_id is None or str(c["params"].get("chat_id")) == str(chat_id))
                and (needle is None or needle in str(c["params"].get("text", "")))]
    found = []
    for cid, chat in state.chats.items():
        if chat_id is not None and cid != chat_id:
            continue
        for rec in chat.messages.values():
            if rec.by_bot and (needle is None or needle in (rec.msg.get("text") or "")):
                found.append(rec.view())
    return sorted(found, key=lambda v: v["seq"])


def wait(state, body):
    deadline = time.monotonic() + float(body.get("timeout", 10))
    count = int(body.get("count", 1))
    if count < 1:
        raise ControlError("count must be 1 or more")
    while True:
        found = _matches(state, body)
        if len(found) >= count:
            return 200, {"match": found[count - 1], "matches": found}
        left = deadline - time.monotonic()
        if left <= 0:
            return 408, {"error": "nothing matched %s" % body, "matches": found}
        state.cv.wait(min(left, 0.5))


def updates(state, query):
    return 200, [{"update_id": u["update_id"], "update": u["update"], "confirmed": u["confirmed"],
                  "given_up": u.get("given_up", False)} for u in state.updates]


def calls(state, query):
    method = (query.get("method") or "").lower()
    return 200, [c for c in state.calls if not method or c["method"].lower() == method]


POST = {"/_test/chats": add_chat, "/_test/topics": add_topic, "/_test/send": send, "/_test/edit": edit,
        "/_test/press": press, "/_test/faults": add_fault, "/_test/wait": wait}
GET = {"/_test/messages": messages, "/_test/updates": updates, "/_test/calls": calls,
       "/_test/callback_answers": lambda state, q: (200, state.callback_answers),
       "/_test/deliveries": lambda state, q: (200, state.deliveries)}
