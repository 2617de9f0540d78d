"""bench/py_binding_turn: echo turns through the Python bindings, side by side in one run with the pure-Python
client of the driver benchmark (bench/py_turn_client.py) and with the C++ driver (bench_turn_latency --socket
--client driver, its own process).

The method (issue 14), as bench/turn_latency's: every client runs against a runtime in the same state, a fresh
one per client and round (bench_turn_latency --serve, its own process, so each client's CPU time is its own)
with the journal pre-filled to the steady 4096 events; the order of the clients is shuffled per round.
Targets: the bindings' client CPU within 1.2x of the C++ driver's (issue 14); pure Python >= 3x the bindings
(issue 6).

Usage: /usr/bin/python3 bench/py_binding_turn.py BUILD_DIR [TURNS] [ROUNDS] [SEED]
(BUILD_DIR holds python/ with the built package and bench/bench_turn_latency.)
"""
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build-bench")
turns = int(sys.argv[2]) if len(sys.argv) > 2 else 100
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
seed = int(sys.argv[4]) if len(sys.argv) > 4 else random.randrange(1 << 30)
sys.path.insert(0, os.path.join(build, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sessionturn  # noqa: E402
import py_turn_client  # noqa: E402

BENCH = os.path.join(build, "bench", "bench_turn_latency")
PREFILL = 4096


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100 * (len(v) - 1) + 0.5))]


def serve(sock):
    """A fresh runtime at `sock`, its journal pre-filled; returns the process once it serves."""
    proc = subprocess.Popen([BENCH, "--serve", sock, "--prefill", str(PREFILL)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("serving"):
        proc.kill()
        raise RuntimeError("the runtime did not start: " + line)
    return proc


def run_bindings(sock, lat, cpu):
    driver = sessionturn.Driver.unix(sock)
    c0 = time.process_time()
    for i in range(turns):
        t0 = time.perf_counter()
        r = driver.submit_turn(f"binding turn {i}")
        lat.append((time.perf_counter() - t0) * 1000)
        assert r.status == "completed", r
    return cpu + time.process_time() - c0


def run_python(sock, lat, cpu):
    c0 = time.process_time()
    for i in range(turns):
        lat.append(py_turn_client.turn(sock, f"python turn {i}"))
    return cpu + time.process_time() - c0


def main() -> int:
    tmp = tempfile.mkdtemp(prefix="st-bench-binding-")
    sock = os.path.join(tmp, "runtime.sock")
    rng = random.Random(seed)
    lat = {"bindings": [], "python": []}
    cpu = {"bindings": 0.0, "python": 0.0}
    cxx = []
    clients = ["bindings", "python", "cxx"]
    try:
        for _ in range(rounds):
            rng.shuffle(clients)
            for client in clients:
                runtime = serve(sock)
                try:
                    if client == "cxx":
                        out = subprocess.run([BENCH, "--socket", sock, "--turns", str(turns), "--client", "driver"],
                                             capture_output=True, text=True, check=True).stdout
                        f = out.split()
                        cxx.append((float(f[2]), float(f[4]), float(f[6])))
                    elif client == "bindings":
                        cpu["bindings"] = run_bindings(sock, lat["bindings"], cpu["bindings"])
                    else:
                        cpu["python"] = run_python(sock, lat["python"], cpu["python"])
                finally:
                    runtime.kill()
                    runtime.wait(timeout=10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = turns * rounds
    print(f"binding turn latency: echo turns over a unix socket, {rounds} rounds x {turns} turns per client, a fresh "
          f"runtime per client and round (journal pre-filled to {PREFILL} events), order shuffled (seed {seed})")
    rows = {
        "Python bindings": (pct(lat["bindings"], 50), pct(lat["bindings"], 99), cpu["bindings"] / n * 1e6),
        "pure Python client": (pct(lat["python"], 50), pct(lat["python"], 99), cpu["python"] / n * 1e6),
        "C++ driver": (statistics.median(c[0] for c in cxx), statistics.median(c[1] for c in cxx),
                       statistics.median(c[2] for c in cxx)),
    }
    for name, (p50, p99, us) in rows.items():
        print(f"  {name:<20} p50 {p50:7.3f} ms  p99 {p99:7.3f} ms  client CPU {us:7.1f} us/turn")
    b, p, c = rows["Python bindings"], rows["pure Python client"], rows["C++ driver"]
    print(f"  ratio pure Python / bindings   latency p50 {p[0] / b[0]:.2f}x  client CPU {p[2] / b[2]:.2f}x"
          "  (target >= 3x)")
    print(f"  ratio bindings / C++ driver    latency p50 {b[0] / c[0]:.2f}x  client CPU {b[2] / c[2]:.2f}x"
          "  (target <= 1.2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
