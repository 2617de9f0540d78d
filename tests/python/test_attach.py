"""The turn's place in the journal: request id and cursor in the result, on_accepted, and following a
turn submitted before with attach_turn / attach_turn_async."""
import asyncio
import sys
import uuid

import pytest

import sessionturn
from conftest import WAIT
from test_turns import BRIDGE


def test_result_carries_the_request_id_and_the_cursor(runtime, driver):
    r = driver.submit_turn("where am I", timeout=WAIT)
    assert r.status == "completed"
    assert str(uuid.UUID(r.request_id)) == r.request_id  # not pinned: a fresh random UUID
    assert 0 < r.last_event_id <= runtime.last_event_id
    assert r.journal_id == runtime.journal_id

    pinned = driver.submit_turn("pinned", timeout=WAIT, request_id="req-py-pinned-1")
    assert pinned.request_id == "req-py-pinned-1"
    assert pinned.last_event_id > r.last_event_id
    assert pinned.journal_id == runtime.journal_id
    with pytest.raises(sessionturn.InvalidArgumentError, match="request_id"):
        driver.submit_turn("empty id", timeout=WAIT, request_id="")


def test_on_accepted_gets_the_turn_ref_once(runtime, driver):
    refs = []
    r = driver.submit_turn("accept me", timeout=WAIT, request_id="req-py-acc-1", on_accepted=refs.append)
    assert len(refs) == 1
    ref = refs[0]
    assert isinstance(ref, sessionturn.TurnRef)
    assert ref.request_id == "req-py-acc-1"
    assert ref.turn_id == r.turn_id
    assert ref.journal_id == runtime.journal_id
    assert 0 < ref.last_event_id < r.last_event_id  # accepted at the echo, inside the turn
    assert ref.revision >= 1
    assert ref.to_dict() == {"request_id": "req-py-acc-1", "turn_id": r.turn_id, "last_event_id": ref.last_event_id,
                             "journal_id": runtime.journal_id, "revision": ref.revision}
    assert r.turn_id in repr(ref)
    with pytest.raises(TypeError):
        driver.submit_turn("x", timeout=WAIT, on_accepted=42)


def test_on_accepted_that_raises_abandons_the_turn_and_reraises(driver):
    class Boom(Exception):
        pass

    def on_accepted(ref):
        raise Boom(ref.turn_id)

    with pytest.raises(Boom):
        driver.submit_turn("doomed", timeout=WAIT, on_accepted=on_accepted)
    assert driver.submit_turn("after", timeout=WAIT).status == "completed"


def test_attach_by_request_id_replays_the_finished_turn(runtime, driver):
    submitted = driver.submit_turn("attach to me", timeout=WAIT, request_id="req-py-attach-1")
    events = []
    attached = driver.attach_turn(request_id="req-py-attach-1", last_event_id=0, journal_id=runtime.journal_id,
                                  timeout=WAIT, on_event=events.append)
    assert attached.status == "completed"
    assert attached.turn_id == submitted.turn_id
    assert attached.request_id == "req-py-attach-1"
    assert attached.text == submitted.text and "attach to me" in attached.text
    assert attached.journal_id == runtime.journal_id
    assert attached.last_event_id >= submitted.last_event_id
    # The full replay shows the turn, in order.
    types = [e.type for e in events]
    assert "turn.started" in types and types[-1] == "turn.completed"
    assert all(e.turn_id == submitted.turn_id for e in events)
    assert "attach to me" in "".join(e.text for e in events if e.type == "assistant.delta")


def test_attach_by_turn_id_from_the_accepted_ref(runtime, driver):
    refs = []
    submitted = driver.submit_turn("from the cursor", timeout=WAIT, on_accepted=refs.append)
    again = driver.attach_turn(**refs[0].to_dict(), timeout=WAIT)
    assert again.status == "completed"
    assert again.turn_id == submitted.turn_id
    assert again.text == submitted.text


def test_attach_to_an_unknown_turn_is_not_found(runtime, driver):
    driver.submit_turn("someone else's", timeout=WAIT)
    with pytest.raises(sessionturn.NotFoundError, match="req-py-nobody") as info:
        driver.attach_turn(request_id="req-py-nobody", last_event_id=0, journal_id=runtime.journal_id, timeout=WAIT)
    assert info.value.code == "not_found"
    assert isinstance(info.value, sessionturn.Error)


def test_attach_argument_errors(runtime, driver):
    with pytest.raises(sessionturn.InvalidArgumentError):
        driver.attach_turn(journal_id=runtime.journal_id, timeout=WAIT)  # neither id
    with pytest.raises(sessionturn.InvalidArgumentError, match="last_event_id"):
        driver.attach_turn(request_id="req", last_event_id=-1, timeout=WAIT)
    with pytest.raises(sessionturn.InvalidArgumentError, match="revision"):
        driver.attach_turn(request_id="req", revision=-1, timeout=WAIT)
    with pytest.raises(ValueError):
        driver.attach_turn(request_id="req", timeout=0)
    with pytest.raises(TypeError):
        driver.attach_turn("req")  # keyword-only: a request id is not a turn id


def test_attach_from_a_worker_callback_is_refused(runtime):
    # Over a child process the turn's callbacks run on a Context worker, where a blocking call is
    # refused (over a unix socket they run on the caller's thread, and a nested call runs).
    d = sessionturn.Driver.exec([sys.executable, "-c", BRIDGE, runtime.socket_path])

    def on_event(e):
        if e.type == "turn.started":
            d.attach_turn(request_id="req", journal_id=runtime.journal_id, timeout=WAIT)

    with pytest.raises(sessionturn.WouldBlockError, match="attach_turn_async"):
        d.submit_turn("outer", timeout=WAIT, on_event=on_event)


def test_attach_from_a_blocking_turns_callback_runs_nested(runtime, driver):
    seen = []

    def on_event(e):
        if e.type == "turn.started" and not seen:
            try:
                driver.attach_turn(request_id="req-nobody", journal_id=runtime.journal_id, timeout=WAIT)
            except sessionturn.NotFoundError as error:  # it ran, and found no such turn
                seen.append(str(error))

    r = driver.submit_turn("outer", timeout=WAIT, on_event=on_event)
    assert r.status == "completed"
    assert seen and "req-nobody" in seen[0]


def test_attach_turn_async(runtime, driver):
    submitted = driver.submit_turn("async attach", timeout=WAIT, request_id="req-py-attach-async")

    async def main():
        found = await driver.attach_turn_async(request_id="req-py-attach-async", journal_id=runtime.journal_id,
                                               timeout=WAIT)
        with pytest.raises(sessionturn.NotFoundError):
            await driver.attach_turn_async(request_id="req-py-nobody", journal_id=runtime.journal_id, timeout=WAIT)
        return found

    found = asyncio.run(main())
    assert found.turn_id == submitted.turn_id and found.text == submitted.text


def test_submit_turn_async_pins_and_reports_acceptance(runtime, driver):
    refs = []

    async def main():
        return await driver.submit_turn_async("async pinned", timeout=WAIT, request_id="req-py-async-1",
                                              on_accepted=refs.append)

    r = asyncio.run(main())
    assert r.request_id == "req-py-async-1"
    assert [ref.turn_id for ref in refs] == [r.turn_id]
