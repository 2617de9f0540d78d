"""examples/python/turn.py and watch.py run as documented."""
import os
import subprocess
import sys

import sessionturn
from conftest import WAIT

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python")


def run(*args):
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, args[0])] + list(args[1:]), capture_output=True,
                          text=True, timeout=WAIT * 2, stdin=subprocess.DEVNULL)


def test_turn_example_with_a_local_runtime():
    out = run("turn.py", "--local", "hello examples")
    assert out.returncode == 0, out.stderr
    assert "completed" in out.stdout and "hello examples" in out.stdout


def test_watch_example(runtime):
    runtime.driver().submit_turn("for the watch", timeout=WAIT)
    out = run("watch.py", "--socket", runtime.socket_path, "--idle", "1")
    assert out.returncode == 0, out.stderr
    assert "turn.completed" in out.stdout and "for the watch" in out.stdout
