"""Fixtures of the Python binding tests: each test gets its own in-process LocalRuntime (a private
temporary socket directory, removed at the end) and a driver for it."""
import json
import os
import tempfile

import pytest

import sessionturn

# Far above what a healthy run needs on a loaded 2-core machine: only a real hang trips it.
WAIT = 30.0

QUESTION_SCRIPT = {
    "turns": [{"steps": [
        {"type": "delta", "text": "thinking... "},
        {"type": "question", "inputId": "q-1", "questions": [
            {"id": "color", "header": "Color", "question": "Which color?",
             "options": [{"label": "red"}, {"label": "blue", "description": "the sky"}]}]},
        {"type": "message", "text": "done asking"},
    ]}]
}


@pytest.fixture
def runtime():
    with sessionturn.LocalRuntime(echo_delay=0.005) as rt:
        yield rt


@pytest.fixture
def slow_runtime():
    """Echo turns of about six seconds (three deltas two seconds apart): time to interrupt them."""
    with sessionturn.LocalRuntime(echo_delay=2.0) as rt:
        yield rt


@pytest.fixture
def question_runtime():
    with tempfile.TemporaryDirectory(prefix="st_py_") as d:
        path = os.path.join(d, "script.json")
        with open(path, "w") as f:
            json.dump(QUESTION_SCRIPT, f)
        with sessionturn.LocalRuntime(os.path.join(d, "rt.sock"), provider="script:" + path) as rt:
            yield rt


@pytest.fixture
def driver(runtime):
    return sessionturn.Driver.unix(runtime.socket_path)
