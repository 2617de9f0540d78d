"""Questions: answered later from another thread, declined by the caller, declined at the deadline."""
import threading

import sessionturn
from conftest import WAIT


def test_question_answered_later_from_another_thread(question_runtime):
    d = question_runtime.driver()
    asked = []
    outcomes = []
    timers = []

    def on_question(request, responder):
        asked.append(request)

        def later():
            outcomes.append(responder.answer({"color": ["blue"]}))
            outcomes.append(responder.answer({"color": ["red"]}))  # exactly once
            outcomes.append(responder.decline())

        t = threading.Timer(0.1, later)
        timers.append(t)
        t.start()

    result = d.submit_turn("ask me", timeout=WAIT, on_question=on_question, answer_timeout=WAIT)
    # The turn may end as soon as the first answer lands, before the timer thread tried the others.
    for t in timers:
        t.join(WAIT)
    assert outcomes == [True, False, False]
    assert result.status == "completed"
    assert result.answered_questions == 1 and result.declined_questions == 0
    assert "Answers: color=blue" in result.text
    (req,) = asked
    assert req.input_id == "q-1"
    (q,) = req.questions
    assert (q.id, q.header, q.question) == ("color", "Color", "Which color?")
    assert q.options == ["red", "blue"]
    assert q.option_descriptions == ["", "the sky"]
    assert req.raw["type"] == "input.requested"


def test_question_declined_by_the_caller(question_runtime):
    d = question_runtime.driver()
    result = d.submit_turn("ask me", timeout=WAIT, on_question=lambda req, resp: resp.decline())
    assert result.declined_questions == 1 and result.answered_questions == 0
    assert "declined" in result.text


def test_question_never_answered_is_declined_at_its_deadline(question_runtime):
    d = question_runtime.driver()
    kept = []
    result = d.submit_turn("ask me", timeout=WAIT, on_question=lambda req, resp: kept.append(resp),
                           answer_timeout=0.3)
    assert result.declined_questions == 1
    assert kept and kept[0].input_id == "q-1"
    assert kept[0].answer({"color": ["red"]}) is False  # too late


def test_without_on_question_questions_are_declined(question_runtime):
    result = question_runtime.driver().submit_turn("ask me", timeout=WAIT)
    assert result.declined_questions == 1
