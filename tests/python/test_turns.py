"""Turns through the bindings: blocking, streamed events, errors mapped to the exception hierarchy,
the exec driver, interrupt, callbacks that raise, and the GIL released while a turn blocks."""
import sys
import threading
import time

import pytest

import sessionturn
from conftest import WAIT


def test_echo_turn_streams_events(driver):
    events = []
    result = driver.submit_turn("hello from python", timeout=WAIT, on_event=events.append)
    assert isinstance(result, sessionturn.TurnResult)
    assert result.status == "completed"
    assert "hello from python" in result.text
    assert result.turn_id
    assert result.message == ""
    assert (result.declined_questions, result.answered_questions, result.shared, result.reconnects) == (0, 0, False, 0)
    types = [e.type for e in events]
    assert "turn.started" in types and types[-1] == "turn.completed"
    deltas = "".join(e.text for e in events if e.type == "assistant.delta")
    assert "hello from python" in deltas
    for e in events:
        assert e.turn_id == result.turn_id
        raw = e.raw
        assert isinstance(raw, dict) and raw["type"] == e.type
    assert isinstance(events[0].tool_name, str)


def test_command_prompts_are_refused_before_io(driver):
    with pytest.raises(sessionturn.InvalidArgumentError) as info:
        driver.submit_turn("!ls", timeout=WAIT)
    err = info.value
    assert isinstance(err, sessionturn.Error) and isinstance(err, ValueError)
    assert err.code == "invalid_argument"
    assert err.http_status == 0
    with pytest.raises(sessionturn.InvalidArgumentError):
        driver.submit_turn("", timeout=WAIT)


def test_runtime_rejection(driver):
    with pytest.raises(sessionturn.RejectedError) as info:
        driver.submit_turn("/goal ship it", timeout=WAIT, allow_commands=True)
    assert "/goal is available only in Codex Sessions" in str(info.value)
    assert info.value.code == "rejected"


def test_interrupt_without_turn_is_rejected(driver):
    with pytest.raises(sessionturn.RejectedError, match="no active turn"):
        driver.interrupt(timeout=WAIT)


def test_connection_failure_and_bad_arguments(tmp_path):
    d = sessionturn.Driver.unix(str(tmp_path / "absent.sock"))
    with pytest.raises(sessionturn.ConnectionFailedError) as info:
        d.submit_turn("hello", timeout=WAIT, reconnect=False)
    assert isinstance(info.value, ConnectionError)
    assert "absent.sock" in str(info.value)
    with pytest.raises(sessionturn.InvalidArgumentError):
        sessionturn.Driver.unix("")
    with pytest.raises(sessionturn.InvalidArgumentError):
        sessionturn.Driver.exec([])
    with pytest.raises(ValueError):
        d.submit_turn("hello", timeout=0)
    with pytest.raises(TypeError):
        d.submit_turn("hello", on_event=42)
    with pytest.raises(sessionturn.InvalidArgumentError, match="bogus"):
        sessionturn.LocalRuntime(provider="bogus")


BRIDGE = """
import socket, sys, threading
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
def up():
    while True:
        b = sys.stdin.buffer.read1(65536)
        if not b: break
        s.sendall(b)
threading.Thread(target=up, daemon=True).start()
while True:
    b = s.recv(65536)
    if not b: break
    sys.stdout.buffer.write(b); sys.stdout.buffer.flush()
"""


def test_exec_driver(runtime):
    d = sessionturn.Driver.exec([sys.executable, "-c", BRIDGE, runtime.socket_path])
    result = d.submit_turn("through a child", timeout=WAIT)
    assert result.status == "completed"
    assert "through a child" in result.text


def test_interrupt_a_running_turn(slow_runtime):
    d = slow_runtime.driver()
    started = threading.Event()
    errors = []

    def on_event(e):
        if e.type == "turn.started":
            started.set()

    def interrupter():
        if started.wait(WAIT):
            try:
                d.interrupt(timeout=WAIT)
            except sessionturn.Error as exc:  # pragma: no cover - reported below
                errors.append(exc)

    t = threading.Thread(target=interrupter)
    t.start()
    result = d.submit_turn("a long one", timeout=WAIT, on_event=on_event)
    t.join(WAIT)
    assert not errors
    assert result.status == "interrupted"


def test_timeout(slow_runtime):
    d = slow_runtime.driver()
    with pytest.raises(sessionturn.TimeoutError) as info:
        d.submit_turn("too slow", timeout=0.5)
    assert isinstance(info.value, TimeoutError)  # also the builtin
    # The abandoned turn was withdrawn: the runtime takes the next one.
    r = d.submit_turn("next", timeout=WAIT)
    assert r.status == "completed" and "next" in r.text


def test_callback_that_raises_abandons_the_turn_and_reraises(slow_runtime):
    d = slow_runtime.driver()

    class Boom(Exception):
        pass

    def on_event(e):
        if e.type == "turn.started":
            raise Boom("from on_event")

    t0 = time.monotonic()
    with pytest.raises(Boom, match="from on_event"):
        d.submit_turn("doomed", timeout=WAIT, on_event=on_event)
    # Abandoned at once (interrupt), not run to the end of its ~6 s.
    assert time.monotonic() - t0 < 5.0
    r = d.submit_turn("after", timeout=WAIT)
    assert r.status == "completed" and "after" in r.text
    assert d.turns_in_flight == 0


def test_gil_is_released_while_blocking(slow_runtime):
    d = slow_runtime.driver()
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", d.submit_turn("blocking", timeout=WAIT)))
    t.start()
    spins = 0
    deadline = time.monotonic() + WAIT
    while t.is_alive() and time.monotonic() < deadline:
        spins += 1
    t.join(WAIT)
    assert box["r"].status == "completed"
    # Pure-Python work ran throughout the multi-second turn.
    assert spins > 10000


def test_blocking_call_from_a_worker_callback_is_refused(runtime):
    # Over a child process the turn runs on the Context: its callbacks run on a worker, where a
    # blocking call would wait for the very thread that has to finish it.
    d = sessionturn.Driver.exec([sys.executable, "-c", BRIDGE, runtime.socket_path])

    def on_event(e):
        if e.type == "turn.started":
            d.submit_turn("nested", timeout=WAIT)

    with pytest.raises(sessionturn.WouldBlockError, match="callback"):
        d.submit_turn("outer", timeout=WAIT, on_event=on_event)


def test_blocking_call_from_a_blocking_turns_callback_runs_nested(driver):
    # Over a unix socket a blocking turn runs on the calling thread: a blocking call from its callback
    # is not on a worker, so it runs (queued behind the outer turn in the Session) and returns.
    nested = []

    def on_event(e):
        if e.type == "turn.started" and not nested:
            nested.append(driver.submit_turn("nested", timeout=WAIT).text)

    r = driver.submit_turn("outer", timeout=WAIT, on_event=on_event)
    assert r.status == "completed"
    assert "outer" in r.text
    assert nested and "nested" in nested[0]
