#!/usr/bin/python3
"""Self-test of the Claude Code CLI fake (fake_claude.py), run as LocalRuntime runs it: a subprocess spoken to in
stream-json on stdin/stdout. Covers every scenario's output shape, permission and question round trips, the
--session-id/--resume rules, interrupts, and the exit status of crashes, bad flags and bad input.
Run: python3 test_fake_claude.py
"""

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "fake_claude.py")
BASE_FLAGS = ["--input-format", "stream-json", "--output-format", "stream-json", "--include-partial-messages",
              "--replay-user-messages", "--permission-prompt-tool", "stdio", "--verbose", "-p"]
USAGE = {"input_tokens": 10, "cache_creation_input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 20}
THREADED = ("stream_event", "assistant", "user")


def user_line(text):
    return {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": text}]},
            "parent_tool_use_id": None, "session_id": ""}


def allow(request_id, updated_input):
    return {"type": "control_response", "response": {"subtype": "success", "request_id": request_id,
                                                     "response": {"behavior": "allow", "updatedInput": updated_input}}}


def deny(request_id, message):
    return {"type": "control_response", "response": {"subtype": "success", "request_id": request_id,
                                                     "response": {"behavior": "deny", "message": message}}}


def interrupt(request_id):
    return {"type": "control_request", "request_id": request_id, "request": {"subtype": "interrupt"}}


class Claude:
    """A running fake: send() JSON lines, read() its stdout lines (parsed when JSON) with a timeout."""

    def __init__(self, cwd, *flags, env=None, session=None):
        self.session = session or str(uuid.uuid4())
        if "--resume" not in flags:
            flags = ("--session-id", self.session) + flags
        self.proc = subprocess.Popen([sys.executable, FAKE, *BASE_FLAGS, *flags], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, encoding="utf-8")
        self.lines = queue.Queue()
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()

    def _pump(self):
        with self.proc.stdout:
            for raw in self.proc.stdout:
                self.lines.put(raw.rstrip("\n"))
        self.lines.put(None)

    def send(self, obj):
        self.proc.stdin.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
        self.proc.stdin.flush()

    def read(self, timeout=10):
        raw = self.lines.get(timeout=timeout)
        if raw is None:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw

    def until(self, predicate, timeout=10):
        """Lines up to and including the first one predicate accepts."""
        got = []
        deadline = time.monotonic() + timeout
        while True:
            line = self.read(max(0.01, deadline - time.monotonic()))
            if line is None:
                raise AssertionError("stdout ended; got %r" % got)
            got.append(line)
            if isinstance(line, dict) and predicate(line):
                return got

    def turn(self, text):
        """Send a prompt; every line up to its result (a control_request stops early)."""
        self.send(user_line(text))
        return self.until(lambda m: m.get("type") in ("result", "control_request"))

    def finish(self, timeout=10):
        """Close stdin; (exit status, remaining stdout lines, stderr)."""
        self.proc.stdin.close()
        code = self.proc.wait(timeout)
        rest = []
        while (line := self.read()) is not None:
            rest.append(line)
        return code, rest, self.proc.stderr.read()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.pump.join(10)
        for stream in (self.proc.stdin, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass


def run(cwd, args, stdin="", env=None):
    return subprocess.run([sys.executable, FAKE, *args], cwd=cwd, env=env, input=stdin, capture_output=True,
                          text=True, timeout=30)


class Checks(unittest.TestCase):
    """Shape checks shared by the tests."""

    def check_lines(self, lines, session, model="claude-fake-1"):
        """A complete turn's lines: init, replay, well-formed messages; returns (assistant blocks, result)."""
        lines = [m for m in lines if isinstance(m, dict)]
        for m in lines:
            self.assertEqual(m["session_id"], session, m)
            if m["type"] in THREADED:
                self.assertIsNone(m["parent_tool_use_id"], m)
                self.assertIn("uuid", m)
        init, replay = lines[0], lines[1]
        self.assertEqual((init["type"], init["subtype"], init["model"]), ("system", "init", model))
        self.assertIn(init["permissionMode"], ("default", "bypassPermissions"))
        self.assertIn("Bash", init["tools"])
        self.assertEqual(replay["type"], "user")
        self.assertEqual(replay["message"]["role"], "user")
        self.assertEqual(replay["message"]["content"][0]["type"], "text")
        result = lines[-1]
        self.assertEqual(result["type"], "result")
        blocks = self.check_messages(lines[2:-1], model)
        return blocks, result

    def check_messages(self, lines, model):
        """stream_event/assistant/user(tool_result) lines: each message framed, deltas adding up to the block."""
        blocks, current, pending = [], None, None
        for m in lines:
            if m["type"] == "user":
                self.assertIsNone(current, "a tool result inside a message")
                self.assertEqual(m["message"]["content"][0]["type"], "tool_result")
                blocks.append(m["message"]["content"][0])
            elif m["type"] == "assistant":
                self.assertIsNotNone(pending, "an assistant line without a finished block before it")
                self.assertEqual(m["message"]["content"], [pending["block"]])
                self.assertEqual((m["message"]["model"], m["message"]["id"]), (model, current))
                self.assertEqual(set(m["message"]["usage"]), set(USAGE))
                blocks.append(pending["block"])
                pending = None
            else:
                current, pending = self.check_event(m["event"], current, pending)
        self.assertIsNone(current, "a message never stopped")
        return blocks

    def check_event(self, event, current, pending):
        kind = event["type"]
        if kind == "message_start":
            self.assertIsNone(current)
            self.assertIn("usage", event["message"])
            return event["message"]["id"], None
        self.assertIsNotNone(current, "%s outside a message" % kind)
        if kind == "content_block_start":
            return current, {"index": event["index"], "start": event["content_block"], "parts": [], "block": None}
        if kind == "content_block_delta":
            self.assertEqual(event["index"], pending["index"])
            pending["parts"].append(event["delta"])
            return current, pending
        if kind == "content_block_stop":
            pending["block"] = self.assemble(pending)
            return current, pending
        if kind == "message_delta":
            self.assertIn(event["delta"]["stop_reason"], ("end_turn", "tool_use", "max_tokens"))
            return current, pending
        self.assertEqual(kind, "message_stop")
        return None, None

    def assemble(self, pending):
        start, parts = pending["start"], pending["parts"]
        if start["type"] == "text":
            self.assertEqual(start["text"], "")
            self.assertTrue(all(p["type"] == "text_delta" for p in parts))
            return {"type": "text", "text": "".join(p["text"] for p in parts)}
        self.assertEqual((start["type"], start["input"]), ("tool_use", {}))
        self.assertTrue(start["id"].startswith("toolu_"))
        self.assertTrue(all(p["type"] == "input_json_delta" for p in parts))
        return dict(start, input=json.loads("".join(p["partial_json"] for p in parts)))


class Base(Checks):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="fakeclaude-")
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, *flags, **kw):
        claude = Claude(self.dir, *flags, **kw)
        self.procs.append(claude)
        return claude

    def texts(self, blocks):
        return [b["text"] for b in blocks if b["type"] == "text"]

    def simple(self, prompt, *flags):
        """One turn of prompt on a new fake: (blocks, result)."""
        claude = self.start(*flags)
        blocks, result = self.check_lines(claude.turn(prompt), claude.session)
        code, rest, _ = claude.finish()
        self.assertEqual((code, rest), (0, []))
        return blocks, result


class Scenarios(Base):
    def test_reply_uses_the_last_line(self):
        blocks, result = self.simple("[from ann in #general]\n\nreply hello there\n\n")
        self.assertEqual(self.texts(blocks), ["you said: reply hello there"])
        self.assertEqual((result["subtype"], result["is_error"], result["result"]), ("success", False,
                                                                                    "you said: reply hello there"))
        self.assertEqual((result["stop_reason"], result["num_turns"], result["permission_denials"]),
                         ("end_turn", 1, []))

    def test_an_unknown_word_replies(self):
        blocks, _ = self.simple("What is 2+2?")
        self.assertEqual(self.texts(blocks), ["you said: What is 2+2?"])

    def test_usage_is_in_the_result(self):
        claude = self.start("--model", "claude-other", "--effort", "high")
        blocks, result = self.check_lines(claude.turn("usage"), claude.session, model="claude-other")
        self.assertEqual(result["usage"], USAGE)
        self.assertEqual(result["total_cost_usd"], 0.001)
        self.assertEqual(result["modelUsage"]["claude-other"]["contextWindow"], 200000)
        self.assertEqual(result["modelUsage"]["claude-other"]["inputTokens"], 10)

    def test_tool(self):
        blocks, result = self.simple("tool")
        self.assertEqual([b["type"] for b in blocks], ["text", "tool_use", "tool_result", "text"])
        self.assertEqual((blocks[1]["name"], blocks[1]["input"]), ("Bash", {"command": "ls -la",
                                                                            "description": "List files"}))
        self.assertEqual((blocks[2]["tool_use_id"], blocks[2]["content"], blocks[2]["is_error"]),
                         (blocks[1]["id"], "a.txt\nb.txt", False))
        self.assertEqual((result["result"], result["num_turns"]), ("Done: 2 files.", 2))

    def test_tool_error(self):
        blocks, _ = self.simple("Tool-Error please")
        self.assertTrue(blocks[2]["is_error"])
        self.assertEqual(blocks[2]["content"], [{"type": "text", "text": "command failed"},
                                                {"type": "text", "text": "exit 1"}])

    def test_fail(self):
        _, result = self.simple("fail")
        self.assertEqual((result["subtype"], result["is_error"], result["result"]),
                         ("success", True, "API Error: 500 overloaded"))

    def test_incomplete(self):
        claude = self.start()
        lines = claude.turn("incomplete")
        _, result = self.check_lines(lines, claude.session)
        self.assertEqual((result["subtype"], result["is_error"], result["stop_reason"], result["terminal_reason"]),
                         ("success", False, "max_tokens", "max_turns"))
        deltas = [m["event"] for m in lines if m["type"] == "stream_event" and m["event"]["type"] == "message_delta"]
        self.assertEqual(deltas[0]["delta"]["stop_reason"], "max_tokens")

    def test_garbage(self):
        claude = self.start()
        lines = claude.turn("garbage")
        self.assertEqual(lines[2], "this is not json")
        blocks, _ = self.check_lines(lines, claude.session)
        self.assertEqual(self.texts(blocks), ["you said: garbage"])

    def test_text_deltas_come_in_pieces(self):
        claude = self.start()
        lines = claude.turn("reply a longer sentence to cut")
        deltas = [m for m in lines if m["type"] == "stream_event" and m["event"]["type"] == "content_block_delta"]
        self.assertTrue(2 <= len(deltas) <= 4, deltas)

    def test_prompts_arriving_in_a_turn_wait_for_it(self):
        claude = self.start()
        claude.send(user_line("reply one"))
        claude.send(user_line("reply two"))
        first = claude.until(lambda m: m["type"] == "result")
        second = claude.until(lambda m: m["type"] == "result")
        self.assertEqual(first[-1]["result"], "you said: reply one")
        self.assertEqual(second[-1]["result"], "you said: reply two")
        self.assertEqual(second[0]["subtype"], "init")


class Permissions(Base):
    def ask_turn(self, claude, prompt, tool_name):
        lines = claude.turn(prompt)
        request = lines[-1]
        self.assertEqual(request["type"], "control_request")
        self.assertNotIn("session_id", request)
        self.assertRegex(request["request_id"], r"^req_\d+_[0-9a-f]+$")
        self.assertEqual((request["request"]["subtype"], request["request"]["tool_name"]), ("can_use_tool", tool_name))
        tool_use = [m for m in lines if m["type"] == "assistant"][-1]["message"]["content"][0]
        self.assertEqual(request["request"]["tool_use_id"], tool_use["id"])
        self.assertEqual(request["request"]["input"], tool_use["input"])
        return lines, request

    def finish_turn(self, claude, lines):
        more = claude.until(lambda m: m["type"] == "result")
        return self.check_lines([m for m in lines if m["type"] != "control_request"] + more, claude.session)

    def test_ask_allowed(self):
        claude = self.start()
        lines, request = self.ask_turn(claude, "ask", "AskUserQuestion")
        self.assertEqual(request["request"]["input"]["questions"][0]["question"], "Which color?")
        claude.send(allow(request["request_id"], dict(request["request"]["input"],
                                                      answers={"Which color?": "Blue"})))
        blocks, result = self.finish_turn(claude, lines)
        self.assertFalse(blocks[1]["is_error"])
        self.assertEqual(result["result"], "answers: Which color?=Blue")

    def test_ask_denied(self):
        claude = self.start()
        lines, request = self.ask_turn(claude, "ask", "AskUserQuestion")
        claude.send(deny(request["request_id"], "no time"))
        blocks, result = self.finish_turn(claude, lines)
        self.assertTrue(blocks[1]["is_error"])
        self.assertEqual(result["result"], "declined: no time")
        self.assertEqual(result["permission_denials"][0]["tool_name"], "AskUserQuestion")

    def test_ask2(self):
        claude = self.start()
        lines, request = self.ask_turn(claude, "ask2", "AskUserQuestion")
        questions = request["request"]["input"]["questions"]
        self.assertEqual([q["multiSelect"] for q in questions], [False, True])
        claude.send(allow(request["request_id"], {"answers": {"Which sizes?": "S, L", "Which color?": "Red"}}))
        _, result = self.finish_turn(claude, lines)
        self.assertEqual(result["result"], "answers: Which color?=Red; Which sizes?=S, L")

    def test_permission_allowed(self):
        claude = self.start()
        lines, request = self.ask_turn(claude, "permission", "Bash")
        self.assertEqual(request["request"]["input"], {"command": "rm -rf build", "description": "Clean"})
        claude.send(allow(request["request_id"], request["request"]["input"]))
        blocks, result = self.finish_turn(claude, lines)
        self.assertEqual((blocks[1]["content"], blocks[1]["is_error"]), ("removed build", False))
        self.assertEqual(result["result"], "allowed: rm -rf build")

    def test_permission_denied(self):
        claude = self.start()
        lines, request = self.ask_turn(claude, "permission", "Bash")
        claude.send(deny(request["request_id"], "not today"))
        blocks, result = self.finish_turn(claude, lines)
        self.assertEqual((blocks[1]["content"], blocks[1]["is_error"]), ("not today", True))
        self.assertEqual(result["result"], "denied: not today")
        self.assertEqual(result["permission_denials"][0]["tool_input"]["command"], "rm -rf build")

    def test_permission_error_answer_is_a_deny(self):
        claude = self.start()
        lines, request = self.ask_turn(claude, "permission", "Bash")
        claude.send({"type": "control_response", "response": {"subtype": "error", "request_id":
                                                              request["request_id"], "error": "ui gone"}})
        _, result = self.finish_turn(claude, lines)
        self.assertEqual(result["result"], "denied: ui gone")

    def test_permission_skipped(self):
        claude = self.start("--dangerously-skip-permissions")
        lines = claude.turn("permission")
        blocks, result = self.check_lines(lines, claude.session)
        self.assertEqual(lines[0]["permissionMode"], "bypassPermissions")
        self.assertEqual(result["result"], "allowed: rm -rf build")

    def test_permission2_asks_twice(self):
        claude = self.start()
        lines, first = self.ask_turn(claude, "permission2", "Bash")
        claude.send(allow(first["request_id"], first["request"]["input"]))
        more = claude.until(lambda m: m["type"] == "control_request")
        second = more[-1]
        self.assertNotEqual(first["request_id"], second["request_id"])
        self.assertNotEqual(first["request"]["tool_use_id"], second["request"]["tool_use_id"])
        claude.send(deny(second["request_id"], "enough"))
        _, result = self.finish_turn(claude, lines + more)
        self.assertEqual(result["result"], "allowed: rm -rf build; denied: enough")

    def test_an_interrupt_while_asking_ends_the_turn(self):
        claude = self.start()
        _, request = self.ask_turn(claude, "permission", "Bash")
        claude.send(interrupt("int-1"))
        ack, result = claude.read(), claude.read()
        self.assertEqual(ack, {"type": "control_response", "response": {"subtype": "success",
                                                                        "request_id": "int-1"}})
        self.assertEqual((result["type"], result["subtype"], result["is_error"]),
                         ("result", "error_during_execution", True))
        self.assertEqual(self.check_lines(claude.turn("reply again"), claude.session)[1]["result"],
                         "you said: reply again")


class Interrupts(Base):
    def test_slow_finishes(self):
        blocks, result = self.simple("slow 0.5")
        self.assertTrue(result["result"].startswith("tick tick tick"), result)

    def test_slow_interrupted(self):
        claude = self.start()
        claude.send(user_line("slow 20"))
        claude.until(lambda m: m["type"] == "stream_event" and m["event"].get("delta", {}).get("text") == "tick ")
        claude.until(lambda m: m["type"] == "stream_event" and m["event"].get("delta", {}).get("text") == "tick ")
        started = time.monotonic()
        claude.send(interrupt("stop-1"))
        lines = claude.until(lambda m: m["type"] == "result", timeout=5)
        self.assertLess(time.monotonic() - started, 2)
        ack = [m for m in lines if m["type"] == "control_response"]
        self.assertEqual(ack, [{"type": "control_response", "response": {"subtype": "success",
                                                                          "request_id": "stop-1"}}])
        self.assertEqual(lines[-2], ack[0])
        self.assertEqual((lines[-1]["subtype"], lines[-1]["is_error"], lines[-1]["result"]),
                         ("error_during_execution", True, ""))
        self.assertEqual(claude.turn("reply next")[-1]["result"], "you said: reply next")
        self.assertEqual(claude.finish()[0], 0)

    def test_an_interrupt_between_turns_gets_no_result(self):
        claude = self.start()
        claude.send(interrupt("idle-1"))
        self.assertEqual(claude.read(), {"type": "control_response", "response": {"subtype": "success",
                                                                                  "request_id": "idle-1"}})
        code, rest, _ = claude.finish()
        self.assertEqual((code, rest), (0, []))

    def test_hang_answers_nothing(self):
        claude = self.start()
        claude.send(user_line("hang"))
        claude.until(lambda m: m["type"] == "stream_event" and m["event"]["type"] == "content_block_delta")
        claude.send(interrupt("int-h"))
        claude.proc.stdin.close()
        with self.assertRaises(queue.Empty):
            claude.read(timeout=1.0)
        self.assertIsNone(claude.proc.poll())

    def test_crash(self):
        claude = self.start()
        claude.send(user_line("crash"))
        code, rest, err = claude.finish()
        self.assertEqual(code, 3)
        self.assertEqual(rest[-1]["event"]["delta"]["type"], "text_delta")
        self.assertIn("fatal: something broke\n  at step 3", err)


class Conversations(Base):
    def home(self):
        return os.path.join(self.dir, ".fake-claude")

    def test_session_id_then_resume(self):
        session = str(uuid.uuid4())
        first = self.start(session=session)
        first.turn("reply one")
        first.turn("reply two")
        self.assertEqual(first.finish()[0], 0)
        again = run(self.dir, BASE_FLAGS + ["--session-id", session])
        self.assertEqual(again.returncode, 1)
        self.assertIn("Error: Session ID %s is already in use." % session, again.stderr)
        resumed = self.start("--resume", session, session=session)
        blocks, result = self.check_lines(resumed.turn("recall"), session)
        self.assertEqual(result["result"], "earlier prompts: reply one | reply two")
        self.assertEqual(resumed.finish()[0], 0)
        with open(os.path.join(self.home(), "sessions", session + ".jsonl")) as f:
            self.assertEqual([json.loads(l)["prompt"] for l in f], ["reply one", "reply two", "recall"])

    def test_resume_of_an_unknown_session(self):
        session = str(uuid.uuid4())
        done = run(self.dir, BASE_FLAGS + ["--resume", session])
        self.assertEqual(done.returncode, 1)
        self.assertIn("No conversation found with session ID: %s" % session, done.stderr)

    def test_the_file_is_made_by_the_first_message(self):
        session = str(uuid.uuid4())
        self.assertEqual(run(self.dir, BASE_FLAGS + ["--session-id", session]).returncode, 0)
        self.assertFalse(os.path.exists(os.path.join(self.home(), "sessions", session + ".jsonl")))
        self.assertEqual(run(self.dir, BASE_FLAGS + ["--session-id", session]).returncode, 0)

    def test_starts_are_recorded_in_the_home(self):
        home = os.path.join(self.dir, "elsewhere")
        env = dict(os.environ, FAKE_CLAUDE_HOME=home)
        args = BASE_FLAGS + ["--session-id", str(uuid.uuid4()), "--model", "m1"]
        self.assertEqual(run(self.dir, args, env=env).returncode, 0)
        with open(os.path.join(home, "starts.jsonl")) as f:
            starts = [json.loads(l) for l in f]
        self.assertEqual(len(starts), 1)
        self.assertEqual((starts[0]["argv"], os.path.realpath(starts[0]["cwd"])), (args, os.path.realpath(self.dir)))
        self.assertIsInstance(starts[0]["pid"], int)
        self.assertFalse(os.path.exists(self.home()))

    def test_init_names_the_cwd(self):
        claude = self.start()
        init = claude.turn("reply")[0]
        self.assertEqual(os.path.realpath(init["cwd"]), os.path.realpath(self.dir))

    def test_fail_start(self):
        env = dict(os.environ, FAKE_CLAUDE_FAIL_START="Invalid API key · Please run /login")
        done = run(self.dir, BASE_FLAGS + ["--session-id", str(uuid.uuid4())], env=env)
        self.assertEqual((done.returncode, done.stdout), (1, ""))
        self.assertIn("Invalid API key", done.stderr)


class BadStarts(Base):
    def check_exit(self, args, code, text):
        done = run(self.dir, args)
        self.assertEqual(done.returncode, code, done.stderr)
        self.assertIn(text, done.stderr)

    def test_each_required_flag(self):
        session = ["--session-id", str(uuid.uuid4())]
        for flag in ("--input-format", "--output-format", "--permission-prompt-tool"):
            i = BASE_FLAGS.index(flag)
            self.check_exit(BASE_FLAGS[:i] + BASE_FLAGS[i + 2:] + session, 2, flag)
        for flag in ("--include-partial-messages", "--replay-user-messages", "--verbose", "-p"):
            self.check_exit([f for f in BASE_FLAGS if f != flag] + session, 2, flag)

    def test_unknown_and_wrong_flags(self):
        session = ["--session-id", str(uuid.uuid4())]
        self.check_exit(BASE_FLAGS + session + ["--frobnicate"], 2, "--frobnicate")
        wrong = ["text" if f == "stream-json" else f for f in BASE_FLAGS]
        self.check_exit(wrong + session, 2, "--input-format")
        self.check_exit(BASE_FLAGS + session + ["--model"], 2, "--model")
        self.check_exit(BASE_FLAGS + session + ["hello"], 2, "hello")

    def test_exactly_one_session_flag(self):
        self.check_exit(BASE_FLAGS, 2, "--session-id")
        self.check_exit(BASE_FLAGS + ["--session-id", str(uuid.uuid4()), "--resume", str(uuid.uuid4())], 2,
                        "--resume")
        self.check_exit(BASE_FLAGS + ["--session-id", "not-a-uuid"], 1, "Must be a valid UUID")


class BadInput(Base):
    def check_rejected(self, *lines):
        claude = self.start()
        for line in lines:
            claude.send(line)
        code, _, err = claude.finish()
        self.assertEqual(code, 2, err)
        bad = lines[-1] if isinstance(lines[-1], str) else json.dumps(lines[-1])
        self.assertIn("fake-claude: unexpected input: " + bad, err)
        return claude

    def test_not_json(self):
        self.check_rejected("hello")

    def test_wrong_user_messages(self):
        self.check_rejected({"type": "user", "message": {"role": "assistant", "content": [{"type": "text",
                                                                                              "text": "x"}]}})
        self.check_rejected({"type": "user", "message": {"role": "user", "content": []}})
        self.check_rejected({"type": "user", "message": {"role": "user", "content": "plain"}})
        self.check_rejected({"type": "user", "message": {"role": "user", "content": [{"type": "image"}]}})

    def test_other_control_requests(self):
        self.check_rejected({"type": "control_request", "request_id": "r", "request": {"subtype": "initialize"}})
        self.check_rejected({"type": "keep_alive"})

    def test_an_answer_to_no_request(self):
        self.check_rejected(allow("req_1_abc", {}))

    def test_malformed_answers(self):
        for bad in ({"behavior": "allow"}, {"behavior": "deny"}, {"behavior": "maybe"},
                    {"behavior": "allow", "updatedInput": {"answers": {"Which color?": 3}}}):
            claude = self.start()
            request = claude.turn("ask")[-1]
            claude.send({"type": "control_response", "response": {"subtype": "success", "request_id":
                                                                  request["request_id"], "response": bad}})
            code, _, err = claude.finish()
            self.assertEqual(code, 2, (bad, err))
            self.assertIn("fake-claude: unexpected input: ", err)

    def test_an_answer_given_twice(self):
        claude = self.start()
        request = claude.turn("permission2")[-1]
        claude.send(deny(request["request_id"], "no"))
        claude.until(lambda m: m["type"] == "control_request")
        claude.send(deny(request["request_id"], "no"))
        self.assertEqual(claude.finish()[0], 2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
