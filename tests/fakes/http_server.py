#!/usr/bin/python3
"""A small HTTP/1.1 test server for HttpClient (standard library only; loopback only).

Three listeners on 127.0.0.1: plain HTTP, HTTPS (a CA generated per run with the openssl CLI, the same
certificates as kube_apiserver.py: the server certificate names 127.0.0.1, localhost and kube.test),
and a "silent" TCP port that accepts connections and never sends a byte (handshake timeouts).

Usage: http_server.py --dir DIR
Writes DIR/ca.crt (and the other certificates) and, once listening, DIR/ready.json
{"http": PORT, "https": PORT, "silent": PORT} (written atomically).

Endpoints (every response has a Content-Length or is chunked; connections are kept alive):
  GET  /hello                       200 "hello"
  ANY  /echo                        200 JSON {"method", "path", "query", "headers": {lower-case name: value}, "body"}
  GET  /status?code=N&retry_after=V N with an optional Retry-After: V and a short text body
  GET  /chunked?n=N&size=S&delay=D  chunked: N chunks of S bytes ("0123456789" repeated), D seconds apart
  GET  /stream?interval=D           chunked lines "line <i>\\n" every D seconds until the client goes away
  GET  /delay?seconds=D             waits D seconds, then 200 "late"
  GET  /slow-body?seconds=D         headers and half the body at once, the rest after D seconds
  GET  /big?bytes=N                 200 with N bytes
  GET  /_stats                      {"connections": {"http": n, "https": n, "silent": n}, "requests": n,
                                     "streams_ended": n, "stream_lines": [lines sent by each ended stream]}
"""

import argparse
import json
import os
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kube_apiserver import make_certs  # noqa: E402  (the same CA and certificates)

LOCK = threading.Lock()
STATS = {"connections": {"http": 0, "https": 0, "silent": 0}, "requests": 0, "streams_ended": 0, "stream_lines": []}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sessionturn-test-http"

    def log_message(self, fmt, *args):  # quiet
        pass

    def setup(self):
        super().setup()
        # Headers and body are separate writes: without this the body waits for the client's
        # delayed ACK (Nagle), 40 ms a response on a kept-alive connection.
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        with LOCK:
            STATS["connections"][self.server.scheme] += 1

    def send_body(self, code, body, content_type="text/plain", headers=None):
        data = body if isinstance(body, bytes) else body.encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_any(self):
        with LOCK:
            STATS["requests"] += 1
        url = urllib.parse.urlsplit(self.path)
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        body = self.read_body()
        try:
            self.route(url.path, url.query, q, body)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_any

    def route(self, path, query, q, body):
        if path == "/hello":
            self.send_body(200, "hello")
        elif path == "/echo":
            self.send_body(200, json.dumps({
                "method": self.command, "path": path, "query": query,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body.decode("utf-8", "replace")}), "application/json")
        elif path == "/status":
            code = int(q.get("code", "500"))
            headers = {"Retry-After": q["retry_after"]} if "retry_after" in q else {}
            self.send_body(code, "status %d" % code, headers=headers)
        elif path == "/chunked":
            n, size, delay = int(q.get("n", "3")), int(q.get("size", "10")), float(q.get("delay", "0"))
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            piece = (b"0123456789" * (size // 10 + 1))[:size]
            for _ in range(n):
                self.chunk(piece)
                if delay:
                    time.sleep(delay)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        elif path == "/stream":
            interval = float(q.get("interval", "0.02"))
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            i = 0
            try:
                while True:
                    self.chunk(b"line %d\n" % i)
                    i += 1
                    time.sleep(interval)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
                self.close_connection = True
                with LOCK:
                    STATS["streams_ended"] += 1
                    STATS["stream_lines"].append(i)
        elif path == "/delay":
            time.sleep(float(q.get("seconds", "1")))
            self.send_body(200, "late")
        elif path == "/slow-body":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "10")
            self.end_headers()
            self.wfile.write(b"01234")
            self.wfile.flush()
            time.sleep(float(q.get("seconds", "1")))
            self.wfile.write(b"56789")
        elif path == "/big":
            self.send_body(200, b"x" * int(q.get("bytes", "1000")))
        elif path == "/_stats":
            with LOCK:
                self.send_body(200, json.dumps(STATS), "application/json")
        else:
            self.send_body(404, "no such path " + path)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512  # many concurrent connections in the concurrency tests

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (BrokenPipeError, ConnectionResetError, ssl.SSLError, socket.timeout, OSError)):
            return
        super().handle_error(request, client_address)


def silent_listener():
    """Accepts connections and never answers (a TLS handshake against it times out)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    held = []

    def loop():
        while True:
            conn, _ = s.accept()
            with LOCK:
                STATS["connections"]["silent"] += 1
            held.append(conn)  # kept open, never written to

    threading.Thread(target=loop, daemon=True).start()
    return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    make_certs(args.dir)

    plain = Server(("127.0.0.1", 0), Handler)
    plain.scheme = "http"
    tls = Server(("127.0.0.1", 0), Handler)
    tls.scheme = "https"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(args.dir, "server.crt"), os.path.join(args.dir, "server.key"))
    ctx.set_alpn_protocols(["http/1.1"])
    tls.socket = ctx.wrap_socket(tls.socket, server_side=True, do_handshake_on_connect=False)
    silent = silent_listener()
    for srv in (plain, tls):
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    tmp = os.path.join(args.dir, "ready.json.tmp")
    with open(tmp, "w") as f:
        json.dump({"http": plain.server_address[1], "https": tls.server_address[1], "silent": silent}, f)
    os.replace(tmp, os.path.join(args.dir, "ready.json"))
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
