#!/usr/bin/python3
"""A scripted fake of the Claude Code CLI in its bidirectional stream-json mode, for sessionturn's `claude-code`
provider tests (standard library only; no network, no model).

Usage (as LocalRuntime starts it, with cwd = the Session's working directory):
  fake_claude.py --input-format stream-json --output-format stream-json --include-partial-messages
                 --replay-user-messages [--dangerously-skip-permissions] --permission-prompt-tool stdio --verbose -p
                 (--session-id UUID | --resume UUID) [--model M] [--effort E]
Every flag but the bracketed ones is required, each once; a missing, repeated or unknown flag (or a positional
argument) is named on stderr and the exit status is 2.

State: the directory $FAKE_CLAUDE_HOME, else <cwd>/.fake-claude (made when missing).
  starts.jsonl         one line per start, written before anything is checked: {"pid", "argv" (the arguments,
                       without the program), "cwd", "env" (which of the chat bridges' secret variables and
                       FAKE_CLAUDE_PROBE it was given)}
  sessions/<id>.jsonl  the conversation: one line {"prompt": TEXT} per user message, appended when its turn
                       starts (a --session-id conversation's file is made by its first message, not at start)
Start failures (exit 1, text on stderr): $FAKE_CLAUDE_FAIL_START non-empty (its text is printed: a broken install
or an auth error); "Error: Invalid session ID. Must be a valid UUID."; "Error: Session ID U is already in use."
(--session-id with an existing file); "No conversation found with session ID: U" (--resume without one).

Protocol: newline-delimited JSON; stderr is free text. stdin takes exactly three shapes, anything else (a line that
is not JSON, a wrong shape, an answer to no request of ours that is waiting) is printed as
"fake-claude: unexpected input: <line>" plus a line giving the reason, and the exit status is 2 (blank lines are
skipped):
  {"type":"user","message":{"role":"user","content":[{"type":"text","text":T}, ...]},
   "parent_tool_use_id":null?,"session_id":str?}        a prompt (its texts joined by "\\n")
  {"type":"control_request","request_id":ID,"request":{"subtype":"interrupt"}}
  {"type":"control_response","response":{"subtype":"success","request_id":OURS,"response":{"behavior":"allow",
   "updatedInput":{...}} | {"behavior":"deny","message":str}}} or {"subtype":"error","request_id":OURS,"error":str}
   (an error answer counts as a deny with that message; an AskUserQuestion allow needs updatedInput.answers, an
   object giving a string for each question's text)
A prompt that arrives during a turn waits for it; stdin's end exits 0 once no turn runs (it exits 1 when a turn
still waits for a control_response). Each turn writes, every line with "session_id" and a "uuid" (and, but for the
system and result lines, "parent_tool_use_id":null):
  {"type":"system","subtype":"init","model","cwd","tools","permissionMode":"default"|"bypassPermissions",...}
  the prompt replayed: {"type":"user","message":{"role":"user","content":[as sent]},...}
  per assistant (API) message: stream_event message_start; per block: content_block_start, 2-4
    content_block_delta (text_delta, or input_json_delta pieces of the tool input's JSON), content_block_stop, then
    {"type":"assistant","message":{"id","type":"message","role":"assistant","model","content":[THE BLOCK],
    "usage":{...}}}; last stream_event message_delta {"stop_reason":...} and message_stop
  tool results: {"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id",
    "content":str|[{"type":"text","text"}],"is_error"}]}}
  {"type":"result","subtype":"success","is_error":false,"result":LAST_TEXT,"stop_reason":"end_turn","num_turns"
    (API messages),"usage","modelUsage":{M:{...,"contextWindow":200000}},"permission_denials":[{tool_name,
    tool_use_id,tool_input} per deny], "total_cost_usd":0.001,...}
A permission question is {"type":"control_request","request_id":"req_N_<hex>","request":{"subtype":"can_use_tool",
"tool_name","input","tool_use_id"}} (no session_id); stdin is read until its answer. An interrupt is answered
{"type":"control_response","response":{"subtype":"success","request_id":THEIRS}}; in a turn that ends it with
{"type":"result","subtype":"error_during_execution","is_error":true,"result":"","stop_reason":null,...} and
nothing else of it.

Scenarios, by the first word (lower-cased) of the prompt's last non-empty line (LINE); unknown words: reply.
  reply, usage   text "you said: LINE"
  tool           text "Running a command." + tool_use Bash {"command":"ls -la","description":"List files"};
                 tool_result "a.txt\\nb.txt"; text "Done: 2 files."
  tool-error     the same, but the tool_result is an error with content [text "command failed", text "exit 1"];
                 text "The command failed."
  ask            tool_use AskUserQuestion, then can_use_tool for it (one question, "Which color?", Red/Blue);
                 allow: tool_result with the answers, text "answers: Which color?=A"; deny: error tool_result,
                 text "declined: MESSAGE"
  ask2           the same with a second, multiSelect question "Which sizes?" (S/M/L): "answers: Q1=A1; Q2=A2"
  permission     tool_use Bash {"command":"rm -rf build","description":"Clean"}, can_use_tool for it (none with
                 --dangerously-skip-permissions); allow: tool_result "removed build", text "allowed: COMMAND"
                 (COMMAND from updatedInput.command); deny: error tool_result MESSAGE, text "denied: MESSAGE"
  permission2    the same twice in one turn (two API messages, two requests); text "OUTCOME1; OUTCOME2"
  fail           a short text, then a result with "is_error":true, "result":"API Error: 500 overloaded"
  incomplete     a text stopped by "max_tokens"; result stop_reason "max_tokens", terminal_reason "max_turns"
  slow [S]       one text block of "tick " deltas, one each 0.2 s for S seconds (default 30); interruptible
  hang           one delta, then reads stdin and answers nothing (not even interrupts) until killed
  crash          one delta, then stderr "fatal: something broke" and "  at step 3", exit 3
  garbage        the stdout line "this is not json" (after the replay), then as reply
  recall         text "earlier prompts: P1 | P2 ..." (this conversation's earlier prompts, from its file)
"""

import collections
import json
import os
import queue
import re
import sys
import threading
import time
import uuid

DEFAULT_MODEL = "claude-fake-1"
TOOLS = ["Task", "Bash", "Glob", "Grep", "Read", "Edit", "Write", "WebFetch", "WebSearch", "TodoWrite",
         "AskUserQuestion"]
USAGE = {"input_tokens": 10, "cache_creation_input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 20}
VALUED = {"--input-format": "stream-json", "--output-format": "stream-json", "--permission-prompt-tool": "stdio",
          "--session-id": None, "--resume": None, "--model": None, "--effort": None}
REQUIRED_SWITCHES = ("--include-partial-messages", "--replay-user-messages", "--verbose", "-p")
SWITCHES = REQUIRED_SWITCHES + ("--dangerously-skip-permissions",)
UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
COLOR = {"question": "Which color?", "header": "Color", "multiSelect": False,
         "options": [{"label": "Red", "description": "warm"}, {"label": "Blue", "description": "cool"}]}
SIZES = {"question": "Which sizes?", "header": "Size", "multiSelect": True,
         "options": [{"label": "S", "description": ""}, {"label": "M", "description": ""},
                     {"label": "L", "description": ""}]}


class UsageError(Exception):
    pass


class BadInput(Exception):
    pass


class Interrupted(Exception):
    def __init__(self, request_id):
        super().__init__(request_id)
        self.request_id = request_id


class Decision:
    """A can_use_tool answer: allowed with updated_input, or denied with message."""

    def __init__(self, allowed, updated_input=None, message=None):
        self.allowed, self.updated_input, self.message = allowed, updated_input, message


class Output:
    """stdout, one JSON (or raw) line at a time, flushed; a closed stdout ends the process."""

    def __init__(self):
        self.lock = threading.Lock()

    def line(self, text):
        with self.lock:
            try:
                sys.stdout.write(text + "\n")
                sys.stdout.flush()
            except (BrokenPipeError, OSError):
                os._exit(1)

    def json(self, obj):
        self.line(json.dumps(obj, separators=(",", ":"), ensure_ascii=False))


OUT = Output()


def die(code, text):
    """Print text on stderr and exit at once (from any thread), never in the middle of a stdout line."""
    with OUT.lock:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
        os._exit(code)


def new_hex(n):
    return uuid.uuid4().hex[:n]


def append_json(path, obj):
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(obj, ensure_ascii=False) + "\n")


# ---- command line -------------------------------------------------------------------------------------------------

def parse_args(args):
    """The options as {flag: value or True}; UsageError names the flag at fault."""
    opts = {}
    i = 0
    while i < len(args):
        flag = args[i]
        if flag in VALUED:
            if i + 1 >= len(args) or args[i + 1].startswith("-"):
                raise UsageError("option %s needs a value" % flag)
            value, i = args[i + 1], i + 2
        elif flag in SWITCHES:
            value, i = True, i + 1
        else:
            raise UsageError("unknown option: %s" % flag if flag.startswith("-") else "unexpected argument: %s" % flag)
        if flag in opts:
            raise UsageError("option %s given twice" % flag)
        opts[flag] = value
    check_required(opts)
    return opts


def check_required(opts):
    for flag, want in VALUED.items():
        if want is not None and flag not in opts:
            raise UsageError("missing required option: %s %s" % (flag, want))
        if want is not None and opts[flag] != want:
            raise UsageError("option %s must be %s, not %s" % (flag, want, opts[flag]))
    for flag in REQUIRED_SWITCHES:
        if flag not in opts:
            raise UsageError("missing required option: %s" % flag)
    if ("--session-id" in opts) == ("--resume" in opts):
        raise UsageError("exactly one of --session-id and --resume is required")


# ---- stdin --------------------------------------------------------------------------------------------------------

def require(condition, reason):
    if not condition:
        raise BadInput(reason)


def check_user(msg):
    message = msg.get("message")
    require(isinstance(message, dict) and message.get("role") == "user", "message.role must be \"user\"")
    content = message.get("content")
    require(isinstance(content, list) and content, "message.content must be a non-empty list")
    for block in content:
        require(isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str),
                "each content block must be {\"type\":\"text\",\"text\":string}")
    require(msg.get("parent_tool_use_id") is None, "parent_tool_use_id must be null")
    require(isinstance(msg.get("session_id", ""), str), "session_id must be a string")


def check_interrupt(msg):
    require(isinstance(msg.get("request_id"), str) and msg["request_id"], "request_id must be a non-empty string")
    request = msg.get("request")
    require(request == {"subtype": "interrupt"}, "the only control_request accepted is {\"subtype\":\"interrupt\"}")


def check_decision(inner, request):
    require(isinstance(inner, dict), "response.response must be an object")
    behavior = inner.get("behavior")
    if behavior == "deny":
        require(isinstance(inner.get("message"), str), "a deny needs message, a string")
        return Decision(False, message=inner["message"])
    require(behavior == "allow", "behavior must be \"allow\" or \"deny\"")
    updated = inner.get("updatedInput")
    require(isinstance(updated, dict), "an allow needs updatedInput, an object")
    if request["tool_name"] == "AskUserQuestion":
        answers = updated.get("answers")
        require(isinstance(answers, dict), "an AskUserQuestion allow needs updatedInput.answers, an object")
        for question in request["input"]["questions"]:
            require(isinstance(answers.get(question["question"]), str),
                    "updatedInput.answers has no string answer for %r" % question["question"])
    return Decision(True, updated_input=updated)


class Inbox:
    """stdin, read and checked by a thread; the main thread takes prompts, answers and interrupts from it."""

    def __init__(self):
        self.items = queue.Queue()
        self.prompts = collections.deque()
        self.answers = {}
        self.sent = {}
        self.lock = threading.Lock()
        self.eof = False
        self.in_turn = False
        self.deaf = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            raw = sys.stdin.buffer.readline()
            if not raw:
                break
            line = raw.rstrip(b"\r\n").decode("utf-8", "replace")
            if not line.strip():
                continue
            try:
                self.items.put(self._classify(raw.decode("utf-8")))
            except (BadInput, UnicodeDecodeError) as e:
                die(2, "fake-claude: unexpected input: %s\nfake-claude: %s" % (line, e))
        self.items.put(("eof", None))

    def _classify(self, line):
        try:
            msg = json.loads(line)
        except ValueError:
            raise BadInput("not JSON")
        require(isinstance(msg, dict), "not a JSON object")
        kind = msg.get("type")
        if kind == "user":
            check_user(msg)
            return ("user", msg)
        if kind == "control_request":
            check_interrupt(msg)
            return ("interrupt", msg["request_id"])
        require(kind == "control_response", "type must be user, control_request or control_response")
        return ("answer", self._check_answer(msg.get("response")))

    def _check_answer(self, resp):
        require(isinstance(resp, dict), "response must be an object")
        request_id = resp.get("request_id")
        with self.lock:
            request = self.sent.pop(request_id, None) if isinstance(request_id, str) else None
        require(request is not None, "request_id %r names no request of ours awaiting an answer" % (request_id,))
        if resp.get("subtype") == "error":
            require(isinstance(resp.get("error"), str), "an error response needs error, a string")
            return request_id, Decision(False, message=resp["error"])
        require(resp.get("subtype") == "success", "response.subtype must be \"success\" or \"error\"")
        return request_id, check_decision(resp.get("response"), request)

    def expect(self, request_id, request):
        with self.lock:
            self.sent[request_id] = request

    def _handle(self, kind, value):
        if kind == "eof":
            self.eof = True
        elif kind == "user":
            self.prompts.append(value)
        elif kind == "answer":
            self.answers[value[0]] = value[1]
        elif self.deaf:
            pass
        elif self.in_turn:
            raise Interrupted(value)
        else:
            OUT.json(interrupt_ack(value))

    def check(self):
        """Take what has arrived without waiting (an interrupt raises Interrupted)."""
        while True:
            try:
                item = self.items.get_nowait()
            except queue.Empty:
                return
            self._handle(*item)

    def sleep(self, seconds):
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                item = self.items.get(timeout=left)
            except queue.Empty:
                return
            self._handle(*item)

    def wait_answer(self, request_id):
        while request_id not in self.answers:
            if self.eof:
                die(1, "fake-claude: stdin closed while waiting for the answer to %s" % request_id)
            self._handle(*self.items.get())
        return self.answers.pop(request_id)

    def next_prompt(self):
        """The next user message (waiting for it, answering interrupts meanwhile), or None at stdin's end."""
        self.in_turn = False
        while not self.prompts:
            if self.eof:
                return None
            self._handle(*self.items.get())
        self.in_turn = True
        return self.prompts.popleft()

    def hang(self):
        """Read on and answer nothing (not even interrupts) until killed."""
        self.deaf = True
        while True:
            self._handle(*self.items.get())


def interrupt_ack(request_id):
    return {"type": "control_response", "response": {"subtype": "success", "request_id": request_id}}


# ---- a turn -------------------------------------------------------------------------------------------------------

def pieces(text):
    """text cut into 2-4 pieces (fewer only when it is shorter)."""
    if not text:
        return []
    count = min(2 + len(text) % 3, len(text))
    size = -(-len(text) // count)
    return [text[i:i + size] for i in range(0, len(text), size)]


def text_block(text):
    return {"type": "text", "text": text}


def tool_block(name, tool_input):
    return {"type": "tool_use", "id": "toolu_01" + new_hex(22), "name": name, "input": tool_input}


class Turn:
    """One prompt's output; the scenarios are written with its methods."""

    def __init__(self, session):
        self.session = session
        self.started = time.monotonic()
        self.api_messages = 0
        self.last_text = ""
        self.denials = []
        self.message_base = None

    def emit(self, obj, threaded=True):
        obj = dict(obj, session_id=self.session.id)
        if threaded:
            obj["parent_tool_use_id"] = None
        obj["uuid"] = str(uuid.uuid4())
        OUT.json(obj)

    def event(self, event):
        self.emit({"type": "stream_event", "event": event})
        self.session.inbox.check()

    def open_message(self):
        self.api_messages += 1
        self.message_base = {"id": "msg_01" + new_hex(22), "type": "message", "role": "assistant",
                             "model": self.session.model}
        self.event({"type": "message_start", "message": dict(self.message_base, content=[], stop_reason=None,
                                                               stop_sequence=None, usage=dict(USAGE, output_tokens=1))})

    def block_start(self, index, block):
        start = text_block("") if block["type"] == "text" else dict(block, input={})
        self.event({"type": "content_block_start", "index": index, "content_block": start})

    def delta(self, index, delta):
        self.event({"type": "content_block_delta", "index": index, "delta": delta})

    def block_stop(self, index, block):
        self.event({"type": "content_block_stop", "index": index})
        if block["type"] == "text":
            self.last_text = block["text"]
        self.emit({"type": "assistant", "message": dict(self.message_base, content=[block], stop_reason=None,
                                                        stop_sequence=None, usage=dict(USAGE))})

    def close_message(self, stop_reason):
        self.event({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": USAGE["output_tokens"]}})
        self.event({"type": "message_stop"})

    def message(self, blocks, stop_reason="end_turn"):
        """One API message of complete blocks, streamed; returns the blocks."""
        self.open_message()
        for index, block in enumerate(blocks):
            self.block_start(index, block)
            if block["type"] == "text":
                deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
            else:
                partial = json.dumps(block["input"], separators=(",", ":"), ensure_ascii=False)
                deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces(partial)]
            for delta in deltas:
                self.delta(index, delta)
            self.block_stop(index, block)
        self.close_message(stop_reason)
        return blocks

    def say(self, text):
        self.message([text_block(text)])

    def tool_result(self, tool_use_id, content, is_error):
        result = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}
        self.emit({"type": "user", "message": {"role": "user", "content": [result]}})

    def can_use_tool(self, block):
        """Ask the client about block (a tool_use): its Decision."""
        session = self.session
        session.requests += 1
        request_id = "req_%d_%s" % (session.requests, new_hex(8))
        request = {"subtype": "can_use_tool", "tool_name": block["name"], "input": block["input"],
                   "tool_use_id": block["id"]}
        session.inbox.expect(request_id, request)
        OUT.json({"type": "control_request", "request_id": request_id, "request": request})
        decision = session.inbox.wait_answer(request_id)
        if not decision.allowed:
            self.denials.append({"tool_name": block["name"], "tool_use_id": block["id"], "tool_input": block["input"]})
        return decision

    def result(self, subtype, **fields):
        model = self.session.model
        elapsed = int((time.monotonic() - self.started) * 1000)
        obj = {"type": "result", "subtype": subtype, "is_error": False, "duration_ms": elapsed,
               "duration_api_ms": elapsed, "num_turns": self.api_messages, "result": self.last_text,
               "stop_reason": "end_turn", "total_cost_usd": 0.001, "usage": dict(USAGE),
               "modelUsage": {model: {"inputTokens": 10, "outputTokens": 20, "cacheReadInputTokens": 100,
                                      "cacheCreationInputTokens": 5, "webSearchRequests": 0, "costUSD": 0.001,
                                      "contextWindow": 200000}},
               "permission_denials": self.denials}
        obj.update(fields)
        self.emit(obj, threaded=False)


# ---- scenarios ----------------------------------------------------------------------------------------------------

def reply(turn, line, args):
    turn.say("you said: " + line)


def tool(turn, line, args, error=False):
    _, call = turn.message([text_block("Running a command."),
                            tool_block("Bash", {"command": "ls -la", "description": "List files"})], "tool_use")
    if error:
        turn.tool_result(call["id"], [text_block("command failed"), text_block("exit 1")], True)
        turn.say("The command failed.")
    else:
        turn.tool_result(call["id"], "a.txt\nb.txt", False)
        turn.say("Done: 2 files.")


def tool_error(turn, line, args):
    tool(turn, line, args, error=True)


def ask(turn, line, args, questions=(COLOR,)):
    [call] = turn.message([tool_block("AskUserQuestion", {"questions": list(questions)})], "tool_use")
    decision = turn.can_use_tool(call)
    if not decision.allowed:
        turn.tool_result(call["id"], decision.message, True)
        turn.say("declined: " + decision.message)
        return
    answers = decision.updated_input["answers"]
    given = [(q["question"], answers[q["question"]]) for q in questions]
    turn.tool_result(call["id"], "User has answered your questions: %s. You can now continue with the user's "
                     "answers in mind." % ", ".join('"%s"="%s"' % qa for qa in given), False)
    turn.say("answers: " + "; ".join("%s=%s" % qa for qa in given))


def ask2(turn, line, args):
    ask(turn, line, args, questions=(COLOR, SIZES))


def permission(turn, line, args, times=1):
    outcomes = []
    for _ in range(times):
        [call] = turn.message([tool_block("Bash", {"command": "rm -rf build", "description": "Clean"})], "tool_use")
        if turn.session.skip_permissions:
            decision = Decision(True, updated_input=call["input"])
        else:
            decision = turn.can_use_tool(call)
        if decision.allowed:
            command = decision.updated_input.get("command")
            turn.tool_result(call["id"], "removed build", False)
            outcomes.append("allowed: " + (command if isinstance(command, str) else call["input"]["command"]))
        else:
            turn.tool_result(call["id"], decision.message, True)
            outcomes.append("denied: " + decision.message)
    turn.say("; ".join(outcomes))


def permission2(turn, line, args):
    permission(turn, line, args, times=2)


def fail(turn, line, args):
    turn.say("Let me check.")
    return {"is_error": True, "result": "API Error: 500 overloaded"}


def incomplete(turn, line, args):
    turn.message([text_block("This answer was cut off in the mid")], "max_tokens")
    return {"stop_reason": "max_tokens", "terminal_reason": "max_turns"}


def slow(turn, line, args):
    try:
        seconds = float(args[0]) if args else 30.0
    except ValueError:
        seconds = 30.0
    deadline = time.monotonic() + seconds
    turn.open_message()
    turn.block_start(0, text_block(""))
    text = ""
    while True:
        turn.delta(0, {"type": "text_delta", "text": "tick "})
        text += "tick "
        if time.monotonic() >= deadline:
            break
        turn.session.inbox.sleep(0.2)
    turn.block_stop(0, text_block(text))
    turn.close_message("end_turn")


def hang(turn, line, args):
    turn.session.inbox.deaf = True
    turn.open_message()
    turn.block_start(0, text_block(""))
    turn.delta(0, {"type": "text_delta", "text": "Thinking"})
    turn.session.inbox.hang()


def crash(turn, line, args):
    turn.open_message()
    turn.block_start(0, text_block(""))
    turn.delta(0, {"type": "text_delta", "text": "Starting"})
    die(3, "fatal: something broke\n  at step 3")


def garbage(turn, line, args):
    OUT.line("this is not json")
    reply(turn, line, args)


def recall(turn, line, args):
    earlier = turn.session.prompts()[:-1]
    turn.say("earlier prompts: " + " | ".join(earlier))


# The chat bridges' secrets (an agent must never see them) and a variable that must get through.
WATCHED_ENV = ("TELEGRAM_BOT_TOKEN", "TELEGRAM_WEBHOOK_SECRET", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN",
               "SLACK_SIGNING_SECRET", "FAKE_CLAUDE_PROBE")

SCENARIOS = {"reply": reply, "usage": reply, "tool": tool, "tool-error": tool_error, "ask": ask, "ask2": ask2,
             "permission": permission, "permission2": permission2, "fail": fail, "incomplete": incomplete,
             "slow": slow, "hang": hang, "crash": crash, "garbage": garbage, "recall": recall}


# ---- the session --------------------------------------------------------------------------------------------------

class Session:
    def __init__(self, opts, home):
        self.id = opts.get("--session-id") or opts["--resume"]
        self.resume = "--resume" in opts
        self.model = opts.get("--model", DEFAULT_MODEL)
        self.skip_permissions = "--dangerously-skip-permissions" in opts
        self.file = os.path.join(home, "sessions", "%s.jsonl" % self.id)
        self.requests = 0
        self.inbox = None

    def start_problem(self):
        """Why this session cannot start (stderr text), or None."""
        if self.resume:
            if not UUID_RE.match(self.id) or not os.path.exists(self.file):
                return "No conversation found with session ID: %s" % self.id
        elif not UUID_RE.match(self.id):
            return "Error: Invalid session ID. Must be a valid UUID."
        elif os.path.exists(self.file):
            return "Error: Session ID %s is already in use." % self.id
        return None

    def prompts(self):
        with open(self.file, encoding="utf-8") as f:
            return [json.loads(line)["prompt"] for line in f if line.strip()]

    def record(self, prompt):
        os.makedirs(os.path.dirname(self.file), exist_ok=True)
        append_json(self.file, {"prompt": prompt})

    def serve(self):
        self.inbox = Inbox()
        while True:
            msg = self.inbox.next_prompt()
            if msg is None:
                return 0
            self.run_turn(msg)

    def run_turn(self, msg):
        content = msg["message"]["content"]
        prompt = "\n".join(block["text"] for block in content)
        self.record(prompt)
        turn = Turn(self)
        turn.emit({"type": "system", "subtype": "init", "cwd": os.getcwd(), "tools": TOOLS, "mcp_servers": [],
                   "model": self.model, "permissionMode": "bypassPermissions" if self.skip_permissions else "default",
                   "slash_commands": [], "apiKeySource": "none", "claude_code_version": "2.0.0-fake",
                   "output_style": "default"}, threaded=False)
        turn.emit({"type": "user", "message": {"role": "user", "content": content}})
        lines = [line.strip() for line in prompt.splitlines() if line.strip()]
        line = lines[-1] if lines else ""
        words = line.split()
        scenario = SCENARIOS.get(words[0].lower() if words else "", reply)
        try:
            turn.result("success", **(scenario(turn, line, words[1:]) or {}))
        except Interrupted as e:
            OUT.json(interrupt_ack(e.request_id))
            turn.result("error_during_execution", is_error=True, result="", stop_reason=None)


def main(args):
    sys.stdout.reconfigure(encoding="utf-8")
    sys.stderr.reconfigure(encoding="utf-8")
    home = os.environ.get("FAKE_CLAUDE_HOME") or os.path.join(os.getcwd(), ".fake-claude")
    os.makedirs(home, exist_ok=True)
    append_json(os.path.join(home, "starts.jsonl"), {"pid": os.getpid(), "argv": args, "cwd": os.getcwd(),
                                                     "env": sorted(k for k in os.environ if k in WATCHED_ENV)})
    try:
        opts = parse_args(args)
    except UsageError as e:
        print("fake-claude: %s" % e, file=sys.stderr)
        return 2
    if os.environ.get("FAKE_CLAUDE_FAIL_START"):
        print(os.environ["FAKE_CLAUDE_FAIL_START"], file=sys.stderr)
        return 1
    session = Session(opts, home)
    problem = session.start_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    return session.serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
