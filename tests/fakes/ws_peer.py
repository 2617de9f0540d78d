#!/usr/bin/python3
"""An independent WebSocket server for the C++ client's tests, built on Debian's python3-websockets.

Started per test; prints "PORT <n>" on stdout once listening and runs until its stdin closes (the
test's end) or it is killed. Every connection is driven by the client's text/binary messages:

  "big N"      one unfragmented message of N bytes
  "frag N K"   one message of N bytes sent as K-byte fragments, with a ping between fragments
  "stream N"   N binary messages of 1 KiB, back to back
  "ping"       the server pings ("hello-ping") and answers "pong-ok" once the pong arrived
  "close"      the server closes with code 4000, reason "bye"
  "headers"    the server answers with the request's Authorization header ("auth:<value>")
  "proto"      the server answers with the agreed sub-protocol ("proto:<name>")
  "pings"      the server answers "pings:<count>:<payload of the last>" for the client's pings so far
  "mute-pongs" the server answers "muted", then leaves every later ping unanswered and sends
               nothing more, keeping the connection open (a half-open peer, as far as pings tell)
  anything else is echoed back with its type (text or binary).

Options choose the handshake: --subprotocols (comma-separated, "" = none), --token (401 with a
Kubernetes Status unless "Authorization: Bearer <token>"), --forbid (403 Status), --bad-accept (a raw
101 with a wrong Sec-WebSocket-Accept), --cert/--key (TLS), --client-ca (require a client certificate).
"""

import argparse
import asyncio
import http
import json
import ssl
import sys
import threading

import websockets
import websockets.legacy.server


def status_body(code, reason, message):
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": message, "reason": reason, "code": code}).encode()


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--subprotocols", default="v5.channel.k8s.io,v4.channel.k8s.io")
    p.add_argument("--token", default=None)
    p.add_argument("--forbid", action="store_true")
    p.add_argument("--bad-accept", action="store_true")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--client-ca")
    p.add_argument("--max-size", type=int, default=64 << 20)
    p.add_argument("--proxy", action="store_true", help="be an HTTP CONNECT proxy instead (prints CONNECT lines)")
    return p.parse_args()


def watch_pings(ws):
    """Counts the client's pings and can stop answering them. websockets' legacy protocol answers
    every ping it reads through `ws.pong`, so wrapping that method sees each one."""
    state = {"count": 0, "last": b"", "muted": False}
    answer = ws.pong

    async def pong(data=b""):
        state["count"] += 1
        state["last"] = data if isinstance(data, bytes) else str(data).encode()
        if not state["muted"]:
            await answer(data)

    ws.pong = pong
    return state


async def handler(ws, path=None):
    pings = watch_pings(ws)
    try:
        async for message in ws:
            text = message if isinstance(message, str) else None
            if text is None:
                try:
                    text = message.decode("ascii")
                except UnicodeDecodeError:
                    text = ""
            words = text.split()
            if words[:1] == ["big"]:
                await ws.send(b"b" * int(words[1]))
            elif words[:1] == ["frag"]:
                total, size = int(words[1]), int(words[2])

                async def fragments():
                    sent = 0
                    index = 0
                    while sent < total:
                        n = min(size, total - sent)
                        yield bytes([65 + index % 26]) * n
                        sent += n
                        index += 1
                        # A control frame between two fragments of one message (RFC 6455 §5.4).
                        if sent < total:
                            await ws.ping(b"mid-%d" % index)

                await ws.send(fragments())
            elif words[:1] == ["stream"]:
                # Many messages back to back: some are still in flight when the client closes.
                for i in range(int(words[1])):
                    await ws.send(b"s" * 1024)
            elif words == ["ping"]:
                waiter = await ws.ping(b"hello-ping")
                await asyncio.wait_for(waiter, 10)
                await ws.send("pong-ok")
            elif words == ["close"]:
                await ws.close(4000, "bye")
                return
            elif words == ["headers"]:
                await ws.send("auth:" + ws.request_headers.get("Authorization", ""))
            elif words == ["proto"]:
                await ws.send("proto:" + (ws.subprotocol or ""))
            elif words == ["pings"]:
                await ws.send("pings:%d:%s" % (pings["count"], pings["last"].decode("ascii", "replace")))
            elif words == ["mute-pongs"]:
                await ws.send("muted")
                pings["muted"] = True
            else:
                await ws.send(message)
    except websockets.ConnectionClosed:
        pass


def make_process_request(args):
    async def process_request(path, headers):
        if args.forbid:
            body = status_body(403, "Forbidden", 'pods "p" is forbidden: User "u" cannot create resource "pods/exec"')
            return http.HTTPStatus.FORBIDDEN, [("Content-Type", "application/json")], body
        if args.token is not None and headers.get("Authorization", "") != "Bearer " + args.token:
            return http.HTTPStatus.UNAUTHORIZED, [("Content-Type", "application/json")], \
                status_body(401, "Unauthorized", "Unauthorized")
        return None
    return process_request


async def bad_accept_server(ssl_ctx):
    async def serve(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        proto = b"v5.channel.k8s.io"
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     b"Sec-WebSocket-Accept: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: " + proto +
                     b"\r\n\r\n")
        await writer.drain()
        del head
        try:
            await reader.read()
        finally:
            writer.close()
    return await asyncio.start_server(serve, "127.0.0.1", 0, ssl=ssl_ctx)


async def connect_proxy():
    """A minimal HTTP CONNECT proxy: tunnels to the requested host:port on loopback only."""
    async def pipe(reader, writer):
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def serve(reader, writer):
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        line = head.split("\r\n", 1)[0]
        sys.stderr.write("proxy: " + line + "\n")
        method, authority, _ = line.split(" ", 2)
        host, port = authority.rsplit(":", 1)
        # Names under .invalid (RFC 2606) resolve nowhere, so a client that reaches the server with
        # one of them provably went through this proxy; they are tunnelled to loopback.
        if method != "CONNECT" or not (host.endswith(".invalid") or host in ("127.0.0.1", "localhost")):
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
    return await asyncio.start_server(serve, "127.0.0.1", 0)


def stdin_closed(loop, stop):
    sys.stdin.read()
    loop.call_soon_threadsafe(stop.set_result, None)


async def main():
    args = parse_args()
    ssl_ctx = None
    if args.cert:
        ssl_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ssl_ctx.load_cert_chain(args.cert, args.key)
        if args.client_ca:
            ssl_ctx.verify_mode = ssl.CERT_REQUIRED
            ssl_ctx.load_verify_locations(args.client_ca)
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    if args.proxy:
        server = await connect_proxy()
    elif args.bad_accept:
        server = await bad_accept_server(ssl_ctx)
    else:
        subprotocols = [p for p in args.subprotocols.split(",") if p] or None
        server = await websockets.serve(handler, "127.0.0.1", 0, ssl=ssl_ctx, subprotocols=subprotocols,
                                        compression=None, max_size=args.max_size,
                                        process_request=make_process_request(args), ping_interval=None)
    port = server.sockets[0].getsockname()[1]
    print("PORT", port, flush=True)
    threading.Thread(target=stdin_closed, args=(loop, stop), daemon=True).start()
    await stop
    server.close()


if __name__ == "__main__":
    asyncio.run(main())
