"""The state of the Telegram Bot API fake (telegram_api.py) and its Bot API methods.

Everything is guarded by one Condition (State.cv): long polls, /_test/wait and the webhook deliverer wait on it
and every change notifies it. A method handler returns its result or raises ApiError, which becomes
{"ok":false,"error_code":N,"description":"..."} exactly as the server words it.
"""

import copy
import json
import threading
import time

from telegram_html import ParseError, parse_html, trim, utf16_len

DEFAULT_UPDATES_EXCLUDED = {"chat_member", "message_reaction", "message_reaction_count"}
CHAT_ACTIONS = {"typing", "upload_photo", "record_video", "upload_video", "record_voice", "upload_voice",
                "upload_document", "choose_sticker", "find_location", "record_video_note", "upload_video_note"}
MAX_TEXT = 4096
GENERAL_TOPIC = 1
CONFLICT_POLL = ("Conflict: terminated by other getUpdates request; make sure that only one bot instance is "
                 "running")
CONFLICT_WEBHOOK = ("Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the "
                    "webhook first")
NOT_MODIFIED = ("Bad Request: message is not modified: specified new message content and reply markup are exactly "
                "the same as a current content and reply markup of the message")
QUERY_INVALID = "Bad Request: query is too old and response timeout expired or query ID is invalid"


class ApiError(Exception):
    def __init__(self, code, description, retry_after=None):
        super().__init__(description)
        self.code = code
        self.description = description
        self.retry_after = retry_after


def bad(description):
    return ApiError(400, "Bad Request: " + description)


# ---- parameters: strings (query, form, multipart) or JSON values (application/json) -------------------------

def p_int(params, name, required_msg=None):
    v = params.get(name)
    if v is None or v == "":
        if required_msg:
            raise bad(required_msg)
        return None
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    try:
        return int(str(v).strip())
    except ValueError:
        if required_msg:
            raise bad(required_msg)
        return 0  # the server reads a non-number as 0


def p_bool(params, name):
    v = params.get(name)
    if isinstance(v, bool):
        return v
    return str(v).lower() in ("true", "1") if v is not None else False


def p_str(params, name):
    v = params.get(name)
    if v is None:
        return None
    return v if isinstance(v, str) else json.dumps(v) if isinstance(v, (dict, list)) else str(v)


def p_json(params, name, error):
    v = params.get(name)
    if v is None or v == "":
        return None
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            raise bad(error)
    return v


class Chat:
    def __init__(self, info):
        self.info = info  # the Chat object the API shows
        self.is_forum = bool(info.get("is_forum"))
        self.next_id = 2 if self.is_forum else 1  # message id 1 is a forum's General topic
        self.topics = {}  # message_thread_id -> {"name", "root"}
        self.messages = {}  # message_id -> record


class Record:
    """One message as the fake keeps it: the current Message object and what happened to it."""

    def __init__(self, msg, by_bot, seq):
        self.seq = seq  # the order the fake stored messages in, across chats
        self.msg = msg
        self.by_bot = by_bot
        self.edit_count = 0
        self.deleted = False

    def view(self):
        m = self.msg
        return {"seq": self.seq, "message_id": m["message_id"], "from": m.get("from"), "by_bot": self.by_bot,
                "text": m.get("text"), "caption": m.get("caption"), "entities": m.get("entities"),
                "reply_markup": m.get("reply_markup"), "message_thread_id": m.get("message_thread_id"),
                "reply_to_message_id": (m.get("reply_to_message") or {}).get("message_id"),
                "edit_count": self.edit_count, "deleted": self.deleted, "message": m}


class State:
    def __init__(self, token, username, privacy_mode):
        self.token = token
        self.cv = threading.Condition()
        bot_id = int(token.split(":", 1)[0]) if token.split(":", 1)[0].isdigit() else 123456
        self.bot = {"id": bot_id, "is_bot": True, "first_name": username.replace("_", " ").title(),
                    "username": username}
        self.privacy_mode = privacy_mode
        with self.cv:
            self.reset()

    def reset(self):
        self.chats = {}
        self.next_seq = 0
        self.updates = []  # {"update_id", "update", "confirmed", "type"}
        self.next_update_id = 100001
        self.allowed_updates = []  # [] = the default set
        self.poll_generation = 0
        self.webhook = None  # {"url", "secret_token", "allowed_updates", "max_connections", ...}
        self.webhook_error = None  # (date, message)
        self.deliveries = []
        self.calls = []
        self.faults = []
        self.callback_queries = {}
        self.callback_answers = []
        self.next_callback_id = 4400000000000000001
        self.commands = {}
        self.cv.notify_all()

    # ---- chats and messages ---------------------------------------------------------------------------------

    def add_chat(self, body):
        cid = body.get("id")
        kind = body.get("type")
        if not isinstance(cid, int) or kind not in ("private", "group", "supergroup"):
            raise ValueError("a chat needs an integer id and a type of private, group or supergroup")
        if (kind == "private") != (cid > 0):
            raise ValueError("a private chat has a positive id, a group or supergroup a negative one")
        if body.get("is_forum") and kind != "supergroup":
            raise ValueError("only a supergroup can be a forum")
        info = {"id": cid, "type": kind}
        if kind == "private":
            info["first_name"] = body.get("first_name") or body.get("title") or "User %d" % cid
        else:
            info["title"] = body.get("title") or "Chat %d" % cid
        if body.get("username"):
            info["username"] = body["username"]
        if body.get("is_forum"):
            info["is_forum"] = True
        self.chats[cid] = Chat(info)
        self.cv.notify_all()
        return info

    def chat_for_api(self, params):
        raw = params.get("chat_id")
        if raw is None or raw == "":
            raise bad("chat_id is empty")
        if isinstance(raw, str) and raw.startswith("@"):
            for chat in self.chats.values():
                if chat.info.get("username", "").lower() == raw[1:].lower():
                    return chat
            raise bad("chat not found")
        try:
            cid = int(raw)
        except (TypeError, ValueError):
            raise bad("chat not found")
        if cid not in self.chats:
            raise bad("chat not found")
        return self.chats[cid]

    def new_message(self, chat, sender, thread, reply_to):
        """A Message in chat with its id, thread fields and reply_to_message as real Telegram sets them."""
        mid = chat.next_id
        chat.next_id += 1
        msg = {"message_id": mid, "from": copy.deepcopy(sender), "chat": copy.deepcopy(chat.info),
               "date": int(time.time())}
        if chat.is_forum and thread and thread != GENERAL_TOPIC:
            msg["message_thread_id"] = thread
            msg["is_topic_message"] = True
            # A topic message that replies to nothing replies to the topic's root (forum_topic_created).
            target = reply_to or chat.messages[chat.topics[thread]["root"]]
            msg["reply_to_message"] = self.quoted(target)
        elif reply_to is not None:
            msg["reply_to_message"] = self.quoted(reply_to)
            if chat.info["type"] == "supergroup" and not chat.is_forum:
                # A reply in a supergroup belongs to the reply thread of the message it answers.
                msg["message_thread_id"] = reply_to.msg.get("message_thread_id", reply_to.msg["message_id"])
        elif thread and chat.info["type"] == "supergroup" and not chat.is_forum:
            msg["message_thread_id"] = thread
        return msg

    @staticmethod
    def quoted(record):
        q = copy.deepcopy(record.msg if isinstance(record, Record) else record)
        q.pop("reply_to_message", None)  # the API never nests replies
        return q

    def store(self, chat, msg, by_bot):
        self.next_seq += 1
        rec = Record(msg, by_bot, self.next_seq)
        chat.messages[msg["message_id"]] = rec
        self.cv.notify_all()
        return rec

    def push_update(self, kind, payload):
        uid = self.next_update_id
        self.next_update_id += 1
        self.updates.append({"update_id": uid, "update": {"update_id": uid, kind: copy.deepcopy(payload)},
                             "confirmed": False, "type": kind})
        self.cv.notify_all()
        return uid

    # ---- text, markup, threads, replies ---------------------------------------------------------------------

    def message_text(self, params, field="text"):
        text = p_str(params, field)
        if not text:
            raise bad("message text is empty")
        mode = (p_str(params, "parse_mode") or "").lower()
        if mode == "html":
            try:
                text, entities = parse_html(text)
            except ParseError as e:
                raise bad("can't parse entities: %s" % e)
        elif mode in ("", "markdown", "markdownv2"):
            entities = []  # Markdown is not parsed by this fake: the text is kept as sent
        else:
            raise bad("unsupported parse_mode")
        text, entities = trim(text, entities)
        if not text:
            raise bad("message text is empty")
        if utf16_len(text) > MAX_TEXT:
            raise bad("message is too long")
        return text, entities

    @staticmethod
    def reply_markup(params):
        markup = p_json(params, "reply_markup", "can't parse reply keyboard markup JSON object")
        if markup is None:
            return None
        if not isinstance(markup, dict):
            raise bad("can't parse reply keyboard markup JSON object")
        if "inline_keyboard" not in markup:
            return markup  # other keyboards (reply keyboards, force_reply, remove) are kept as sent
        rows = markup["inline_keyboard"]
        if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
            raise bad('Field "inline_keyboard" of the InlineKeyboardMarkup must be an Array of Arrays')
        for row in rows:
            for button in row:
                if not isinstance(button, dict) or not isinstance(button.get("text"), str):
                    raise bad('can\'t parse inline keyboard button: Field "text" must be of type String')
                if "callback_data" in button:
                    data = button["callback_data"]
                    if not isinstance(data, str) or not 1 <= len(data.encode()) <= 64:
                        raise bad("BUTTON_DATA_INVALID")
                elif not any(k in button for k in ("url", "login_url", "switch_inline_query", "web_app", "pay",
                                                      "switch_inline_query_current_chat", "callback_game",
                                                      "copy_text", "switch_inline_query_chosen_chat")):
                    raise bad("can't parse inline keyboard button: Text buttons are unallowed in the inline "
                              "keyboard")
        return {"inline_keyboard": rows}

    @staticmethod
    def thread_for_api(chat, params):
        """The thread a bot's message goes to; message_thread_id 1 (General) must be omitted, as the server
        wants: this fake answers it with "message thread not found"."""
        thread = p_int(params, "message_thread_id")
        if not thread:
            return None
        if chat.is_forum:
            if thread not in chat.topics:
                raise bad("message thread not found")
            return thread
        if chat.info["type"] == "supergroup":
            rec = chat.messages.get(thread)
            if rec is None or rec.deleted:
                raise bad("message thread not found")
            return thread
        raise bad("message thread not found")

    @staticmethod
    def thread_of(chat, rec):
        return rec.msg.get("message_thread_id") if chat.is_forum else None

    def reply_target(self, chat, params, thread):
        rp = p_json(params, "reply_parameters", "can't parse reply parameters JSON object")
        if rp is not None and not isinstance(rp, dict):
            raise bad("can't parse reply parameters JSON object")
        if rp:
            mid, allow = p_int(rp, "message_id"), p_bool(rp, "allow_sending_without_reply")
        else:
            mid, allow = p_int(params, "reply_to_message_id"), p_bool(params, "allow_sending_without_reply")
        if not mid:
            return None
        rec = chat.messages.get(mid)
        found = rec is not None and not rec.deleted and not (
            chat.is_forum and thread is not None and self.thread_of(chat, rec) not in (thread,))
        if not found:
            if allow:
                return None
            raise bad("message to be replied not found")
        return rec
