"""events() holds unread events up to max_buffered_bytes (their JSON lines); beyond it the watch stops
and iteration raises TooLargeError after the events buffered so far: never silent drops, never
unbounded growth, never a hang."""
import time

import pytest

import sessionturn
from conftest import WAIT


def _line_bytes(event):
    return len(event.raw_json.encode("utf-8"))


def _wait_inactive(stream):
    deadline = time.monotonic() + WAIT
    while stream.active and time.monotonic() < deadline:
        time.sleep(0.01)
    return not stream.active


def _journal(driver):
    """Every event of the retained journal, read by an unbounded stream (the runtime is idle)."""
    out = []
    with driver.events(timeout=WAIT) as stream:
        for e in stream:
            out.append(e)
            if e.type == "turn.completed":
                return out
    raise AssertionError("no turn.completed in the journal")


def test_default_bound_and_validation(driver):
    assert sessionturn.DEFAULT_MAX_BUFFERED_BYTES == 64 << 20
    with driver.events(timeout=WAIT) as stream:
        assert stream.max_buffered_bytes == sessionturn.DEFAULT_MAX_BUFFERED_BYTES
    with driver.events(timeout=WAIT, max_buffered_bytes=1234) as stream:
        assert stream.max_buffered_bytes == 1234
    for bad in (0, -1):
        with pytest.raises(sessionturn.InvalidArgumentError, match="max_buffered_bytes"):
            driver.events(max_buffered_bytes=bad)


def test_unread_events_beyond_the_bound_fail_the_stream(driver):
    # An echo turn whose journal is larger than the bound below.
    driver.submit_turn("an echo turn with a few words in it", timeout=WAIT)
    journal = _journal(driver)
    assert len(journal) > 3
    bound = sum(_line_bytes(e) for e in journal[:3])  # exactly three events fit

    stream = driver.events(timeout=WAIT, max_buffered_bytes=bound)
    # Nobody reads: the watch fills the buffer, overflows at the fourth event and stops by itself.
    assert _wait_inactive(stream), "the watch kept running past its bound"
    got = []
    with pytest.raises(sessionturn.TooLargeError) as info:
        for e in stream:
            got.append(e)
    # The events buffered before the bound are delivered, in order, then the error: nothing silent.
    assert [(e.id, e.type) for e in got] == [(e.id, e.type) for e in journal[:3]]
    message = str(info.value)
    assert "max_buffered_bytes" in message and f"{bound} bytes" in message
    assert info.value.code == "too_large"
    # The stream stays failed.
    with pytest.raises(sessionturn.TooLargeError):
        next(stream)
    stream.close()


def test_a_tiny_bound_fails_at_the_first_event(driver):
    driver.submit_turn("tiny", timeout=WAIT)
    with driver.events(timeout=WAIT, max_buffered_bytes=1) as stream:
        with pytest.raises(sessionturn.TooLargeError, match="1 bytes"):
            next(stream)
        assert _wait_inactive(stream)


def test_read_events_no_longer_count(driver):
    driver.submit_turn("first", timeout=WAIT)
    journal = _journal(driver)
    # Room for one turn's events (plus slack for longer ids): a second turn of the same size fits only
    # if the first turn's events stopped counting once they were read.
    bound = sum(_line_bytes(e) for e in journal) + 2 * max(_line_bytes(e) for e in journal)
    with driver.events(timeout=WAIT, max_buffered_bytes=bound) as stream:
        for e in stream:
            if e.type == "history.end":  # after the replay (and the runtime.status that follows it)
                break
        driver.submit_turn("again", timeout=WAIT)  # its events are buffered while we block here
        for e in stream:
            if e.type == "turn.completed":
                break
        assert stream.active
