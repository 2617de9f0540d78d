/* The C ABI's driver additions of 1.2: answering and declining a question by its input id (from a
 * process that holds no responder), the async interrupt, the turn's timings, the reconnect policy in
 * st_turn_options version 3, and st_event version 2 (questions, journal id, timestamp). C99, one case
 * per run: `test_capi_driver <case>`. */
#define _POSIX_C_SOURCE 200809L

#include "capi_test.h"

static const char *kQuestionScript = QUESTION_SCRIPT;

/* What one async turn saw: its events (v2 fields checked as they come) and its end. */
typedef struct turn_state {
  pthread_mutex_t mutex;
  latch asked;    /* the input.requested event came */
  latch started;  /* the first event came */
  latch done;     /* the turn ended */
  st_status status;
  st_turn_result *result;
  int event_version;
  int event_fields_ok;
  size_t question_count;
  char question_id[64];
  char first_option[64];
  int64_t timestamps_seen;
  st_status interrupt_status;
  char interrupt_message[256];
  latch interrupted;
} turn_state;

static void turn_state_init(turn_state *t) {
  memset(t, 0, sizeof *t);
  pthread_mutex_init(&t->mutex, NULL);
  latch_init(&t->asked);
  latch_init(&t->started);
  latch_init(&t->done);
  latch_init(&t->interrupted);
  t->event_fields_ok = 1;
  t->status = 1;
  t->interrupt_status = 1;
}

static void turn_state_destroy(turn_state *t) {
  st_turn_result_free(t->result);
  pthread_mutex_destroy(&t->mutex);
  latch_destroy(&t->asked);
  latch_destroy(&t->started);
  latch_destroy(&t->done);
  latch_destroy(&t->interrupted);
}

static void on_event(const st_event *e, void *payload) {
  turn_state *t = (turn_state *)payload;
  pthread_mutex_lock(&t->mutex);
  t->event_version = (int)e->version;
  if (e->version < 2 || !e->journal_id || !e->timestamp || (e->question_count > 0 && !e->questions)) {
    t->event_fields_ok = 0;
  } else {
    if (e->timestamp[0] != '\0') t->timestamps_seen++;
    if (strcmp(e->type, "input.requested") == 0 && e->question_count > 0) {
      t->question_count = e->question_count;
      snprintf(t->question_id, sizeof t->question_id, "%s", e->questions[0].id);
      if (e->questions[0].option_count > 0)
        snprintf(t->first_option, sizeof t->first_option, "%s", e->questions[0].options[0].label);
    }
    if (strcmp(e->type, "runtime.status") == 0 && e->runtime == NULL) t->event_fields_ok = 0;
    if (strcmp(e->type, "runtime.status") != 0 && e->runtime != NULL) t->event_fields_ok = 0;
  }
  pthread_mutex_unlock(&t->mutex);
  latch_add(&t->started);
  if (strcmp(e->type, "input.requested") == 0) latch_add(&t->asked);
}

/* Keeps the question open: the responder is dropped unused, so only an answer by input id (or the
 * answer deadline) resolves it. */
static void on_question_ignored(const st_question_request *request, st_responder *responder, void *payload) {
  (void)request;
  (void)payload;
  st_responder_free(responder);
}

static void on_done(st_status status, const char *message, st_turn_result *result, void *payload) {
  turn_state *t = (turn_state *)payload;
  (void)message;
  pthread_mutex_lock(&t->mutex);
  t->status = status;
  t->result = result;
  pthread_mutex_unlock(&t->mutex);
  latch_add(&t->done);
}

static void on_interrupted(st_status status, const char *message, void *payload) {
  turn_state *t = (turn_state *)payload;
  pthread_mutex_lock(&t->mutex);
  t->interrupt_status = status;
  snprintf(t->interrupt_message, sizeof t->interrupt_message, "%s", message);
  pthread_mutex_unlock(&t->mutex);
  latch_add(&t->interrupted);
}

static void submit_question_turn(fixture *fx, turn_state *t) {
  st_turn_options to = ST_TURN_OPTIONS_INIT;
  to.on_event = on_event;
  to.on_question = on_question_ignored;
  to.payload = t;
  to.timeout_ms = WAIT_SECONDS * 1000;
  to.answer_timeout_ms = WAIT_SECONDS * 1000;
  REQUIRE(st_driver_submit_turn_async(fx->driver, "ask me", &to, on_done, t) == ST_OK);
  REQUIRE(latch_wait(&t->asked, 1));
}

static void test_answer_by_input_id(void) {
  fixture fx;
  turn_state t;
  st_driver *other = NULL;
  const char *values[] = {"blue"};
  st_answer a;

  fixture_start(&fx, NULL, kQuestionScript);
  turn_state_init(&t);
  submit_question_turn(&fx, &t);
  CHECK(t.event_version == ST_EVENT_VERSION);
  CHECK(t.question_count == 1);
  CHECK(strcmp(t.question_id, "color") == 0);
  CHECK(strcmp(t.first_option, "red") == 0);

  /* Another driver (another process, in a bot) answers by the input id it saw. */
  REQUIRE(st_driver_new_unix(&other, fx.context, fx.socket_path) == ST_OK);
  a.question_id = "color";
  a.values = values;
  a.value_count = 1;
  CHECK(st_driver_answer(other, NULL, &a, 1, 0) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "input_id") != NULL);
  CHECK(st_driver_answer(other, "q-1", NULL, 1, 0) == ST_E_INVALID_ARGUMENT);
  CHECK(st_driver_answer(other, "no-such-question", &a, 1, 0) == ST_E_REJECTED);
  CHECK(st_driver_answer(other, "q-1", &a, 1, 0) == ST_OK);
  CHECK(st_driver_answer(other, "q-1", &a, 1, 0) == ST_E_REJECTED); /* resolved already */

  REQUIRE(latch_wait(&t.done, 1));
  CHECK(t.status == ST_OK);
  REQUIRE(t.result != NULL);
  CHECK(st_turn_result_status(t.result) == ST_TURN_COMPLETED);
  CHECK(strstr(st_turn_result_text(t.result), "Answers: color=blue") != NULL);
  CHECK(t.event_fields_ok);
  CHECK(t.timestamps_seen > 0);
  st_driver_free(other);
  turn_state_destroy(&t);
  fixture_stop(&fx);
}

static void test_decline_by_input_id(void) {
  fixture fx;
  turn_state t;

  fixture_start(&fx, NULL, kQuestionScript);
  turn_state_init(&t);
  submit_question_turn(&fx, &t);
  CHECK(st_driver_decline(fx.driver, "", 0) == ST_E_INVALID_ARGUMENT);
  CHECK(st_driver_decline(fx.driver, "q-1", 0) == ST_OK);
  REQUIRE(latch_wait(&t.done, 1));
  CHECK(t.status == ST_OK);
  REQUIRE(t.result != NULL);
  CHECK(st_turn_result_status(t.result) == ST_TURN_COMPLETED);
  CHECK(strstr(st_turn_result_text(t.result), "The question was declined.") != NULL);
  turn_state_destroy(&t);
  fixture_stop(&fx);
}

static void test_interrupt_async(void) {
  fixture fx;
  turn_state t;
  st_turn_options to = ST_TURN_OPTIONS_INIT;

  fixture_start_paced(&fx, 2000);

  turn_state_init(&t);
  CHECK(st_driver_interrupt_async(fx.driver, 0, NULL, &t) == ST_E_INVALID_ARGUMENT);
  CHECK(st_driver_interrupt_async(NULL, 0, on_interrupted, &t) == ST_E_INVALID_ARGUMENT);
  to.on_event = on_event;
  to.payload = &t;
  to.timeout_ms = WAIT_SECONDS * 1000;
  REQUIRE(st_driver_submit_turn_async(fx.driver, "one two three four five six seven eight", &to, on_done, &t) == ST_OK);
  REQUIRE(latch_wait(&t.started, 1));
  CHECK(st_driver_interrupt_async(fx.driver, 0, on_interrupted, &t) == ST_OK);
  REQUIRE(latch_wait(&t.interrupted, 1));
  CHECK(t.interrupt_status == ST_OK);
  CHECK(strcmp(t.interrupt_message, "") == 0);
  REQUIRE(latch_wait(&t.done, 1));
  REQUIRE(t.result != NULL);
  CHECK(st_turn_result_status(t.result) == ST_TURN_INTERRUPTED);

  /* Nothing runs now: the runtime's refusal comes back through the callback. */
  CHECK(st_driver_interrupt_async(fx.driver, 0, on_interrupted, &t) == ST_OK);
  REQUIRE(latch_wait(&t.interrupted, 2));
  CHECK(t.interrupt_status == ST_E_REJECTED);
  CHECK(strstr(t.interrupt_message, "no active turn") != NULL);
  turn_state_destroy(&t);
  fixture_stop(&fx);
}

static void test_timings_and_options_v3(void) {
  fixture fx;
  st_turn_options to = ST_TURN_OPTIONS_INIT;
  st_turn_result *res = NULL;
  int64_t accepted, started, completed;

  fixture_start(&fx, NULL, NULL);
  CHECK(to.version == 3 && to.reconnect_max_attempts == 5 && to.handshake_timeout_ms == 30000);
  to.reconnect_max_attempts = 2;
  to.reconnect_initial_backoff_ms = 10;
  to.reconnect_max_backoff_ms = 50;
  to.handshake_timeout_ms = 5000;
  to.abandon_grace_ms = 1000;
  REQUIRE(st_driver_submit_turn(&res, fx.driver, "timed", &to) == ST_OK);
  accepted = st_turn_result_time_to_accepted_ms(res);
  started = st_turn_result_time_to_started_ms(res);
  completed = st_turn_result_time_to_completed_ms(res);
  CHECK(accepted >= 0);
  CHECK(started >= accepted);
  CHECK(completed >= started);
  CHECK(completed < WAIT_SECONDS * 1000);
  st_turn_result_free(res);
  CHECK(st_turn_result_time_to_completed_ms(NULL) == INT64_MIN);
  CHECK(strstr(st_last_error(), "result is NULL") != NULL);

  /* An older struct is read up to its version: version 2 ends before the reconnect fields. */
  to.version = 2;
  to.reconnect_max_attempts = -7; /* past a version-2 struct: never read */
  REQUIRE(st_driver_submit_turn(&res, fx.driver, "older struct", &to) == ST_OK);
  CHECK(st_turn_result_status(res) == ST_TURN_COMPLETED);
  st_turn_result_free(res);
  to.version = 4;
  CHECK(st_driver_submit_turn(&res, fx.driver, "newer struct", &to) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "st_turn_options.version is 4") != NULL);
  fixture_stop(&fx);
}

static const test_case kCases[] = {
    {"answer_by_input_id", test_answer_by_input_id},
    {"decline_by_input_id", test_decline_by_input_id},
    {"interrupt_async", test_interrupt_async},
    {"timings_and_options_v3", test_timings_and_options_v3},
};

int main(int argc, char **argv) { return run_cases(kCases, sizeof kCases / sizeof kCases[0], argc, argv, NULL); }
