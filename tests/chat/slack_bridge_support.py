"""Helpers for test_slack_bridge.py: the Slack fake (tests/fakes/slack_api.py) and sessionturn-slack as a user runs
it, each in the test's temporary directory, always stopped (SIGTERM, then SIGKILL after a grace). The generic parts
(requests, process ends, runtimes, the test case base) are bridge_support's."""

import json
import os
import shlex
import subprocess
import sys
import time

from bridge_support import (BINARY_DIR, SOURCE_DIR, BridgeCase, BridgeProcess, common_argv,  # noqa: F401
                            kill_runtimes, request, stop_process, wait_past_progress)

BRIDGE = os.path.join(BINARY_DIR, "examples", "slack-bridge", "sessionturn-slack")
# As in bridge_support: the same code run by the Python package when SESSIONTURN_BRIDGE_COMMAND says so.
BRIDGE_COMMAND = shlex.split(os.environ.get("SESSIONTURN_BRIDGE_COMMAND", "")) or [BRIDGE]
FAKE = os.path.join(SOURCE_DIR, "tests", "fakes", "slack_api.py")
BOT_TOKEN = "xoxb-1-TEST-BOT-TOKEN"
APP_TOKEN = "xapp-1-TEST-APP-TOKEN"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BOT_USER = "U0BOT"
ANN = "U0ANN"
BOB = "U0BOB"
GENERAL = "C0GENERAL"
DM_ANN = "D0ANN"


class SlackFake:
    """A running Slack fake; control-API helpers wrap /_test/."""

    def __init__(self, root, *extra):
        self.dir = os.path.join(root, "slack-fake")
        os.makedirs(self.dir)
        self.log_path = os.path.join(self.dir, "output.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, FAKE, "--dir", self.dir, "--bot-token", BOT_TOKEN,
                                      "--app-token", APP_TOKEN, "--signing-secret", SIGNING_SECRET, *extra],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        ready = os.path.join(self.dir, "ready.json")
        deadline = time.monotonic() + 10
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the Slack fake did not start: " + self.output())
            time.sleep(0.02)
        with open(ready) as f:
            self.port = json.load(f)["port"]
        self.url = "http://127.0.0.1:%d" % self.port
        self.api_url = self.url + "/api"

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

    def say(self, channel, text, user=ANN, **extra):
        """A user's message; the fake's answer ({ts, event_ids, message})."""
        return self.post("message", dict(channel=channel, user=user, text=text, **extra))

    def wait(self, timeout=10, **body):
        """The /_test/wait answer ({match, matches}), or None when nothing matched in time."""
        status, out = request(self.url + "/_test/wait", dict(body, timeout=timeout), timeout=timeout + 10)
        if status == 408:
            return None
        if status != 200:
            raise AssertionError("/_test/wait %s: %s %s" % (body, status, out))
        return out

    def wait_text(self, channel, needle, count=1, timeout=15, final=False, **extra):
        """The count-th bot message in channel whose current text contains needle; fails when none comes. With
        final, not a live-progress edit that shows it in the streamed tail (wait_reply)."""
        out = wait_past_progress(needle if final else None, timeout, lambda left: self.wait(
            timeout=left, channel=channel, text_contains=needle, count=count, **extra))
        if out is None:
            raise AssertionError("no bot message with %r in %s within %ss; the bot's messages: %s"
                                 % (needle, channel, timeout, self.bot_texts(channel)))
        return out["match"]

    def wait_reply(self, channel, needle, count=1, timeout=15, **extra):
        """wait_text for a reply: the message's final text, not a progress edit showing the needle."""
        return self.wait_text(channel, needle, count=count, timeout=timeout, final=True, **extra)

    def messages(self, channel, **query):
        return self.get("messages", channel=channel, **query)

    def bot_messages(self, channel, **query):
        return [m for m in self.messages(channel, **query) if m["by_bot"] and not m.get("deleted")]

    def bot_texts(self, channel, **query):
        return [m["text"] for m in self.bot_messages(channel, **query)]

    def calls(self, method=None):
        return self.get("calls", method=method) if method else self.get("calls")

    def fault(self, **body):
        return self.post("fault", body)

    def wait_connections(self, n=1, timeout=15):
        if self.wait(timeout=timeout, connections=n) is None:
            raise AssertionError("the bridge did not open %d Socket Mode connection(s) within %ss: %s"
                                 % (n, timeout, self.get("connections")))


class SlackBridge(BridgeProcess):
    """sessionturn-slack against the fake; env values of None remove that variable."""

    def __init__(self, root, api_url, *extra, env=None, state_dir=None, provider=None, wait_ready=True,
                 listen="127.0.0.1:0", mode="socket"):
        self.state_dir = state_dir or os.path.join(root, "state")
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "SESSIONTURN_"))}
        full_env.update({"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": APP_TOKEN,
                         "SLACK_SIGNING_SECRET": SIGNING_SECRET})
        for k, v in (env or {}).items():
            if v is None:
                full_env.pop(k, None)
            else:
                full_env[k] = v
        argv = common_argv(BRIDGE_COMMAND, api_url, self.state_dir, listen, provider, ["--mode", mode, *extra])
        super().__init__(root, "slack-bridge", argv, full_env,
                         r"^ready: slack bot @\S+ \(.*?\), .*?(?:, listening (\S+))?$", wait_ready)


class SlackCase(BridgeCase):
    """A test with its own directory, Slack fake and bridges, all ended and removed when it ends."""

    def start_fake(self, *extra):
        fake = SlackFake(self.root, *extra)
        self.addCleanup(fake.stop)
        return fake

    def start_bridge(self, fake, *extra, **kw):
        state_dir = kw.get("state_dir") or os.path.join(self.root, "state")
        self.addCleanup(kill_runtimes, state_dir)
        bridge = SlackBridge(self.root, fake.api_url if fake else None, *extra, **kw)
        self.addCleanup(bridge.stop)
        return bridge

    def start_connected(self, *fake_extra, **kw):
        """A fake and a Socket Mode bridge with its connection open."""
        fake = self.start_fake(*fake_extra)
        bridge = self.start_bridge(fake, **kw)
        fake.wait_connections(1)
        return fake, bridge

    def assert_no_bot_message(self, fake, seconds, **match):
        out = fake.wait(timeout=seconds, **match)
        self.assertIsNone(out, "unexpected: %s" % (out or {}).get("match"))
