"""bench/py_binding_turn: echo turns through the Python bindings, side by side in one run with the pure-Python
client of the driver benchmark (bench/py_turn_client.py) and with the C++ driver (bench_turn_latency --socket).
The runtime runs in its own process (a LocalRuntime with no echo delay), so each client's CPU time per turn is
its own. Targets (issue 6): bindings >= 3x faster than pure Python, within 1.5x of the C++ driver.

Usage: /usr/bin/python3 bench/py_binding_turn.py BUILD_DIR [TURNS] [ROUNDS]
(BUILD_DIR holds python/ with the built package and bench/bench_turn_latency.)
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build-bench")
turns = int(sys.argv[2]) if len(sys.argv) > 2 else 100
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
sys.path.insert(0, os.path.join(build, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sessionturn  # noqa: E402
import py_turn_client  # noqa: E402


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100 * (len(v) - 1) + 0.5))]


def main() -> int:
    tmp = tempfile.mkdtemp(prefix="st-bench-binding-")
    sock = os.path.join(tmp, "runtime.sock")
    runtime = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, signal, sessionturn\n"
         f"rt = sessionturn.LocalRuntime({sock!r}, echo_delay=0.0)\n"
         "print('ready', flush=True)\n"
         "signal.sigwait({signal.SIGTERM})\n"
         "rt.stop()\n"],
        stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=os.path.join(build, "python")))
    try:
        if runtime.stdout.readline().strip() != b"ready":
            print("runtime did not start", file=sys.stderr)
            return 1
        driver = sessionturn.Driver.unix(sock)
        lat = {"bindings": [], "python": []}
        cpu = {"bindings": 0.0, "python": 0.0}
        cxx = []
        for _ in range(rounds):
            c0 = time.process_time()
            for i in range(turns):
                t0 = time.perf_counter()
                r = driver.submit_turn(f"binding turn {i}")
                lat["bindings"].append((time.perf_counter() - t0) * 1000)
                assert r.status == "completed", r
            cpu["bindings"] += time.process_time() - c0
            c0 = time.process_time()
            for i in range(turns):
                lat["python"].append(py_turn_client.turn(sock, f"python turn {i}"))
            cpu["python"] += time.process_time() - c0
            out = subprocess.run([os.path.join(build, "bench", "bench_turn_latency"), "--socket", sock,
                                  "--turns", str(turns)], capture_output=True, text=True, check=True).stdout
            f = out.split()
            cxx.append((float(f[2]), float(f[4]), float(f[6])))
        n = turns * rounds
        print(f"binding turn latency: echo turns over a unix socket, {rounds} rounds x {turns} turns per client")
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
              "  (target <= 1.5x)")
        return 0
    finally:
        runtime.terminate()
        runtime.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
