"""examples/python/turn.py, watch.py and terminal_chat.py run as documented (the chat under a pseudo-terminal)."""
import getpass
import os
import pty
import select
import tempfile
import time
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


class Pty:
    """A program on a pseudo-terminal: type lines, read until a text shows."""

    def __init__(self, argv, env):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execvpe(argv[0], argv, env)
        self.out = ""

    def type(self, line):
        os.write(self.fd, (line + "\n").encode())

    def expect(self, needle, timeout=WAIT):
        deadline = time.monotonic() + timeout
        while needle not in self.out:
            left = deadline - time.monotonic()
            assert left > 0, "no %r on the terminal; it shows:\n%s" % (needle, self.out)
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    self.out += os.read(self.fd, 65536).decode(errors="replace")
                except OSError:
                    break
        assert needle in self.out, self.out
        return self.out

    def close(self):
        os.write(self.fd, b"\x04")  # Ctrl-D: end of input
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            try:
                select.select([self.fd], [], [], 0.1)
                os.read(self.fd, 65536)
            except OSError:
                time.sleep(0.05)
        os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)
        raise AssertionError("terminal_chat.py did not exit on Ctrl-D:\n" + self.out)


def test_terminal_chat_is_a_conversation_with_commands_and_memory():
    with tempfile.TemporaryDirectory(prefix="st_tty_") as state:
        argv = [sys.executable, os.path.join(EXAMPLES, "terminal_chat.py"), "--state-dir", state]
        term = Pty(argv, dict(os.environ))
        try:
            term.type("hello from a terminal")
            term.expect("echo #1: [terminal message from")
            term.expect("hello from a terminal")
            term.type("/new side")
            term.expect("side")
            term.type("/sessions")
            term.expect("Sessions of this chat")
        finally:
            assert term.close() == 0
        # The conversation outlives the program: the first Session goes on counting.
        term = Pty(argv, dict(os.environ))
        try:
            term.type("/use " + sessionturn.session_name("chat", "terminal", getpass.getuser(), "tty", ""))
            term.type("and again")
            term.expect("echo #2:")
        finally:
            assert term.close() == 0


def test_custom_platform_bot_routes_replies_and_acknowledges_every_delivery():
    out = run("custom_platform_bot.py")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any("echo #1:" in l and "lighthouse" in l for l in lines), out.stdout
    assert any("echo #1:" in l and "second session" in l for l in lines), out.stdout  # the new Session's first
    assert any("echo #2:" in l and "back to the first one" in l for l in lines), out.stdout  # reply-to routing
    assert "unacknowledged deliveries: 0" in out.stdout
