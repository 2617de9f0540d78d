#!/usr/bin/python3
"""The pods/exec side of the fake Kubernetes API server: a server-side WebSocket (Python standard
library only) speaking v5.channel.k8s.io (preferred) or v4.channel.k8s.io, bridging the stdin
channel to a unix socket (the Pod's local runtime) and the socket's bytes back as stdout frames.

    handle_exec(handler, pod_socket_path, params, **faults)

`handler` is a BaseHTTPRequestHandler positioned after the request head of
GET /api/v1/namespaces/{ns}/pods/{pod}/exec?...; `params` is the parsed query (dict of lists, as
urllib.parse.parse_qs returns). Behaviour, as the real API server and kubelet:
  * sub-protocol: v5 if offered (and allowed), else v4; neither -> 400 with a Status body;
  * stdin (stream 0) bytes go to the socket; [255, 0] (v5) half-closes the socket's write side;
  * socket bytes go out as stream 1; when the socket reaches EOF the remote "process" ends: a Status
    goes out on stream 3 (Success, or Failure with an ExitCode cause), then a close frame;
  * a client close frame is echoed and ends the bridge (v4 has no half-close);
  * the socket cannot be reached -> stderr text on stream 2 and a Failure Status, as the in-Pod
    `kelos-session-runtime client` does when the runtime is down.

Faults (keyword arguments): protocols (the sub-protocols this server accepts), exit_code and
stderr_text (reported when the bridge ends), drop_after_bytes (cut the TCP connection without a
Status after that many stdout bytes), answer_pings=False (read the client's pings and never answer
them, keeping the connection open: a half-open API server as far as the client's pings can tell).

Run as a program it is a tiny standalone server for tests: `kube_exec_ws.py --pod-socket PATH
[--echo-peer] [--v4-only] [--exit-code N] [--stderr TEXT] [--token T] [--cert C --key K] [--ignore-pings]` prints "PORT <n>" and serves until stdin
closes; --echo-peer also runs a unix-socket line echo peer at PATH.
"""

import base64
import hashlib
import json
import os
import socket
import struct
import sys
import threading

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
# Bound on one client frame: stdin lines are at most 8 MiB; anything larger is an abuse.
MAX_FRAME = 16 << 20
# How long to wait for the client's close frame after ours.
CLOSE_WAIT_SECONDS = 5


def _status(success, message="", exit_code=None):
    if success:
        return {"metadata": {}, "status": "Success"}
    out = {"metadata": {}, "status": "Failure", "message": message, "reason": "NonZeroExitCode"}
    if exit_code is not None:
        out["details"] = {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]}
    return out


def _send_http_error(handler, code, reason, message):
    body = json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": message, "reason": reason, "code": code}).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
    handler.close_connection = True


class _Socket:
    """Frame I/O over the handler's streams. Writes are locked: the bridge thread sends stdout
    frames while the reader answers pings."""

    def __init__(self, handler):
        self.rfile = handler.rfile
        self.wfile = handler.wfile
        self.connection = handler.connection
        self.lock = threading.Lock()
        self.closed_sent = False

    def _read_exact(self, n):
        data = b""
        while len(data) < n:
            chunk = self.rfile.read(n - len(data))
            if not chunk:
                raise EOFError("client went away")
            data += chunk
        return data

    def read_frame(self):
        b0, b1 = self._read_exact(2)
        fin, opcode = b0 & 0x80, b0 & 0x0F
        if not b1 & 0x80:
            raise ValueError("client frame not masked")
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._read_exact(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._read_exact(8))[0]
        if n > MAX_FRAME:
            raise ValueError("client frame too large")
        mask = self._read_exact(4)
        payload = bytearray(self._read_exact(n))
        for i in range(n):
            payload[i] ^= mask[i & 3]
        return bool(fin), opcode, bytes(payload)

    def send_frame(self, opcode, payload):
        header = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            header += bytes([n])
        elif n < 65536:
            header += bytes([126]) + struct.pack("!H", n)
        else:
            header += bytes([127]) + struct.pack("!Q", n)
        with self.lock:
            if self.closed_sent:
                return False
            if opcode == 0x8:
                self.closed_sent = True
            try:
                self.wfile.write(header + payload)
                self.wfile.flush()
            except OSError:
                return False
        return True

    def send_channel(self, channel, data):
        return self.send_frame(0x2, bytes([channel]) + data)

    def abort(self):
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def handle_exec(handler, pod_socket_path, params, protocols=(V5, V4), exit_code=None, stderr_text=None,
                drop_after_bytes=None, answer_pings=True):
    headers = handler.headers
    key = headers.get("Sec-WebSocket-Key")
    if headers.get("Upgrade", "").lower() != "websocket" or not key:
        _send_http_error(handler, 400, "BadRequest", "pods/exec needs a WebSocket upgrade")
        return
    offered = [p.strip() for p in headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
    chosen = next((p for p in (V5, V4) if p in offered and p in protocols), None)
    if chosen is None:
        _send_http_error(handler, 400, "BadRequest",
                         "none of the offered sub-protocols %r is supported (want %s)" % (offered, ", ".join(protocols)))
        return
    for flag in ("stdin", "stdout"):
        # The API server parses these with Go's strconv.ParseBool: python3-kubernetes sends "True".
        if params.get(flag, ["false"])[0] not in ("1", "t", "T", "true", "TRUE", "True"):
            _send_http_error(handler, 400, "BadRequest", "this fake needs stdin=true and stdout=true")
            return
    accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
    handler.close_connection = True
    # Frames are small and interactive: without TCP_NODELAY, Nagle's algorithm and the client's delayed
    # ACK add tens of milliseconds to every reply, which a real API server (Go sets it) does not.
    try:
        handler.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass
    handler.wfile.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         "Sec-WebSocket-Accept: %s\r\nSec-WebSocket-Protocol: %s\r\n\r\n" % (accept, chosen)).encode())
    handler.wfile.flush()
    ws = _Socket(handler)
    # As the API server does: an empty message on the lowest writable stream says the exec started.
    ws.send_channel(1, b"")

    pod = None
    if pod_socket_path:
        try:
            pod = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            pod.connect(pod_socket_path)
        except OSError as e:
            pod = None
            connect_error = str(e)
    else:
        connect_error = "no runtime socket for this Pod"
    if pod is None:
        ws.send_channel(2, ("kelos-session-runtime: dial unix %s: %s\n" % (pod_socket_path, connect_error)).encode())
        ws.send_channel(3, json.dumps(_status(False, "command terminated with non-zero exit code: exit code 1",
                                              1)).encode())
        ws.send_frame(0x8, struct.pack("!H", 1000))
        _await_close(ws)
        return

    client_closed = threading.Event()

    def client_reader():
        try:
            while True:
                fin, opcode, payload = ws.read_frame()
                if opcode == 0x8:
                    ws.send_frame(0x8, payload[:2])
                    client_closed.set()
                    break
                if opcode == 0x9:
                    if answer_pings:
                        ws.send_frame(0xA, payload)
                    continue
                if opcode in (0x1, 0x2, 0x0) and payload:
                    channel, data = payload[0], payload[1:]
                    if channel == 0:
                        pod.sendall(data)
                    elif channel == 255 and chosen == V5 and data[:1] == b"\x00":
                        pod.shutdown(socket.SHUT_WR)
        except (EOFError, OSError, ValueError):
            pass
        finally:
            client_closed.set()
            # The client is gone or closed: the remote "process" loses its input and ends.
            try:
                pod.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    reader = threading.Thread(target=client_reader, daemon=True)
    reader.start()
    sent = 0
    try:
        while True:
            data = pod.recv(65536)
            if not data:
                break
            if drop_after_bytes is not None and sent + len(data) > drop_after_bytes:
                ws.send_channel(1, data[:max(0, drop_after_bytes - sent)])
                ws.abort()
                return
            sent += len(data)
            if not ws.send_channel(1, data):
                break
    except OSError:
        pass
    finally:
        pod.close()
    if not client_closed.is_set():
        if stderr_text:
            ws.send_channel(2, stderr_text.encode())
        if exit_code:
            status = _status(False, "command terminated with non-zero exit code: error executing command "
                                    "[%s], exit code %d" % (" ".join(params.get("command", [])), exit_code), exit_code)
        else:
            status = _status(True)
        ws.send_channel(3, json.dumps(status).encode())
        ws.send_frame(0x8, struct.pack("!H", 1000))
    reader.join(CLOSE_WAIT_SECONDS)
    ws.abort()


def _await_close(ws):
    try:
        for _ in range(100):
            _, opcode, _ = ws.read_frame()
            if opcode == 0x8:
                break
    except (EOFError, OSError, ValueError):
        pass
    ws.abort()


def _echo_peer(path, ready):
    """A unix-socket peer that echoes each line; "stderr:<text>" is not special here (the bridge's
    stderr comes from its own options)."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(16)
    ready.set()

    def serve(conn):
        with conn:
            try:
                serve_lines(conn)
            except OSError:
                pass  # the bridge went away (client closed): nothing to report

    def serve_lines(conn):
        buf = b""
        while True:
            data = conn.recv(65536)
            if not data:
                break
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line == b"quit":
                    return
                conn.sendall(b"echo:" + line + b"\n")
        # Input ended (half-close): say goodbye, then end, as the runtime does.
        conn.sendall(b"eof-seen\n")

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def main():
    import argparse
    import urllib.parse
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    p = argparse.ArgumentParser()
    p.add_argument("--pod-socket", required=True)
    p.add_argument("--echo-peer", action="store_true")
    p.add_argument("--v4-only", action="store_true")
    p.add_argument("--exit-code", type=int, default=None)
    p.add_argument("--stderr", default=None)
    p.add_argument("--drop-after", type=int, default=None)
    p.add_argument("--token", default=None)
    p.add_argument("--cert", default=None)
    p.add_argument("--key", default=None)
    p.add_argument("--ignore-pings", action="store_true")
    args = p.parse_args()
    if args.echo_peer:
        ready = threading.Event()
        threading.Thread(target=_echo_peer, args=(args.pod_socket, ready), daemon=True).start()
        ready.wait(10)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            pass

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            parts = url.path.strip("/").split("/")
            if args.token is not None and self.headers.get("Authorization") != "Bearer " + args.token:
                _send_http_error(self, 401, "Unauthorized", "Unauthorized")
                return
            if len(parts) == 7 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods" and \
                    parts[6] == "exec":
                params = urllib.parse.parse_qs(url.query)
                if params.get("container") != ["kelos-agent"] or \
                        params.get("command") != ["/kelos/bin/kelos-session-runtime", "client"]:
                    _send_http_error(self, 400, "BadRequest", "unexpected container/command: %r" % (params,))
                    return
                handle_exec(self, args.pod_socket, params, protocols=(V4,) if args.v4_only else (V5, V4),
                            exit_code=args.exit_code, stderr_text=args.stderr, drop_after_bytes=args.drop_after,
                            answer_pings=not args.ignore_pings)
                return
            _send_http_error(self, 404, "NotFound", 'pods "%s" not found' % (parts[5] if len(parts) > 5 else ""))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if args.cert:
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.cert, args.key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("PORT", server.server_address[1], flush=True)
    sys.stdin.read()
    server.shutdown()
    if args.echo_peer:
        try:
            os.unlink(args.pod_socket)
        except OSError:
            pass


if __name__ == "__main__":
    main()
