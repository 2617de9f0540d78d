"""Helpers for test_telegram_bridge.py: the Telegram fake (tests/fakes/telegram_api.py) and sessionturn-telegram
as a user runs it, each in its own temporary directory, always stopped (SIGTERM, then SIGKILL after a grace)."""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(os.path.dirname(HERE))
BINARY_DIR = os.environ.get("SESSIONTURN_BINARY_DIR", "/work/main/build-me")
BRIDGE = os.path.join(BINARY_DIR, "examples", "telegram-bridge", "sessionturn-telegram")
# The bridge's command line: the program, or what SESSIONTURN_BRIDGE_COMMAND says instead (the same code run
# as "/usr/bin/python3 -m sessionturn.telegram" by the Python package; space-separated).
BRIDGE_COMMAND = shlex.split(os.environ.get("SESSIONTURN_BRIDGE_COMMAND", "")) or [BRIDGE]
RUNTIME = os.path.join(BINARY_DIR, "sessionturn-local-runtime")
FAKE = os.path.join(SOURCE_DIR, "tests", "fakes", "telegram_api.py")
SCRIPTS = os.path.join(HERE, "scripts")
TOKEN = "123456:TEST-TOKEN"
BOT = "sessionturn_test_bot"
ANN = {"id": 42, "first_name": "Ann", "username": "ann"}
BOB = {"id": 43, "first_name": "Bob", "username": "bob"}
GRACE = 5  # seconds a process gets after SIGTERM before SIGKILL



# How the router's live progress starts (src/routing/router_turns.cpp): such a text is not a reply yet.
PROGRESS_PREFIX = "\u2699\ufe0f Working\u2026"


def wait_past_progress(needle, timeout, wait):
    """Calls wait(seconds_left) until its match is not a live-progress edit; with needle None, the first answer
    whatever it is. The last answer, or None when nothing matched in time."""
    deadline = time.monotonic() + timeout
    while True:
        out = wait(max(0.1, deadline - time.monotonic()))
        if out is None or needle is None or not out["match"]["text"].startswith(PROGRESS_PREFIX):
            return out
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)

def request(url, body=None, method=None, headers=None, timeout=30):
    """(status, parsed JSON or text) for one loopback request; HTTP errors are answers, not exceptions."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    hdrs = dict(headers or {})
    if data is not None:
        hdrs.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, headers=hdrs, method=method or ("POST" if data is not None else "GET"))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw, status = resp.read(), resp.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode("utf-8", "replace")


def stop_process(proc, sig=signal.SIGTERM, grace=GRACE):
    """Ends proc (sig, then SIGKILL after grace); its exit status."""
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class Fake:
    """A running Telegram fake; control-API helpers wrap /_test/."""

    def __init__(self, root, *extra, token=TOKEN):
        self.dir = os.path.join(root, "fake")
        os.makedirs(self.dir)
        self.log_path = os.path.join(self.dir, "output.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, FAKE, "--dir", self.dir, "--token", token,
                                      "--bot-username", BOT, *extra],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        ready = os.path.join(self.dir, "ready.json")
        deadline = time.monotonic() + 10
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the Telegram fake did not start: " + self.output())
            time.sleep(0.02)
        with open(ready) as f:
            self.port = json.load(f)["port"]
        self.url = "http://127.0.0.1:%d" % self.port

    def stop(self):
        stop_process(self.proc)
        self.log.close()

    def output(self):
        with open(self.log_path) as f:
            return f.read()

    def post(self, path, body):
        status, out = request(self.url + "/_test/" + path, body)
        if status != 200:
            raise AssertionError("POST /_test/%s %s: %s %s" % (path, body, status, out))
        return out

    def get(self, path, **query):
        q = "&".join("%s=%s" % kv for kv in query.items())
        status, out = request(self.url + "/_test/" + path + ("?" + q if q else ""))
        if status != 200:
            raise AssertionError("GET /_test/%s: %s %s" % (path, status, out))
        return out

    def send(self, chat_id, text, sender=ANN, **extra):
        return self.post("send", dict(chat_id=chat_id, text=text, **{"from": sender}, **extra))["message"]

    def wait(self, timeout=10, **body):
        """The /_test/wait answer ({match, matches}), or None when nothing matched in time."""
        status, out = request(self.url + "/_test/wait", dict(body, timeout=timeout), timeout=timeout + 10)
        if status == 408:
            return None
        if status != 200:
            raise AssertionError("/_test/wait %s: %s %s" % (body, status, out))
        return out

    def wait_text(self, chat_id, needle, count=1, timeout=10, final=False):
        """The count-th bot message in chat_id whose (current) text contains needle; fails when none comes. With
        final, a live-progress edit that shows the needle in the streamed tail does not count: the wait goes on
        until that message holds its final text (wait_reply)."""
        out = wait_past_progress(needle if final else None, timeout, lambda left: self.wait(
            timeout=left, chat_id=chat_id, text_contains=needle, count=count))
        if out is None:
            raise AssertionError("no bot message with %r in chat %s within %ss; the bot's messages: %s"
                                 % (needle, chat_id, timeout, self.bot_texts(chat_id)))
        return out["match"]

    def wait_reply(self, chat_id, needle, count=1, timeout=10):
        """wait_text for a reply: the message's final text, not a progress edit showing the needle."""
        return self.wait_text(chat_id, needle, count=count, timeout=timeout, final=True)

    def messages(self, chat_id, **query):
        return self.get("messages", chat_id=chat_id, **query)

    def bot_messages(self, chat_id, **query):
        return [m for m in self.messages(chat_id, **query) if m["by_bot"]]

    def bot_texts(self, chat_id, **query):
        return [m["text"] for m in self.bot_messages(chat_id, **query)]

    def calls(self, method=None):
        return self.get("calls", method=method) if method else self.get("calls")

    def fault(self, **body):
        return self.post("faults", body)


class BridgeProcess:
    """A bridge program started as a user would, its output in files under root (read with stderr()); ready once
    it printed the line `ready_pattern` matches (group 1: the --listen address, when it listens)."""

    def __init__(self, root, prefix, argv, env, ready_pattern, wait_ready=True):
        self.n = len([p for p in os.listdir(root) if p.startswith(prefix + "-")])
        self.out_path = os.path.join(root, "%s-%d.out" % (prefix, self.n))
        self.err_path = os.path.join(root, "%s-%d.err" % (prefix, self.n))
        self.argv = argv
        self.ready_pattern = ready_pattern
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, stdin=subprocess.DEVNULL)
        self.listen = None
        if wait_ready:
            self.wait_ready()

    def wait_ready(self, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.stderr()
            # Whole lines only: a line read while it is being written must not match without its end.
            m = re.search(self.ready_pattern, text[:text.rfind("\n") + 1], re.M)
            if m:
                self.listen = m.group(1)
                return
            if self.proc.poll() is not None:
                raise AssertionError("the bridge exited %s before it was ready:\n%s" % (self.proc.returncode,
                                                                                     self.stderr()))
            time.sleep(0.02)
        raise AssertionError("the bridge was not ready within %ss:\n%s" % (timeout, self.stderr()))

    @property
    def base(self):
        return "http://" + self.listen

    def stderr(self):
        with open(self.err_path, errors="replace") as f:
            return f.read()

    def stdout(self):
        with open(self.out_path, errors="replace") as f:
            return f.read()

    def wait_exit(self, timeout=15):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("the bridge did not exit within %ss:\n%s" % (timeout, self.stderr()))

    def stop(self, sig=signal.SIGTERM):
        return stop_process(self.proc, sig)

    def kill(self):
        return stop_process(self.proc, signal.SIGKILL)


def common_argv(program, api_url, state_dir, listen, provider, extra):
    """The flags every bridge test passes: the fake's API, the state dir, the local runtime, debug logs.
    program: the program's path, or its command line as a list."""
    argv = list(program) if isinstance(program, (list, tuple)) else [program]
    if api_url:
        argv += ["--api-url", api_url]
    argv += ["--state-dir", state_dir, "--runtime-program", RUNTIME, "--log-level", "debug"]
    if listen:
        argv += ["--listen", listen]
    if provider:
        argv += ["--provider", provider if ":" in provider or provider == "echo"
                 else "script:" + os.path.join(SCRIPTS, provider)]
    return argv + list(extra)


class Bridge(BridgeProcess):
    """sessionturn-telegram against a fake."""

    def __init__(self, root, fake_url, *extra, env=None, token=TOKEN, state_dir=None, provider=None,
                 wait_ready=True, listen="127.0.0.1:0"):
        self.root = root
        self.state_dir = state_dir or os.path.join(root, "state")
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "SESSIONTURN_"))}
        if token is not None:
            full_env["TELEGRAM_BOT_TOKEN"] = token
        full_env.update(env or {})
        argv = common_argv(BRIDGE_COMMAND, fake_url, self.state_dir, listen, provider, extra)
        super().__init__(root, "bridge", argv, full_env,
                         r"^ready: telegram bot @\S+, backend .*?(?:, listening (\S+))?$", wait_ready)


def kill_runtimes(state_dir):
    """SIGKILLs the local runtimes the bridge started under state_dir (they are detached, so the bridge's
    own end does not take them along); found by the pid files the LocalBackend writes."""
    if not os.path.isdir(state_dir):
        return
    for base, _, files in os.walk(state_dir):
        for name in files:
            if not name.endswith(".pid"):
                continue
            try:
                with open(os.path.join(base, name)) as f:
                    pid = int(f.read().strip() or "0")
                if pid > 1 and _is_runtime(pid):
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                pass


def _is_runtime(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return b"sessionturn-local-runtime" in f.read()
    except OSError:
        return False


def scratch_dir():
    return tempfile.mkdtemp(prefix="st-tgbridge-")


def remove_dir(path):
    shutil.rmtree(path, ignore_errors=True)


class BridgeCase(unittest.TestCase):
    """A test with its own directory, fake and bridges, all ended and removed when it ends, failed or not
    (SESSIONTURN_KEEP_TEST_DIRS=1 keeps the directory and prints where it is)."""
    maxDiff = None

    def setUp(self):
        self.root = scratch_dir()
        if os.environ.get("SESSIONTURN_KEEP_TEST_DIRS", "") not in ("", "0"):
            print("\n%s: %s" % (self.id(), self.root), file=sys.stderr)
        else:
            self.addCleanup(remove_dir, self.root)

    def start_fake(self, *extra, token=TOKEN):
        fake = Fake(self.root, *extra, token=token)
        self.addCleanup(fake.stop)
        return fake

    def start_bridge(self, fake, *extra, **kw):
        """A bridge against fake (None: no --api-url); its runtimes are killed after it stops."""
        state_dir = kw.get("state_dir") or os.path.join(self.root, "state")
        self.addCleanup(kill_runtimes, state_dir)
        bridge = Bridge(self.root, fake.url if fake else None, *extra, **kw)
        self.addCleanup(bridge.stop)
        return bridge

    def wait_for(self, predicate, what, timeout=10, interval=0.05):
        """predicate()'s first true value within timeout, else a failure naming what was awaited."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                self.fail("timed out after %ss waiting for %s" % (timeout, what))
            time.sleep(interval)

    def wait_confirmed(self, fake, update_id, timeout=10):
        """Waits until the bridge confirmed update_id to the fake (it took it, routed or not)."""
        self.wait_for(lambda: any(u["update_id"] == update_id and u["confirmed"] for u in fake.get("updates")),
                      "update %s to be confirmed" % update_id, timeout)

    def assert_none_within(self, fake, seconds, **match):
        """Fails when a bot message (or call) matching match turns up within seconds."""
        out = fake.wait(timeout=seconds, **match)
        self.assertIsNone(out, "unexpected: %s" % (out or {}).get("match"))
