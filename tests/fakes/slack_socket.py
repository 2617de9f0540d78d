"""How the Slack fake (slack_api.py) reaches the app: Socket Mode connections (RFC 6455 server side, written here so
the fake can drop, close, mute and refuse exactly as a test asks) and Events API requests over HTTP, both fed by
one delivery loop that retries what the app does not acknowledge.

A job (state.jobs) is one event, interactive payload or slash command. Each attempt to hand it over is a
delivery (state.deliveries). Over Socket Mode every delivery is a new envelope (its own envelope_id, the same
payload and event_id) with retry_attempt and retry_reason "timeout" when the one before went unacknowledged for
--ack-timeout seconds; over HTTP a retry carries X-Slack-Retry-Num and X-Slack-Retry-Reason (http_timeout,
http_error, connection_failed). Only Events API jobs are retried (at most 3 times), as on Slack: an unanswered
interactive payload or slash command only shows the user an error.
"""

import base64
import hashlib
import hmac
import json
import queue
import socket
import struct
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_MESSAGE = 1 << 20
HTTP_RETRY_DELAYS = (0.1, 0.5, 1.0)  # Slack: at once, after 1 minute, after 5 minutes; shortened for tests
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10


def accept_key(key):
    return base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()


def frame(opcode, payload):
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([n])
    elif n < 65536:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
    return head + payload


class Closed(Exception):
    pass


class Connection:
    """One Socket Mode WebSocket. Its handler thread reads; a writer thread sends what others queue."""

    def __init__(self, state, sock, rfile, ticket):
        self.state = state
        self.sock = sock
        self.rfile = rfile
        self.ticket = ticket
        self.index = len(state.connections)
        self.out = queue.Queue()
        self.status = "open"
        self.hello_sent = False
        self.muted = False
        self.draining = False
        self.disconnect_reason = None
        self.close_sent = False
        self.close_deadline = None
        self.close_code = None
        self.closed_by = None
        self.opened = time.time()
        self.closed = None
        self.envelopes = []
        self.acks = 0
        self.pings_sent = 0
        self.pongs = []  # latency of each answered server ping, seconds
        self.client_pings = 0
        self.dropped_while_muted = 0
        self.unexpected = []
        self.pending_pings = {}
        self.ping_due = time.time() + state.opts.ping_interval
        state.connections.append(self)

    def view(self):
        return {"index": self.index, "status": self.status, "hello_sent": self.hello_sent, "muted": self.muted,
                "draining": self.draining, "disconnect_reason": self.disconnect_reason, "opened": self.opened,
                "closed": self.closed, "close_code": self.close_code, "closed_by": self.closed_by,
                "envelopes": list(self.envelopes), "acks": self.acks, "pings_sent": self.pings_sent,
                "pongs": len(self.pongs), "pong_latencies": list(self.pongs), "client_pings": self.client_pings,
                "dropped_while_muted": self.dropped_while_muted, "unexpected": list(self.unexpected)}

    def usable(self):
        return self.status == "open" and self.hello_sent

    # ---- sending (callers hold state.cv) -----------------------------------------------------------------------

    def send(self, opcode, payload):
        if self.status != "closed" and not self.close_sent:
            self.out.put(frame(opcode, payload))

    def send_json(self, value):
        self.send(OP_TEXT, json.dumps(value).encode())

    def send_close(self, code, reason=""):
        if not self.close_sent and self.status != "closed":
            self.out.put(frame(OP_CLOSE, struct.pack("!H", code) + reason.encode()))
            self.close_sent = True
            self.status = "closing"
            self.close_deadline = time.time() + 2

    def drop(self, by):
        """Closes the TCP connection without a close frame."""
        if self.status == "closed":
            return
        self.mark_closed(by)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def mark_closed(self, by, code=None):
        if self.status != "closed":
            self.status = "closed"
            self.closed = time.time()
            self.closed_by = by
            self.close_code = code
            self.out.put(None)
            self.state.cv.notify_all()

    def hello(self):
        live = [c for c in self.state.connections if c.status == "open"]
        self.send_json({"type": "hello", "num_connections": len(live),
                        "debug_info": {"host": "applink-fake-%d" % self.index, "build_number": 1,
                                       "approximate_connection_time": 3600},
                        "connection_info": {"app_id": self.state.opts.app_id}})
        self.hello_sent = True
        if len(live) > self.state.opts.max_connections:
            self.disconnect("too_many_websockets", 1)
        self.state.cv.notify_all()

    def disconnect(self, reason, close_after):
        self.send_json({"type": "disconnect", "reason": reason,
                        "debug_info": {"host": "applink-fake-%d" % self.index}})
        self.draining = True
        self.disconnect_reason = reason
        if close_after is not None:
            self.close_deadline = time.time() + close_after
        self.state.cv.notify_all()

    # ---- the connection's threads --------------------------------------------------------------------------

    def write_loop(self):
        while True:
            data = self.out.get()
            if data is None:
                return
            try:
                self.sock.sendall(data)
            except OSError:
                with self.state.cv:
                    self.mark_closed("network")
                return

    def read_exact(self, n):
        data = self.rfile.read(n)
        if data is None or len(data) < n:
            raise Closed()
        return data

    def read_frame(self):
        b0, b1 = self.read_exact(2)
        fin, opcode, masked, n = b0 & 0x80, b0 & 0x0F, b1 & 0x80, b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self.read_exact(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self.read_exact(8))[0]
        if not masked or n > MAX_MESSAGE or b0 & 0x70:
            raise ValueError(1009 if n > MAX_MESSAGE else 1002)
        mask = self.read_exact(4)
        data = bytearray(self.read_exact(n))
        for i in range(n):
            data[i] ^= mask[i % 4]
        return bool(fin), opcode, bytes(data)

    def run(self):
        threading.Thread(target=self.write_loop, daemon=True).start()
        with self.state.cv:
            self.hello()
        parts, kind = [], None
        try:
            while True:
                fin, opcode, data = self.read_frame()
                if opcode >= 8:
                    self.control(opcode, data)
                    continue
                if opcode in (OP_TEXT, OP_BINARY):
                    parts, kind = [data], opcode
                elif opcode == OP_CONT and kind is not None:
                    parts.append(data)
                else:
                    raise ValueError(1002)
                if sum(len(p) for p in parts) > MAX_MESSAGE:
                    raise ValueError(1009)
                if fin:
                    self.message(kind, b"".join(parts))
                    parts, kind = [], None
        except Closed:
            with self.state.cv:
                self.mark_closed("server" if self.close_sent else "client_eof")
        except ValueError as e:
            with self.state.cv:
                self.send_close(e.args[0] if isinstance(e.args[0], int) else 1002)
        except OSError:
            with self.state.cv:
                self.mark_closed(self.closed_by or "network")
        finally:
            time.sleep(0.05)
            with self.state.cv:
                self.mark_closed(self.closed_by or "server")
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def control(self, opcode, data):
        with self.state.cv:
            if self.muted:
                self.dropped_while_muted += 1
                return
            if opcode == OP_PING:
                self.client_pings += 1
                self.send(OP_PONG, data)
            elif opcode == OP_PONG:
                sent = self.pending_pings.pop(data, None)
                if sent is not None:
                    self.pongs.append(round(time.time() - sent, 4))
                    self.state.cv.notify_all()
            elif opcode == OP_CLOSE:
                code = struct.unpack("!H", data[:2])[0] if len(data) >= 2 else 1005
                by = "server" if self.close_sent else "client"
                if not self.close_sent:
                    self.out.put(frame(OP_CLOSE, data[:2]))
                    self.close_sent = True
                self.mark_closed(by, code)
                raise Closed()

    def message(self, kind, data):
        with self.state.cv:
            if self.muted:
                self.dropped_while_muted += 1
                return
            try:
                value = json.loads(data.decode()) if kind == OP_TEXT else None
            except ValueError:
                value = None
            if isinstance(value, dict) and value.get("envelope_id"):
                ack(self.state, self, value["envelope_id"], value.get("payload"))
            else:
                self.unexpected.append(data[:500].decode("utf-8", "replace"))
                self.state.cv.notify_all()


def ack(state, conn, envelope_id, payload):
    now = time.time()
    found = state_envelope = None  # the delivery this envelope id belongs to, and its job
    for d in reversed(state.deliveries):
        if d.get("envelope_id") == envelope_id:
            found = d
            break
    record = {"seq": len(state.acks) + 1, "envelope_id": envelope_id, "connection": conn.index, "payload": payload,
              "time": now, "job": None, "latency": None, "late": False, "known": found is not None}
    if found is not None:
        job = state.jobs[found["job"] - 1]
        state_envelope = job
        record.update({"job": job["id"], "latency": round(now - found["time"], 4), "type": job["type"],
                       "event_id": job.get("event_id"), "retry_attempt": found["retry_attempt"],
                       "late": job["acked"] or job["state"] != "inflight" or job["deliveries"][-1] != found["seq"]})
        found["acked"] = True
        found["ack_latency"] = record["latency"]
        if not job["acked"]:
            job["acked"] = True
            job["state"] = "acked"
            job["response"] = payload
    conn.acks += 1
    state.acks.append(record)
    if state_envelope is not None and state_envelope["type"] == "slash_commands" and isinstance(payload, dict) and \
            (payload.get("text") or payload.get("blocks")):
        state.ephemerals.append({"channel": state_envelope["payload"].get("channel_id"), "via": "ack",
                                 "user": state_envelope["payload"].get("user_id"), "text": payload.get("text"),
                                 "blocks": payload.get("blocks"), "response_type": payload.get("response_type"),
                                 "time": now})
    state.cv.notify_all()


# ---- Events API over HTTP ------------------------------------------------------------------------------------

def sign(secret, timestamp, body):
    return "v0=" + hmac.new(secret.encode(), b"v0:%s:%s" % (str(timestamp).encode(), body),
                            hashlib.sha256).hexdigest()


def signed_headers(secret, mode, body):
    """Signature headers for a request body by mode: valid, forged, stale, missing or bad_format."""
    now = int(time.time())
    if mode == "missing":
        return {}
    if mode == "stale":
        return {"X-Slack-Request-Timestamp": str(now - 600), "X-Slack-Signature": sign(secret, now - 600, body)}
    if mode == "forged":
        return {"X-Slack-Request-Timestamp": str(now), "X-Slack-Signature": sign("not-" + secret, now, body)}
    if mode == "bad_format":
        return {"X-Slack-Request-Timestamp": str(now),
                "X-Slack-Signature": "sha256=" + sign(secret, now, body)[3:]}
    return {"X-Slack-Request-Timestamp": str(now), "X-Slack-Signature": sign(secret, now, body)}


def http_body(job):
    if job["type"] == "events_api" or job["type"] == "url_verification":
        return json.dumps(job["payload"]).encode(), "application/json"
    if job["type"] == "interactive":
        return urllib.parse.urlencode({"payload": json.dumps(job["payload"])}).encode(), \
            "application/x-www-form-urlencoded"
    return urllib.parse.urlencode(job["payload"]).encode(), "application/x-www-form-urlencoded"


def post(url, body, headers, timeout):
    """(status, answer text, retry reason or None, X-Slack-No-Retry) for one POST to the app."""
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read(4000).decode("utf-8", "replace"), None, False
    except urllib.error.HTTPError as e:
        return e.code, e.read(4000).decode("utf-8", "replace"), "http_error", e.headers.get("X-Slack-No-Retry") == "1"
    except (socket.timeout, TimeoutError):
        return None, "", "http_timeout", False
    except urllib.error.URLError as e:
        if isinstance(e.reason, (socket.timeout, TimeoutError)):
            return None, "", "http_timeout", False
        return None, str(e.reason), "connection_failed", False
    except OSError as e:
        return None, str(e), "connection_failed", False


def http_deliver(state, job, url, mode, attempt, reason, timeout):
    body, ctype = http_body(job)
    headers = {"Content-Type": ctype, "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)"}
    headers.update(signed_headers(state.opts.signing_secret, mode, body))
    if attempt:
        headers["X-Slack-Retry-Num"] = str(attempt)
        headers["X-Slack-Retry-Reason"] = reason
    started = time.time()
    status, answer, failure, no_retry = post(url, body, headers, timeout)
    with state.cv:
        d = state.deliveries[job["deliveries"][-1] - 1]
        d.update({"status": status, "answer": answer, "error": failure, "latency": round(time.time() - started, 4)})
        if failure is None:
            d["acked"] = True
            job.update({"acked": True, "state": "acked", "response": answer})
        elif job["type"] == "events_api" and not no_retry and job["attempts"] <= state.config["max_retries"]:
            job.update({"state": "pending", "retry_reason": failure,
                        "not_before": time.time() + HTTP_RETRY_DELAYS[min(job["attempts"], 3) - 1]})
        else:
            job.update({"state": "given_up", "reason": failure})
        state.cv.notify_all()


# ---- the delivery loop ---------------------------------------------------------------------------------------

def record_delivery(state, job, **fields):
    d = {"seq": len(state.deliveries) + 1, "job": job["id"], "type": job["type"], "event_id": job.get("event_id"),
         "event_type": job.get("event_type"), "retry_attempt": job["attempts"], "retry_reason": job["retry_reason"],
         "time": time.time(), "acked": False, "ack_latency": None}
    d.update(fields)
    state.deliveries.append(d)
    job["deliveries"].append(d["seq"])
    job["attempts"] += 1
    return d


def pick_connection(state):
    live = [c for c in state.connections if c.usable()]
    preferred = [c for c in live if not c.draining] or live
    if not preferred:
        return None
    state.rr += 1
    return preferred[state.rr % len(preferred)]


def deliver_socket(state, job, conn, now):
    env_id = str(uuid.uuid4())
    envelope = {"envelope_id": env_id, "payload": job["payload"], "type": job["type"],
                "accepts_response_payload": job["type"] == "slash_commands"}
    if job["type"] == "events_api":
        envelope["retry_attempt"] = job["attempts"]
        envelope["retry_reason"] = job["retry_reason"]
    record_delivery(state, job, transport="socket", envelope_id=env_id, connection=conn.index,
                    written=not conn.muted)
    conn.envelopes.append(env_id)
    if not conn.muted:
        conn.send_json(envelope)
    job.update({"state": "inflight", "deadline": now + state.config["ack_timeout"]})


def step(state, now):
    """One pass of the delivery loop, with state.cv held."""
    opts = state.opts
    for c in state.connections:
        if c.status == "closed":
            continue
        if c.close_deadline is not None and now >= c.close_deadline:
            if c.status == "closing":
                c.drop("server")
            else:
                c.send_close(1000)
            continue
        if opts.ping_interval > 0 and c.status == "open" and now >= c.ping_due and not c.muted:
            payload = ("%.6f" % now).encode()
            c.pending_pings[payload] = now
            c.pings_sent += 1
            c.send(OP_PING, payload)
            c.ping_due = now + opts.ping_interval
    url_for = {"events_api": state.config.get("events_url"),
               "interactive": state.config.get("interactivity_url") or state.config.get("events_url"),
               "slash_commands": state.config.get("commands_url") or state.config.get("events_url")}
    for job in state.jobs:
        if job["state"] == "inflight" and job["deadline"] is not None and now >= job["deadline"]:
            if job["type"] == "events_api" and job["attempts"] <= state.config["max_retries"]:
                job.update({"state": "pending", "retry_reason": "timeout", "not_before": now})
            else:
                job.update({"state": "given_up", "reason": "timeout"})
            state.cv.notify_all()
        if job["state"] != "pending" or now < job["not_before"]:
            continue
        url = url_for.get(job["type"])
        if url:
            record_delivery(state, job, transport="http", url=url, signing=state.config["signing"], status=None)
            job.update({"state": "posting", "deadline": None})
            threading.Thread(target=http_deliver, daemon=True,
                             args=(state, job, url, state.config["signing"], job["attempts"] - 1,
                                   job["retry_reason"], state.config["ack_timeout"])).start()
            state.cv.notify_all()
            continue
        conn = pick_connection(state)
        if conn is not None:
            deliver_socket(state, job, conn, now)
            state.cv.notify_all()


def delivery_loop(state):
    while True:
        with state.cv:
            step(state, time.time())
            state.cv.wait(0.05)
