"""bench/py_router: turns through the Router with a chat adapter written in Python, side by side in one run with the
same turns through a C++ adapter (both complete every post and edit at once). The Sessions' runtimes run in their
own processes (the LocalBackend with the built sessionturn-local-runtime, echo), so this process's CPU time is the
router's, the drivers' and the adapter's. Target (issue 13): the Python adapter costs <= 1.5x the C++ one per turn.

A round: THREADS chats each send one message at once; it ends when every reply was delivered. The first round of
each kind creates and starts the Sessions (not measured); then ROUNDS measured rounds per kind, alternating which
kind goes first.

Usage: /usr/bin/python3 bench/py_router.py BUILD_DIR [THREADS] [ROUNDS]
"""
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time

build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build-bench")
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 50
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
sys.path.insert(0, os.path.join(build, "python"))

import sessionturn  # noqa: E402
from sessionturn import _sessionturn  # noqa: E402

CAPS = sessionturn.ChatCapabilities(max_length=4000, unit="code_points", threads=False, edit_interval=0.001)


class PythonAdapter(sessionturn.ChatAdapter):
    """What a bot's adapter does at the least: hand out ids, keep nothing."""

    def __init__(self):
        self.next_id = 0

    def capabilities(self):
        return CAPS

    async def post(self, where, message):
        self.next_id += 1
        return str(self.next_id)

    async def edit(self, where, message_id, message):
        return None


class Kind:
    def __init__(self, name, state, backend, adapter_bridge):
        self.name = name
        config = sessionturn.RouterConfig(owner_uid="bench-" + name, store_path=os.path.join(state, name + ".db"),
                                          max_in_flight=threads, progress_interval=1.0)
        self.loop_thread = sessionturn._router._LoopThread()
        bridge = (sessionturn._router._AdapterBridge(PythonAdapter(), self.loop_thread.loop)
                  if adapter_bridge is None else adapter_bridge)
        self.router = _sessionturn._Router(backend, bridge, CAPS, config, 60.0)
        self.router.start()
        self.sent = 0
        self.cpu = []
        self.wall = []

    def round(self, measured):
        target = self.router.stats()["replies_delivered"] + threads
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(threads):
            self.sent += 1
            self.router.handle_message_blocking(sessionturn.InboundMessage(
                platform="bench", chat="chat-%d" % i, message_id="m%d" % self.sent, text="turn %d" % self.sent,
                author_id="U1", author_name="bench", is_private_chat=True))
        while self.router.stats()["replies_delivered"] < target:
            time.sleep(0.005)  # polls take the GIL: not more often than that
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if measured:
            self.wall.append(wall)
            self.cpu.append(cpu / threads)

    def close(self):
        self.router.close()
        self.loop_thread.stop()


def main():
    program = os.path.join(build, "sessionturn-local-runtime")
    state = tempfile.mkdtemp(prefix="st-bench-pyrouter-")
    try:
        backend = sessionturn.LocalBackend(os.path.join(state, "sessions"), runtime_program=program, idle_suspend=0)
        kinds = [Kind("python", state, backend, None), Kind("cpp", state, backend, _sessionturn._ImmediateAdapter())]
        for k in kinds:
            k.round(measured=False)  # creates the Sessions and starts their runtimes
        for r in range(rounds):
            for k in (kinds if r % 2 == 0 else kinds[::-1]):
                k.round(measured=True)
        print("py_router: %d chats, one message each per round, %d measured rounds per adapter, runtimes in their "
              "own processes" % (threads, rounds))
        for k in kinds:
            print("  %-6s adapter: %7.1f turns/s (median round %.3f s), process CPU per turn %.0f us (median)"
                  % (k.name, threads / statistics.median(k.wall), statistics.median(k.wall),
                     statistics.median(k.cpu) * 1e6))
        py, cpp = kinds
        ratio = statistics.median(py.cpu) / statistics.median(cpp.cpu)
        print("  Python adapter / C++ adapter, CPU per turn: %.2fx (target <= 1.5x): %s"
              % (ratio, "met" if ratio <= 1.5 else "NOT met"))
        for k in kinds:
            k.close()
        del backend
    finally:
        shutil.rmtree(state, ignore_errors=True)
        os.system("pkill -KILL -f %s >/dev/null 2>&1" % state)  # runtimes started under the state root


if __name__ == "__main__":
    main()
