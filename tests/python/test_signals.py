"""Ctrl-C during a blocking submit_turn: KeyboardInterrupt, and the turn is withdrawn. Run in a child
interpreter so the signal cannot disturb pytest itself."""
import os
import subprocess
import sys

from conftest import WAIT

CHILD = r"""
import os, signal, threading, time
import sessionturn

with sessionturn.LocalRuntime(echo_delay=2.0) as rt:
    d = rt.driver()
    def on_event(e):
        if e.type == "turn.started":
            threading.Timer(0.1, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    t0 = time.monotonic()
    try:
        d.submit_turn("long enough to interrupt", timeout=60, on_event=on_event)
        print("NOT INTERRUPTED")
    except KeyboardInterrupt:
        print("KeyboardInterrupt after %.1f s" % (time.monotonic() - t0))
    # The runtime is free again: the abandoned turn was interrupted, not left running.
    r = d.submit_turn("next", timeout=60)
    print("next:", r.status, d.turns_in_flight)
"""


def test_ctrl_c_interrupts_a_blocking_turn():
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=WAIT * 2)
    assert proc.returncode == 0, proc.stderr
    assert "KeyboardInterrupt after" in proc.stdout, proc.stdout + proc.stderr
    seconds = float(proc.stdout.split("KeyboardInterrupt after ")[1].split()[0])
    assert seconds < 5.0  # well before the ~6 s turn would have ended by itself
    assert "next: completed 0" in proc.stdout
