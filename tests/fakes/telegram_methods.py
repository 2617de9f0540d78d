"""The Bot API methods of the Telegram fake (telegram_api.py). Each takes (state, params) with state.cv held,
returns the result or raises ApiError; getUpdates waits on state.cv (which releases it) for its long poll."""

import json
import re
import time
import urllib.parse

from telegram_state import (CHAT_ACTIONS, CONFLICT_POLL, CONFLICT_WEBHOOK, DEFAULT_UPDATES_EXCLUDED, NOT_MODIFIED,
                            QUERY_INVALID, ApiError, bad, p_bool, p_int, p_json, p_str)

SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]*")
COMMAND = re.compile(r"[a-z0-9_]+")
LONG_POLL_MAX = 50  # seconds; the server cuts longer timeouts to this


def get_me(state, params):
    return dict(state.bot, can_join_groups=True, can_read_all_group_messages=not state.privacy_mode,
                supports_inline_queries=False)


def _allowed(kinds, kind):
    return kind in kinds if kinds else kind not in DEFAULT_UPDATES_EXCLUDED


def get_updates(state, params):
    if state.webhook is not None:
        raise ApiError(409, CONFLICT_WEBHOOK)
    offset = p_int(params, "offset") or 0
    limit = p_int(params, "limit")
    limit = 100 if limit is None else min(max(limit, 1), 100)
    timeout = min(max(p_int(params, "timeout") or 0, 0), LONG_POLL_MAX)
    allowed = p_json(params, "allowed_updates", "can't parse allowed_updates JSON array")
    if allowed is not None:
        if not isinstance(allowed, list):
            raise bad("can't parse allowed_updates JSON array")
        state.allowed_updates = [str(k) for k in allowed]  # kept for later calls that leave it out
    pending = [u for u in state.updates if not u["confirmed"]]
    if offset < 0:
        keep = pending[offset:] if -offset < len(pending) else pending
        for u in pending[:len(pending) - len(keep)]:
            u["confirmed"] = True
    elif offset > 0:
        for u in pending:
            if u["update_id"] < offset:
                u["confirmed"] = True
    # A newer getUpdates ends the one still waiting: that one answers 409.
    state.poll_generation += 1
    mine = state.poll_generation
    state.cv.notify_all()
    deadline = time.monotonic() + timeout
    while True:
        batch = []
        for u in state.updates:
            if u["confirmed"]:
                continue
            if not _allowed(state.allowed_updates, u["type"]):
                u["confirmed"] = True  # the server never keeps an update of a type the bot did not ask for
                continue
            batch.append(u["update"])
            if len(batch) == limit:
                break
        if batch:
            return batch
        left = deadline - time.monotonic()
        if left <= 0:
            return []
        state.cv.wait(left)
        if state.poll_generation != mine:
            raise ApiError(409, CONFLICT_POLL)
        if state.webhook is not None:
            raise ApiError(409, CONFLICT_WEBHOOK)


def _drop_pending(state):
    for u in state.updates:
        u["confirmed"] = True


def set_webhook(state, params):
    url = p_str(params, "url") or ""
    if not url:
        return delete_webhook(state, params)
    secret = p_str(params, "secret_token")
    if secret is not None and secret != "":
        if len(secret) > 256:
            raise bad("secret token is too long")
        if not SECRET_TOKEN.fullmatch(secret):
            raise bad("secret token contains unallowed characters")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad("bad webhook: An HTTPS URL must be provided for webhook")
    if parts.hostname not in ("127.0.0.1", "localhost", "::1") and not parts.hostname.startswith("127."):
        # Unlike the real server (which wants HTTPS on a public address) the fake delivers to loopback only.
        raise bad("bad webhook: the fake delivers to loopback addresses only")
    allowed = p_json(params, "allowed_updates", "can't parse allowed_updates JSON array")
    max_connections = min(max(p_int(params, "max_connections") or 40, 1), 100)
    if p_bool(params, "drop_pending_updates"):
        _drop_pending(state)
    same = state.webhook is not None and state.webhook["url"] == url
    state.webhook = {"url": url, "secret_token": secret or None, "max_connections": max_connections,
                     "allowed_updates": allowed if isinstance(allowed, list) else
                     (state.webhook or {}).get("allowed_updates")}
    if not same:
        state.webhook_error = None
    state.cv.notify_all()
    return True, "Webhook is already set" if same else "Webhook was set"


def delete_webhook(state, params):
    if p_bool(params, "drop_pending_updates"):
        _drop_pending(state)
    was = state.webhook is not None
    state.webhook = None
    state.webhook_error = None
    state.cv.notify_all()
    return True, "Webhook was deleted" if was else "Webhook is already deleted"


def get_webhook_info(state, params):
    pending = sum(1 for u in state.updates if not u["confirmed"])
    if state.webhook is None:
        return {"url": "", "has_custom_certificate": False, "pending_update_count": pending}
    info = {"url": state.webhook["url"], "has_custom_certificate": False, "pending_update_count": pending,
            "max_connections": state.webhook["max_connections"], "ip_address": "127.0.0.1"}
    if state.webhook["allowed_updates"]:
        info["allowed_updates"] = state.webhook["allowed_updates"]
    if state.webhook_error:
        info["last_error_date"], info["last_error_message"] = state.webhook_error
    return info


def send_message(state, params):
    text, entities = state.message_text(params)  # the server parses text and markup before it looks at the chat
    markup = state.reply_markup(params)
    chat = state.chat_for_api(params)
    thread = state.thread_for_api(chat, params)
    target = state.reply_target(chat, params, thread)
    if target is not None and thread is None and chat.is_forum:
        thread = state.thread_of(chat, target)  # a reply goes to the topic of the message it answers
    msg = state.new_message(chat, state.bot, thread, target)
    msg["text"] = text
    if entities:
        msg["entities"] = entities
    if markup is not None and "inline_keyboard" in markup:
        msg["reply_markup"] = markup
    state.store(chat, msg, True)
    return msg


def _message_for_edit(state, params, verb):
    if params.get("inline_message_id"):
        raise bad("inline messages are not modelled by this fake")
    if params.get("chat_id") in (None, ""):
        raise bad("message identifier is not specified")
    chat = state.chat_for_api(params)
    mid = p_int(params, "message_id")
    if not mid:
        raise bad("message identifier is not specified")
    rec = chat.messages.get(mid)
    if rec is None or rec.deleted:
        raise bad("message to %s not found" % verb)
    return chat, rec


def edit_message_text(state, params):
    text, entities = state.message_text(params)
    markup = state.reply_markup(params)
    chat, rec = _message_for_edit(state, params, "edit")
    if not rec.by_bot or "text" not in rec.msg:
        raise bad("message can't be edited")
    new_markup = markup if markup is not None and "inline_keyboard" in markup else None
    if (rec.msg.get("text") == text and (rec.msg.get("entities") or []) == entities
            and rec.msg.get("reply_markup") == new_markup):
        raise ApiError(400, NOT_MODIFIED)
    rec.msg["text"] = text
    rec.msg.pop("entities", None)
    if entities:
        rec.msg["entities"] = entities
    # Leaving reply_markup out of an edit removes the keyboard, as on the real server.
    rec.msg.pop("reply_markup", None)
    if new_markup is not None:
        rec.msg["reply_markup"] = new_markup
    rec.msg["edit_date"] = int(time.time())
    rec.edit_count += 1
    state.cv.notify_all()
    return rec.msg


def delete_message(state, params):
    chat, rec = _message_for_edit(state, params, "delete")
    rec.deleted = True
    state.cv.notify_all()
    return True


def answer_callback_query(state, params):
    qid = p_str(params, "callback_query_id") or ""
    query = state.callback_queries.get(qid)
    if query is None or query["answered"]:
        raise bad(QUERY_INVALID[len("Bad Request: "):])
    query["answered"] = True
    answer = {"callback_query_id": qid, "text": p_str(params, "text"), "show_alert": p_bool(params, "show_alert"),
              "url": p_str(params, "url"), "cache_time": p_int(params, "cache_time") or 0, "time": time.time()}
    state.callback_answers.append(answer)
    state.cv.notify_all()
    return True


def send_chat_action(state, params):
    chat = state.chat_for_api(params)
    action = p_str(params, "action")
    if action not in CHAT_ACTIONS:
        raise bad("wrong parameter action in request")
    state.thread_for_api(chat, params)
    return True


def _commands_key(params):
    scope = p_json(params, "scope", "can't parse BotCommandScope JSON object") or {"type": "default"}
    return json.dumps(scope, sort_keys=True) + "|" + (p_str(params, "language_code") or "")


def set_my_commands(state, params):
    commands = p_json(params, "commands", "can't parse commands JSON object")
    if not isinstance(commands, list):
        raise bad("can't parse commands JSON object")
    if len(commands) > 100:
        raise bad("BOT_COMMANDS_TOO_MUCH")
    clean = []
    for c in commands:
        if not isinstance(c, dict):
            raise bad("can't parse BotCommand JSON object")
        name = str(c.get("command", "")).strip()
        name = name[1:] if name.startswith("/") else name
        description = str(c.get("description", "")).strip()
        if not name:
            raise bad("command must be non-empty")
        if len(name) > 32:
            raise bad("command length must not exceed 32")
        if not description:
            raise bad("command description must be non-empty")
        if len(description) > 256:
            raise bad("command description length must not exceed 256")
        if not COMMAND.fullmatch(name):
            raise bad("BOT_COMMAND_INVALID")
        clean.append({"command": name, "description": description})
    state.commands[_commands_key(params)] = clean
    return True


def get_my_commands(state, params):
    return state.commands.get(_commands_key(params), [])


METHODS = {name.lower(): fn for name, fn in {
    "getMe": get_me, "getUpdates": get_updates, "setWebhook": set_webhook, "deleteWebhook": delete_webhook,
    "getWebhookInfo": get_webhook_info, "sendMessage": send_message, "editMessageText": edit_message_text,
    "deleteMessage": delete_message, "answerCallbackQuery": answer_callback_query,
    "sendChatAction": send_chat_action, "setMyCommands": set_my_commands, "getMyCommands": get_my_commands,
}.items()}
