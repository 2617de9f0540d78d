"""The turn-latency benchmark's Python comparison: the same exchange as Driver::SubmitTurn over the same
unix socket (connect, subscribe with history bounds and the message pipelined behind it, follow our turn to
turn.completed), standard library only. Prints one latency per turn in milliseconds, then the client's
CPU time over all turns ("cpu_ms X", interpreter start-up excluded)."""
import json
import socket
import sys
import time
import uuid


def turn(path: str, prompt: str) -> float:
    t0 = time.perf_counter()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    f = s.makefile("rwb", buffering=0)
    request_id = str(uuid.uuid4())
    # Pipelined like the driver: the runtime answers one connection's requests in order.
    s.sendall(json.dumps({"type": "subscribe", "historyBounds": True, "historyItems": 1,
                          "historyBytes": 1024}).encode() + b"\n" +
              json.dumps({"type": "message", "requestId": request_id, "text": prompt}).encode() + b"\n")
    turn_id = None
    reply = []
    buf = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            raise RuntimeError("runtime closed the stream")
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            t = ev.get("type")
            if t in ("user.message", "user.message.updated") and ev.get("requestId") == request_id:
                turn_id = ev.get("turnId")
            elif turn_id and ev.get("turnId") == turn_id:
                if t == "assistant.message":
                    reply.append(ev.get("text", "").strip())
                elif t == "turn.completed":
                    f.close()
                    s.close()
                    return (time.perf_counter() - t0) * 1000.0


def main() -> None:
    path, n = sys.argv[1], int(sys.argv[2])
    latencies = []
    c0 = time.process_time()
    for i in range(n):
        latencies.append(turn(path, f"python turn {i}"))
    cpu_ms = (time.process_time() - c0) * 1000.0
    for ms in latencies:
        print(f"{ms:.3f}")
    print(f"cpu_ms {cpu_ms:.3f}")


if __name__ == "__main__":
    main()
