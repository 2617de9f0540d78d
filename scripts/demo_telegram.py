#!/usr/bin/python3
"""`make demo`, part two: the Telegram bridge, as a team runs it, against the project's Telegram fake.

Starts tests/fakes/telegram_api.py (a Bot API server on loopback) and `sessionturn-telegram` (local backend,
a script provider, Sessions suspended after 3 idle seconds), then plays a user, Ada, in a private chat and
prints the conversation as a chat transcript: two messages remembered by one Session, a question answered
with a button, /new and a reply to an older bot message going back to the first Session, /sessions, and an
idle-suspended Session woken by the next message. Everything it starts is stopped at the end.

Usage: demo_telegram.py BUILD_DIR
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
import urllib.request

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "123456:DEMO-TOKEN"
ADA = {"id": 42, "first_name": "Ada"}
CHAT = 42

SCRIPT = {
    "turns": [
        [{"type": "delta", "text": "Reading the workspace\u2026"}, {"type": "sleep", "ms": 300},
         {"type": "message", "text": "Hello Ada! This Session keeps our conversation: this is turn **{n}** of it."}],
        [{"type": "tool.start", "id": "t1", "name": "bash", "text": "ls"},
         {"type": "tool.complete", "id": "t1", "name": "bash", "output": "README.md\n"},
         {"type": "question", "questions": [{"id": "lang", "question": "Which language should the example use?",
                                             "options": [{"label": "Python"}, {"label": "C++"}]}]}],
        [{"type": "message", "text": "Turn **{n}** of this Session: I still remember everything before it."}],
    ]
}


class Demo:
    def __init__(self, build):
        self.build = build
        self.work = tempfile.mkdtemp(prefix="sessionturn-telegram-demo.")
        self.procs = []
        self.seen = set()

    # ---- processes ----
    def start(self):
        fake_dir = os.path.join(self.work, "fake")
        os.makedirs(fake_dir)
        self.fake_log = open(os.path.join(self.work, "fake.log"), "w")
        self.procs.append(subprocess.Popen(
            [sys.executable, os.path.join(SOURCE, "tests/fakes/telegram_api.py"), "--dir", fake_dir, "--token", TOKEN,
             "--bot-username", "sessionturn_demo_bot"], stdout=self.fake_log, stderr=subprocess.STDOUT))
        ready = os.path.join(fake_dir, "ready.json")
        self.wait_for(lambda: os.path.exists(ready), "the Telegram fake to listen")
        self.api = "http://127.0.0.1:%d" % json.load(open(ready))["port"]
        script = os.path.join(self.work, "script.json")
        with open(script, "w") as f:
            json.dump(SCRIPT, f)
        env = dict(os.environ, TELEGRAM_BOT_TOKEN=TOKEN)
        self.bridge_log_path = os.path.join(self.work, "bridge.log")
        self.bridge_log = open(self.bridge_log_path, "w")
        cmd = [os.path.join(self.build, "examples/telegram-bridge/sessionturn-telegram"), "--api-url", self.api,
               "--state-dir", os.path.join(self.work, "state"), "--provider", "script:" + script,
               "--runtime-program", os.path.join(self.build, "sessionturn-local-runtime"),
               "--idle-suspend", "3", "--allow-users", str(ADA["id"]), "--listen", "127.0.0.1:0"]
        self.bridge = subprocess.Popen(cmd, env=env, stdout=self.bridge_log, stderr=subprocess.STDOUT)
        self.procs.append(self.bridge)
        self.wait_for(lambda: "ready:" in open(self.bridge_log_path).read(), "the bridge to say it is ready")
        line = next(l for l in open(self.bridge_log_path) if l.startswith("ready:"))
        print("$ TELEGRAM_BOT_TOKEN=... sessionturn-telegram --api-url %s --provider script:FILE --idle-suspend 3 "
              "--allow-users 42 --listen 127.0.0.1:0" % self.api)
        print(line.rstrip())
        print()
        self.metrics = "http://" + line.rsplit("listening ", 1)[1].strip() + "/metrics"

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        # The local runtimes outlive the bridge by design (a restart keeps its Sessions): stop them too.
        for pid_file in self.glob(os.path.join(self.work, "state", "sessions"), "runtime.pid"):
            try:
                os.kill(int(open(pid_file).read().strip()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        time.sleep(0.3)
        shutil.rmtree(self.work, ignore_errors=True)

    @staticmethod
    def glob(root, name):
        for dirpath, _, files in os.walk(root):
            if name in files:
                yield os.path.join(dirpath, name)

    def wait_for(self, cond, what, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if cond():
                return
            for p in self.procs:
                if p.poll() is not None:
                    raise SystemExit("demo: a process exited while waiting for %s; see the logs:\n%s" %
                                     (what, open(self.bridge_log_path).read() if hasattr(self, "bridge_log_path") else ""))
            time.sleep(0.05)
        raise SystemExit("demo: timed out waiting for " + what)

    # ---- the chat ----
    def call(self, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.api + path, data=data, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def delivered(self):
        with urllib.request.urlopen(self.metrics, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("sessionturn_replies_delivered_total"):
                    return float(line.split()[-1])
        return 0

    def messages(self):
        return self.call("/_test/messages?chat_id=%d" % CHAT)

    def say(self, text, reply_to=None, note=""):
        print(textwrap.indent("Ada%s: %s" % (note, text), "  "))
        body = {"chat_id": CHAT, "from": ADA, "text": text}
        if reply_to is not None:
            body["reply_to_message_id"] = reply_to
        return self.call("/_test/send", body)["message"]["message_id"]

    def bot_messages(self):
        return [m for m in self.messages() if m["by_bot"] and not m["deleted"]]

    def await_replies(self, count, what):
        self.wait_for(lambda: self.delivered() >= count, what, timeout=30)
        self.show_new()

    def show_new(self):
        for m in self.bot_messages():
            if m["message_id"] in self.seen:
                continue
            if m["text"].startswith("\u23f3"):
                continue  # a placeholder still in progress: shown once its reply is edited in
            self.seen.add(m["message_id"])
            text = m["text"]
            buttons = [b["text"] for row in (m.get("reply_markup") or {}).get("inline_keyboard", []) for b in row]
            print(textwrap.indent("bot: " + text, "  ", lambda _: True).replace("\n", "\n       "))
            if buttons:
                print("       [" + "] [".join(buttons) + "]")
        print()

    def run(self):
        self.start()
        first = self.say("Hi! Please remember me.")
        self.await_replies(1, "the first reply")
        first_reply = max(self.seen)
        self.say("Write me a hello-world example.")
        self.wait_for(lambda: any((m.get("reply_markup") or {}).get("inline_keyboard") for m in self.bot_messages()),
                      "the agent's question")
        self.show_new()
        question = next(m for m in self.bot_messages() if (m.get("reply_markup") or {}).get("inline_keyboard"))
        data = next(b["callback_data"] for row in question["reply_markup"]["inline_keyboard"] for b in row
                    if b["text"] == "C++")
        print("  Ada presses [C++]\n")
        self.call("/_test/press", {"chat_id": CHAT, "message_id": question["message_id"], "from": ADA, "data": data})
        self.await_replies(2, "the answer to reach the agent")
        self.say("/new")
        self.wait_for(lambda: len(self.bot_messages()) > len(self.seen), "/new to answer")
        self.show_new()
        self.say("Hello, second Session!")
        self.await_replies(3, "the second Session's first reply")
        self.say("Back to the first Session, please.", reply_to=first_reply, note=" (replying to the bot's first reply)")
        self.await_replies(4, "the reply-to routing")
        self.say("/sessions")
        self.wait_for(lambda: len(self.bot_messages()) > len(self.seen), "/sessions to answer")
        self.show_new()
        self.wait_for(lambda: self.suspended() >= 2, "both Sessions to be suspended", timeout=15)
        print("  (a few idle seconds pass: the idle policy suspends both Sessions; the next message wakes one)\n")
        self.say("Are you still there?", reply_to=first_reply, note=" (replying to the first reply again)")
        self.await_replies(5, "the suspended Session to wake and reply")
        del first
        print("Every reply was edited into its placeholder; the Sessions' state is on disk under the bridge's "
              "--state-dir.")

    def suspended(self):
        """Sessions suspended now, as `sessionturn sessions list --local` sees them."""
        out = subprocess.run([os.path.join(self.build, "examples/cli/sessionturn"), "sessions", "list", "--local",
                              "--state-dir", os.path.join(self.work, "state")],
                             capture_output=True, text=True, timeout=20).stdout
        return sum(1 for line in out.splitlines() if "Suspended" in line)


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
