"""The state of the Slack fake (slack_api.py): the workspace (users, conversations, messages and their threads),
what the fake recorded, and the payloads it builds for the app (Events API events, interactivity, slash commands).

Everything is guarded by one Condition (State.cv): /_test/wait, the delivery loop and the Socket Mode connections
wait on it and every change notifies it. A Web API method raises ApiError, answered {"ok":false,"error":...}.
"""

import base64
import copy
import json
import threading
import time
import uuid

from slack_blocks import rich_text


class ApiError(Exception):
    def __init__(self, error, status=200, **extra):
        super().__init__(error)
        self.error = error
        self.status = status
        self.extra = extra


class Record:
    """One message as the fake keeps it: the message object Slack would return and what happened to it."""

    def __init__(self, seq, channel, msg, by_bot):
        self.seq = seq
        self.channel = channel
        self.msg = msg
        self.by_bot = by_bot
        self.updates = 0
        self.deleted = False
        self.replies = []  # ts of the replies, for a thread's parent

    @property
    def ts(self):
        return self.msg["ts"]

    @property
    def thread_ts(self):
        return self.msg.get("thread_ts")

    def api_view(self, state):
        """The message as conversations.replies shows it (a parent carries its thread's summary)."""
        m = copy.deepcopy(self.msg)
        live = [state.channels[self.channel].messages[ts] for ts in self.replies]
        live = [r for r in live if not r.deleted]
        if live:
            users = []
            for r in live:
                if r.msg.get("user") and r.msg["user"] not in users:
                    users.append(r.msg["user"])
            m.update({"thread_ts": self.ts, "reply_count": len(live), "reply_users_count": len(users),
                      "latest_reply": live[-1].ts, "reply_users": users, "is_locked": False, "subscribed": False})
        if self.deleted:
            m = {"type": "message", "subtype": "tombstone", "text": "This message was deleted.", "user": "USLACKBOT",
                 "hidden": True, "ts": self.ts, "thread_ts": self.ts}
            if live:
                m.update({"reply_count": len(live), "latest_reply": live[-1].ts})
        return m

    def view(self):
        """The message as /_test/messages shows it."""
        m = self.msg
        return {"seq": self.seq, "channel": self.channel, "ts": m["ts"], "thread_ts": m.get("thread_ts"),
                "user": m.get("user"), "bot_id": m.get("bot_id"), "by_bot": self.by_bot, "subtype": m.get("subtype"),
                "text": m.get("text"), "blocks": m.get("blocks"), "files": m.get("files"), "edited": m.get("edited"),
                "updates": self.updates, "deleted": self.deleted, "reply_count": len(self.replies), "message": m}


class Channel:
    def __init__(self, info, members):
        self.info = info  # {id, type, name, user?}
        self.members = members  # user ids, the bot's included when it is a member
        self.messages = {}  # ts -> Record, in the order posted

    @property
    def id(self):
        return self.info["id"]

    @property
    def type(self):
        return self.info["type"]

    def channel_type(self):
        """The channel_type of a message event: im, mpim, channel or group (private)."""
        return self.type

    def api_info(self):
        t = self.type
        out = {"id": self.id, "name": self.info.get("name"), "is_channel": t == "channel", "is_group": t == "group",
               "is_im": t == "im", "is_mpim": t == "mpim", "is_private": t in ("group", "mpim", "im"),
               "is_archived": False, "is_member": True, "created": 1700000000}
        if t == "im":
            out["user"] = self.info.get("user")
            out.pop("name")
        return out


class State:
    def __init__(self, opts):
        self.opts = opts
        self.cv = threading.Condition()
        self.users = {}
        self.channels = {}
        self.seq = 0
        self.last_ts_us = 0
        self.counter = 0
        self.calls = []
        self.faults = []
        self.tickets = {}  # ticket -> {"used": bool, "time"}
        self.connections = []
        self.jobs = []  # each event, interactive payload or slash command for the app, with its deliveries
        self.deliveries = []
        self.acks = []
        self.ephemerals = []
        self.statuses = {}  # "channel:thread_ts" -> the assistant thread's status
        self.responses = []  # POSTs to response_url
        self.response_urls = {}  # response_url path -> what it answers (channel, message, user)
        self.rr = -1  # round robin over Socket Mode connections
        self.verifications = []
        self.refusals = []  # Socket Mode upgrades refused (a bad or used ticket)
        self.config = {"events_url": opts.events_url, "signing": "valid", "echo_bot_messages": True,
                       "ack_timeout": opts.ack_timeout, "max_retries": 3}
        self.bot = {"id": opts.bot_user, "team_id": opts.team, "name": opts.bot_name, "real_name": opts.bot_name,
                    "is_bot": True, "display_name": "", "bot_id": opts.bot_id}
        self.add_user(self.bot)
        self.add_user({"id": "U0ANN", "name": "ann", "real_name": "Ann Example", "display_name": "ann"})
        self.add_user({"id": "U0BOB", "name": "bob", "real_name": "Bob Example", "display_name": "bob"})
        self.add_channel({"id": "C0GENERAL", "type": "channel", "name": "general"})
        self.add_channel({"id": "D0ANN", "type": "im", "user": "U0ANN"})
        self.add_channel({"id": "D0BOB", "type": "im", "user": "U0BOB"})

    # ---- ids and times -------------------------------------------------------------------------------------

    def next_ts(self):
        """A message ts, "<seconds>.<6 digits>", strictly increasing across the workspace."""
        now = int(time.time() * 1000000)
        self.last_ts_us = max(now, self.last_ts_us + 1)
        return "%d.%06d" % divmod(self.last_ts_us, 1000000)

    def next_id(self, prefix, width=9):
        self.counter += 1
        return "%s%0*d" % (prefix, width, self.counter)

    def trigger_id(self):
        self.counter += 1
        return "%d.%s.%s" % (self.counter, self.opts.team[1:], uuid.uuid4().hex)

    def response_url(self, kind):
        self.counter += 1
        return "http://127.0.0.1:%d/%s/%s/%d/%s" % (self.opts.port, kind, self.opts.team, self.counter,
                                                   uuid.uuid4().hex[:24])

    # ---- the workspace --------------------------------------------------------------------------------------

    def add_user(self, body):
        uid = body["id"]
        name = body.get("name") or uid.lower()
        real = body.get("real_name") or name
        display = body.get("display_name", name)
        user = {"id": uid, "team_id": self.opts.team, "name": name, "deleted": False, "color": "9f69e7",
                "real_name": real, "tz": "Europe/Berlin", "tz_label": "Central European Time", "tz_offset": 3600,
                "is_admin": False, "is_owner": False, "is_primary_owner": False, "is_restricted": False,
                "is_ultra_restricted": False, "is_bot": bool(body.get("is_bot")), "is_app_user": False,
                "updated": 1700000000,
                "profile": {"real_name": real, "real_name_normalized": real, "display_name": display,
                            "display_name_normalized": display, "first_name": real.split(" ")[0],
                            "team": self.opts.team, "image_48": "https://a.slack-edge.test/%s-48.png" % uid}}
        if body.get("bot_id"):
            user["profile"]["bot_id"] = body["bot_id"]
            user["profile"]["api_app_id"] = self.opts.app_id if uid == self.opts.bot_user else ""
        self.users[uid] = user
        return user

    def add_channel(self, body):
        cid, kind = body["id"], body["type"]
        info = {"id": cid, "type": kind, "name": body.get("name") or cid.lower()}
        if kind == "im":
            if body.get("user") not in self.users:
                raise ValueError("an im needs the user it is with (one of the users)")
            info["user"] = body["user"]
            members = [body["user"], self.opts.bot_user]
        else:
            members = list(body.get("members") or [u for u in self.users if not self.users[u]["is_bot"]])
            if body.get("bot_member", True):
                members.append(self.opts.bot_user)
        for m in members:
            if m not in self.users:
                raise ValueError("no user %s" % m)
        ch = Channel(info, members)
        old = self.channels.get(cid)
        if old is not None:
            ch.messages = old.messages
        self.channels[cid] = ch
        return ch

    def channel(self, cid):
        ch = self.channels.get(cid)
        if ch is None:
            raise ApiError("channel_not_found")
        return ch

    def store(self, ch, msg, by_bot):
        self.seq += 1
        rec = Record(self.seq, ch.id, msg, by_bot)
        ch.messages[msg["ts"]] = rec
        if msg.get("thread_ts") and msg["thread_ts"] != msg["ts"]:
            ch.messages[msg["thread_ts"]].replies.append(msg["ts"])
        self.cv.notify_all()
        return rec

    def thread_root(self, ch, thread_ts):
        """The parent a new reply goes under: the message itself, or its parent when it is a reply."""
        rec = ch.messages.get(thread_ts)
        if rec is None:
            return None
        if rec.thread_ts and rec.thread_ts != rec.ts:
            return ch.messages[rec.thread_ts]
        return rec

    # ---- what the app receives -------------------------------------------------------------------------------

    def event_context(self, ch):
        raw = json.dumps({"id": ch.id, "team": self.opts.team}).encode()
        return "4-" + base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def push_event(self, event, ch):
        """Queues an Events API event_callback for the app; returns its event_id."""
        event_id = "Ev%s" % self.next_id("0", 9)
        outer = {"token": self.opts.verification_token, "team_id": self.opts.team,
                 "context_team_id": self.opts.team, "context_enterprise_id": None, "api_app_id": self.opts.app_id,
                 "event": event, "type": "event_callback", "event_id": event_id, "event_time": int(time.time()),
                 "authorizations": [{"enterprise_id": None, "team_id": self.opts.team, "user_id": self.opts.bot_user,
                                     "is_bot": True, "is_enterprise_install": False}],
                 "is_ext_shared_channel": False, "event_context": self.event_context(ch)}
        self.enqueue("events_api", outer, event_id=event_id, event_type=event["type"],
                     subtype=event.get("subtype"))
        return event_id

    def enqueue(self, kind, payload, **meta):
        job = {"id": len(self.jobs) + 1, "type": kind, "payload": payload, "state": "pending", "attempts": 0,
               "retry_reason": "", "not_before": 0.0, "deadline": None, "acked": False, "created": time.time(),
               "deliveries": []}
        job.update(meta)
        self.jobs.append(job)
        self.cv.notify_all()
        return job

    def message_event(self, ch, msg):
        ev = copy.deepcopy(msg)
        ev["channel"] = ch.id
        ev["event_ts"] = msg["ts"]
        ev["channel_type"] = ch.channel_type()
        return ev

    def deliver_message(self, ch, rec, mention_check=True):
        """The events a new message makes: `message`, and `app_mention` when it mentions the bot outside an IM."""
        ids = []
        if self.opts.bot_user not in ch.members:
            return ids
        if rec.by_bot and not self.config["echo_bot_messages"]:
            return ids
        ids.append(self.push_event(self.message_event(ch, rec.msg), ch))
        text = rec.msg.get("text") or ""
        if mention_check and ch.type != "im" and "<@%s>" % self.opts.bot_user in text and not rec.by_bot:
            mention = {k: copy.deepcopy(v) for k, v in rec.msg.items()
                       if k in ("user", "text", "ts", "thread_ts", "team", "client_msg_id", "blocks", "files",
                                "parent_user_id")}
            mention.update({"type": "app_mention", "channel": ch.id, "event_ts": rec.ts})
            ids.append(self.push_event(mention, ch))
        return ids

    def deliver_change(self, ch, rec, previous):
        if self.opts.bot_user not in ch.members or (rec.by_bot and not self.config["echo_bot_messages"]):
            return []
        ts = self.next_ts()
        ev = {"type": "message", "subtype": "message_changed", "hidden": True, "message": copy.deepcopy(rec.msg),
              "channel": ch.id, "previous_message": previous, "event_ts": ts, "ts": ts,
              "channel_type": ch.channel_type()}
        return [self.push_event(ev, ch)]

    def deliver_deletion(self, ch, rec):
        if self.opts.bot_user not in ch.members or (rec.by_bot and not self.config["echo_bot_messages"]):
            return []
        ts = self.next_ts()
        ev = {"type": "message", "subtype": "message_deleted", "hidden": True, "deleted_ts": rec.ts,
              "channel": ch.id, "previous_message": copy.deepcopy(rec.msg), "event_ts": ts, "ts": ts,
              "channel_type": ch.channel_type()}
        if rec.thread_ts:
            ev["thread_ts"] = rec.thread_ts
        return [self.push_event(ev, ch)]

    def user_message(self, ch, body):
        """A message a user (or another bot) posts, stored; the caller delivers it."""
        user = body.get("user")
        msg = {"type": "message", "text": body.get("text") or "", "ts": self.next_ts(), "team": self.opts.team}
        if body.get("bot_id"):
            msg["bot_id"] = body["bot_id"]
            if body.get("subtype"):
                msg["subtype"] = body["subtype"]
            if user:
                msg["user"] = user
            if body.get("username"):
                msg["username"] = body["username"]
        else:
            msg["user"] = user
            msg["client_msg_id"] = str(uuid.uuid4())
            if body.get("subtype"):
                msg["subtype"] = body["subtype"]
        if msg["text"]:
            msg["blocks"] = rich_text(msg["text"])
        if body.get("files"):
            msg["subtype"] = "file_share"
            msg["upload"] = False
            msg["display_as_bot"] = False
            msg["files"] = [self.file_object(f, user) for f in body["files"]]
        return msg

    def file_object(self, f, user):
        fid = self.next_id("F0", 8)
        name = f.get("name") or "file.txt"
        ext = name.rsplit(".", 1)[-1].lower() if "." in name else "text"
        out = {"id": fid, "created": int(time.time()), "timestamp": int(time.time()), "name": name, "title": name,
               "mimetype": f.get("mimetype") or "text/plain", "filetype": ext, "pretty_type": ext.upper(),
               "user": user, "user_team": self.opts.team, "editable": True, "size": int(f.get("size") or 42),
               "mode": "hosted", "is_external": False, "is_public": False,
               "url_private": "https://files.slack.test/files-pri/%s-%s/%s" % (self.opts.team, fid, name),
               "url_private_download": "https://files.slack.test/files-pri/%s-%s/download/%s" % (self.opts.team,
                                                                                                  fid, name),
               "permalink": "https://fake-team.slack.test/files/%s/%s/%s" % (user, fid, name)}
        if f.get("preview") is not None:
            out["preview"] = f["preview"]
            out["preview_is_truncated"] = False
        return out

    def user_brief(self, uid):
        u = self.users[uid]
        return {"id": uid, "username": u["name"], "name": u["name"], "team_id": self.opts.team}

    def bot_profile(self):
        return {"id": self.opts.bot_id, "deleted": False, "name": self.opts.bot_name, "updated": 1700000000,
                "app_id": self.opts.app_id, "icons": {"image_48": "https://a.slack-edge.test/bot-48.png"},
                "team_id": self.opts.team}
