"""The decode benchmark's Python comparison: the same work as bench_decode (split lines, skip blanks,
json.loads each into a dict, read the fields a client reads), best of 3. Standard library only."""
import json
import sys
import time


def run(data: bytes) -> int:
    n = 0
    checksum = 0
    for raw in data.split(b"\n"):
        line = raw.rstrip(b"\r")
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if not isinstance(ev, dict):
            continue
        checksum += int(ev.get("id", 0)) + len(ev.get("text", ""))
        ev.get("type"), ev.get("turnId"), ev.get("requestId"), ev.get("output")
        n += 1
    return n


def main() -> None:
    data = open(sys.argv[1], "rb").read()
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        run(data)
        dt = time.perf_counter() - t0
        best = max(best, len(data) / 1e6 / dt)
    print(f"python_mbps {best:.1f}")


if __name__ == "__main__":
    main()
