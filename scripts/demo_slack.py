#!/usr/bin/python3
"""`make demo`, part three: the Slack bridge, as a team runs it (Socket Mode), against the project's Slack fake.

Starts tests/fakes/slack_api.py (Web API and a Socket Mode server on loopback) and `sessionturn-slack` (local
backend, echo provider), then plays two people in a channel and prints the channel as Slack would show it: a
mention starts a thread that is its own Session, a reply in the thread needs no mention and is remembered, a
second mention is another Session, and `/sessionturn sessions` lists them. Everything it starts is stopped.

Usage: demo_slack.py BUILD_DIR
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHANNEL = "C0GENERAL"
NAMES = {"U0ANN": "ann", "U0BOB": "bob"}


class Demo:
    def __init__(self, build):
        self.build = build
        self.work = tempfile.mkdtemp(prefix="sessionturn-slack-demo.")
        self.procs = []
        self.shown = {}

    def start(self):
        fake_dir = os.path.join(self.work, "fake")
        os.makedirs(fake_dir)
        self.fake_log = open(os.path.join(self.work, "fake.log"), "w")
        self.procs.append(subprocess.Popen([sys.executable, os.path.join(SOURCE, "tests/fakes/slack_api.py"),
                                            "--dir", fake_dir], stdout=self.fake_log, stderr=subprocess.STDOUT))
        ready = os.path.join(fake_dir, "ready.json")
        self.wait_for(lambda: os.path.exists(ready), "the Slack fake to listen")
        self.url = "http://127.0.0.1:%d" % json.load(open(ready))["port"]
        # The fake's default tokens (the real ones come from the app's settings, never as flag values).
        env = dict(os.environ, SLACK_BOT_TOKEN="xoxb-1-TEST-BOT-TOKEN", SLACK_APP_TOKEN="xapp-1-TEST-APP-TOKEN")
        self.log_path = os.path.join(self.work, "bridge.log")
        self.log = open(self.log_path, "w")
        cmd = [os.path.join(self.build, "examples/slack-bridge/sessionturn-slack"), "--api-url", self.url + "/api",
               "--state-dir", os.path.join(self.work, "state"), "--provider", "echo",
               "--runtime-program", os.path.join(self.build, "sessionturn-local-runtime"),
               "--allow-users", "U0ANN,U0BOB"]
        self.procs.append(subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT))
        self.wait_for(lambda: "ready:" in open(self.log_path).read(), "the bridge to say it is ready")
        line = next(l for l in open(self.log_path) if l.startswith("ready:"))
        print("$ SLACK_BOT_TOKEN=... SLACK_APP_TOKEN=... sessionturn-slack --api-url %s/api --allow-users U0ANN,U0BOB"
              % self.url)
        print(line.rstrip())
        print()
        self.wait_for(lambda: self.call("/_test/wait", {"connections": 1, "timeout": 1}).get("match"),
                      "the Socket Mode connection")

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for dirpath, _, files in os.walk(os.path.join(self.work, "state", "sessions")):
            if "runtime.pid" in files:
                try:
                    os.kill(int(open(os.path.join(dirpath, "runtime.pid")).read().strip()), signal.SIGTERM)
                except (OSError, ValueError):
                    pass
        time.sleep(0.3)
        shutil.rmtree(self.work, ignore_errors=True)

    def wait_for(self, cond, what, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if cond():
                    return
            except OSError:
                pass
            for p in self.procs:
                if p.poll() is not None:
                    raise SystemExit("demo: a process exited while waiting for %s:\n%s" %
                                     (what, open(self.log_path).read() if hasattr(self, "log_path") else ""))
            time.sleep(0.05)
        raise SystemExit("demo: timed out waiting for " + what)

    def call(self, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            return json.loads(e.read() or b"{}")

    def say(self, user, text, thread=None, note=""):
        body = {"channel": CHANNEL, "user": user, "text": text}
        if thread:
            body["thread_ts"] = thread
        out = self.call("/_test/message", body)
        self.shown[out["ts"]] = text
        return out["ts"]

    def reply_in(self, thread, needle):
        """Waits for the bot's reply in `thread` that contains needle (placeholders are edited into replies)."""
        found = {}

        def done():
            for m in self.call("/_test/messages?channel=%s" % CHANNEL):
                if m["by_bot"] and m.get("thread_ts") == thread and needle in m["text"]:
                    found["m"] = m
                    return True
            return False

        self.wait_for(done, "the bot's reply containing %r" % needle)
        return found["m"]

    def show(self):
        """The channel as Slack shows it: top-level messages, each thread indented under its parent."""
        messages = self.call("/_test/messages?channel=%s" % CHANNEL)
        for top in [m for m in messages if not m.get("thread_ts") or m["thread_ts"] == m["ts"]]:
            self.print_message(top, "  ")
            for r in [m for m in messages if m.get("thread_ts") == top["ts"] and m["ts"] != top["ts"]]:
                self.print_message(r, "      \u2502 ")
        print()

    @staticmethod
    def print_message(m, indent):
        who = "bot" if m["by_bot"] else NAMES.get(m.get("user"), m.get("user"))
        text = m["text"].replace("<@U0BOT>", "@sessionturn")
        print(textwrap.indent("%s: %s" % (who, text), indent, lambda _: True))

    def run(self):
        self.start()
        first = self.say("U0ANN", "<@U0BOT> please remember the word kestrel")
        self.reply_in(first, "echo #1")
        self.say("U0ANN", "what was the word? (no mention needed in the thread)", thread=first)
        self.reply_in(first, "echo #2")
        second = self.say("U0BOB", "<@U0BOT> a separate question")
        self.reply_in(second, "echo #1")
        self.show()
        print("  ann types: /sessionturn sessions\n")
        before = len([m for m in self.call("/_test/messages?channel=%s" % CHANNEL) if m["by_bot"]])
        self.call("/_test/command", {"channel": CHANNEL, "user": "U0ANN", "command": "/sessionturn",
                                     "text": "sessions"})
        self.wait_for(lambda: len([m for m in self.call("/_test/messages?channel=%s" % CHANNEL) if m["by_bot"]])
                      > before, "the Sessions list")
        listing = [m for m in self.call("/_test/messages?channel=%s" % CHANNEL) if m["by_bot"]][-1]
        self.print_message(listing, "  ")
        buttons = [e["text"]["text"] for b in listing.get("blocks") or [] if b.get("type") == "actions"
                   for e in b.get("elements", [])]
        if buttons:
            print("       [" + "] [".join(buttons) + "]")
        print()
        print("Each thread is its own Session (the echo provider numbers the turns a Session has seen: the thread's "
              "second reply is turn #2).")


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    demo = Demo(os.path.abspath(sys.argv[1]))
    try:
        demo.run()
    finally:
        demo.stop()


if __name__ == "__main__":
    main()
