/* Tests of the C ABI, compiled as C99, against an in-process local runtime started through the ABI
 * itself. One program, one ctest per case: `test_capi <case>`. Waits are on conditions with
 * generous deadlines (a loaded 2-core machine), never on sleeps. */
#define _POSIX_C_SOURCE 200809L

#include "capi_test.h"

#include <unistd.h>

/* ---- Event collection ---------------------------------------------------------------------------------- */

typedef struct collector {
  pthread_mutex_t mutex;
  char deltas[4096];
  char types[8192];
  int events;
  int deltas_seen;
  int completed_seen;
  int raw_ok;
  latch first_event;
  latch completed;
  st_driver *driver; /* for the would_block and nested_blocking cases */
  st_status nested_status;
  char nested_text[256];
} collector;

static void collector_init(collector *c) {
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->mutex, NULL);
  latch_init(&c->first_event);
  latch_init(&c->completed);
  c->raw_ok = 1;
  c->nested_status = 1;
}
static void collector_destroy(collector *c) {
  pthread_mutex_destroy(&c->mutex);
  latch_destroy(&c->first_event);
  latch_destroy(&c->completed);
}

static void on_event(const st_event *e, void *payload) {
  collector *c = (collector *)payload;
  pthread_mutex_lock(&c->mutex);
  c->events++;
  if (e->version < 1 || !e->type || !e->turn_id || !e->text || !e->tool_name || !e->raw_json ||
      e->raw_json[0] != '{' || !strstr(e->raw_json, e->type)) {
    c->raw_ok = 0;
  }
  if (strlen(c->types) + strlen(e->type) + 2 < sizeof c->types) {
    strcat(c->types, e->type);
    strcat(c->types, ",");
  }
  if (strcmp(e->type, "assistant.delta") == 0) {
    c->deltas_seen++;
    if (strlen(c->deltas) + strlen(e->text) + 1 < sizeof c->deltas) strcat(c->deltas, e->text);
  }
  if (strcmp(e->type, "turn.completed") == 0) c->completed_seen++;
  pthread_mutex_unlock(&c->mutex);
  latch_add(&c->first_event);
  if (strcmp(e->type, "turn.completed") == 0) latch_add(&c->completed);
}

/* ---- Cases ---------------------------------------------------------------------------------------------- */

static void test_version(void) {
  int major = -1, minor = -1, patch = -1;
  const char *v = st_version(&major, &minor, &patch);
  char expected[32];
  CHECK(major == ST_VERSION_MAJOR && minor == ST_VERSION_MINOR && patch == ST_VERSION_PATCH);
  snprintf(expected, sizeof expected, "%d.%d.%d", ST_VERSION_MAJOR, ST_VERSION_MINOR, ST_VERSION_PATCH);
  CHECK(v != NULL && strcmp(v, expected) == 0);
  CHECK(st_version(NULL, NULL, NULL) == v);
  CHECK(strcmp(st_status_name(ST_OK), "ok") == 0);
  CHECK(strcmp(st_status_name(ST_E_INVALID_ARGUMENT), "invalid_argument") == 0);
  CHECK(strcmp(st_status_name(ST_E_REJECTED), "rejected") == 0);
  CHECK(strcmp(st_status_name(ST_E_WOULD_BLOCK), "would_block") == 0);
  CHECK(strcmp(st_status_name(ST_E_INTERNAL), "internal") == 0);
  CHECK(strcmp(st_status_name(-1000), "unknown") == 0);
  CHECK(strcmp(st_status_name(5), "unknown") == 0);
  CHECK(strcmp(st_turn_status_name(ST_TURN_COMPLETED), "completed") == 0);
  CHECK(strcmp(st_turn_status_name(ST_TURN_FAILED), "failed") == 0);
  CHECK(strcmp(st_turn_status_name(ST_TURN_INTERRUPTED), "interrupted") == 0);
  CHECK(strcmp(st_turn_status_name(ST_TURN_REMOVED), "removed") == 0);
  CHECK(strcmp(st_turn_status_name(42), "unknown") == 0);
  CHECK(strcmp(st_turn_status_name(-1), "unknown") == 0);
  st_string_free(NULL);
}

static int g_log_lines = 0;
static void on_log(int level, const char *message, void *payload) {
  (void)level;
  (void)message;
  CHECK(payload == &g_log_lines);
  g_log_lines++;
}

/* Every function with NULL handles / out pointers: an error status and a message, never a crash. */
static void test_null_handles(void) {
  st_context *ctx = NULL;
  st_driver *drv = NULL;
  st_turn_result *res = NULL;
  st_watch *w = NULL;
  st_local_runtime *rt = NULL;
  st_cancel *cancel = NULL;
  char *s = NULL;
  const char *argv[] = {"/bin/true"};
  st_context_options co = ST_CONTEXT_OPTIONS_INIT;
  st_local_runtime_options ro = ST_LOCAL_RUNTIME_OPTIONS_INIT;
  st_turn_options to = ST_TURN_OPTIONS_INIT;
  st_answer answer;

  CHECK(st_context_new(NULL, NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "out") != NULL);
  CHECK(st_last_error_http_status() == 0);
  co.threads = 0;
  CHECK(st_context_new(&ctx, &co) == ST_E_INVALID_ARGUMENT && ctx == NULL);
  CHECK(strstr(st_last_error(), "threads") != NULL);
  co.threads = 1;
  co.version = 99;
  CHECK(st_context_new(&ctx, &co) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "version") != NULL);
  co.version = ST_CONTEXT_OPTIONS_VERSION;
  co.min_log_level = 7;
  CHECK(st_context_new(&ctx, &co) == ST_E_INVALID_ARGUMENT);
  co.min_log_level = ST_LOG_DEBUG;
  co.log = on_log;
  co.log_payload = &g_log_lines;
  REQUIRE(st_context_new(&ctx, &co) == ST_OK && ctx != NULL);

  CHECK(st_driver_new_unix(NULL, ctx, "/tmp/x") == ST_E_INVALID_ARGUMENT);
  CHECK(st_driver_new_unix(&drv, NULL, "/tmp/x") == ST_E_INVALID_ARGUMENT && drv == NULL);
  CHECK(strstr(st_last_error(), "context") != NULL);
  CHECK(st_driver_new_unix(&drv, ctx, NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(st_driver_new_unix(&drv, ctx, "") == ST_E_INVALID_ARGUMENT);
  CHECK(st_driver_new_exec(&drv, ctx, NULL, 0) == ST_E_INVALID_ARGUMENT);
  CHECK(st_driver_new_exec(&drv, ctx, argv, 0) == ST_E_INVALID_ARGUMENT);
  CHECK(st_driver_new_exec(&drv, NULL, argv, 1) == ST_E_INVALID_ARGUMENT);

  CHECK(st_driver_submit_turn(&res, NULL, "hi", NULL) == ST_E_INVALID_ARGUMENT && res == NULL);
  CHECK(strstr(st_last_error(), "driver") != NULL);
  CHECK(st_driver_submit_turn(NULL, NULL, "hi", NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(st_driver_submit_turn_async(NULL, "hi", NULL, NULL, NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(st_driver_interrupt(NULL, 0) == ST_E_INVALID_ARGUMENT);
  CHECK(st_driver_watch(&w, NULL, NULL, NULL, NULL, NULL) == ST_E_INVALID_ARGUMENT && w == NULL);
  CHECK(st_driver_watch(NULL, NULL, NULL, NULL, NULL, NULL) == ST_E_INVALID_ARGUMENT);

  /* A driver that is never used needs no runtime: check the argument errors that need a handle. */
  REQUIRE(st_driver_new_unix(&drv, ctx, "/nonexistent/dir/runtime.sock") == ST_OK);
  CHECK(st_driver_submit_turn(&res, drv, NULL, NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "prompt") != NULL);
  CHECK(st_driver_submit_turn_async(drv, "hi", NULL, NULL, NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "done") != NULL);
  CHECK(st_driver_watch(&w, drv, NULL, NULL, NULL, NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "on_event") != NULL);
  to.version = 0;
  CHECK(st_driver_submit_turn(&res, drv, "hi", &to) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "st_turn_options.version") != NULL);
  st_driver_free(drv);

  CHECK(st_turn_result_turn_id(NULL) == NULL);
  CHECK(strstr(st_last_error(), "result") != NULL);
  CHECK(st_turn_result_text(NULL) == NULL);
  CHECK(st_turn_result_error_message(NULL) == NULL);
  CHECK(st_turn_result_status(NULL) == ST_TURN_FAILED);
  CHECK(st_turn_result_questions_declined(NULL) < 0);
  CHECK(st_turn_result_questions_answered(NULL) < 0);
  CHECK(st_turn_result_shared(NULL) < 0);
  CHECK(st_turn_result_reconnects(NULL) < 0);
  CHECK(st_turn_result_request_id(NULL) == NULL);
  CHECK(strstr(st_last_error(), "result") != NULL);
  CHECK(st_turn_result_last_event_id(NULL) < 0);
  CHECK(st_turn_result_journal_id(NULL) == NULL);
  CHECK(st_driver_attach_turn(&res, NULL, "req", NULL, 0, NULL, 0, NULL) == ST_E_INVALID_ARGUMENT && res == NULL);
  CHECK(strstr(st_last_error(), "driver") != NULL);
  CHECK(st_driver_attach_turn(NULL, NULL, "req", NULL, 0, NULL, 0, NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(st_driver_attach_turn_async(NULL, "req", NULL, 0, NULL, 0, NULL, NULL, NULL) == ST_E_INVALID_ARGUMENT);

  CHECK(st_watch_stop(NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(st_watch_active(NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(st_watch_last_event_id(NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(st_watch_journal_id(&s, NULL) == ST_E_INVALID_ARGUMENT && s == NULL);
  CHECK(st_watch_journal_id(NULL, NULL) == ST_E_INVALID_ARGUMENT);

  CHECK(st_responder_answer(NULL, NULL, 0) == ST_E_INVALID_ARGUMENT);
  CHECK(st_responder_decline(NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(st_responder_input_id(NULL) == NULL);
  answer.question_id = NULL;
  answer.values = NULL;
  answer.value_count = 0;
  CHECK(st_responder_answer(NULL, &answer, 1) == ST_E_INVALID_ARGUMENT);

  CHECK(st_cancel_new(NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(st_cancel_cancel(NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(st_cancel_is_cancelled(NULL) == ST_E_INVALID_ARGUMENT);
  REQUIRE(st_cancel_new(&cancel) == ST_OK);
  CHECK(st_cancel_is_cancelled(cancel) == 0);
  CHECK(st_cancel_cancel(cancel) == ST_OK);
  CHECK(st_cancel_cancel(cancel) == ST_OK);
  CHECK(st_cancel_is_cancelled(cancel) == 1);
  st_cancel_free(cancel);

  CHECK(st_local_runtime_start(NULL, &ro) == ST_E_INVALID_ARGUMENT);
  CHECK(st_local_runtime_start(&rt, NULL) == ST_E_INVALID_ARGUMENT && rt == NULL);
  CHECK(st_local_runtime_start(&rt, &ro) == ST_E_INVALID_ARGUMENT); /* no socket path */
  CHECK(strstr(st_last_error(), "socket_path") != NULL);
  CHECK(st_local_runtime_socket_path(NULL) == NULL);
  CHECK(st_local_runtime_stop(NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(st_local_runtime_journal_id(&s, NULL) == ST_E_INVALID_ARGUMENT && s == NULL);
  CHECK(st_local_runtime_journal_id(NULL, NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(st_local_runtime_last_event_id(NULL) < 0);

  /* Every free function accepts NULL. */
  st_turn_result_free(NULL);
  st_responder_free(NULL);
  st_watch_free(NULL);
  st_driver_free(NULL);
  st_local_runtime_free(NULL);
  st_cancel_free(NULL);
  st_context_free(ctx);
  st_context_free(NULL);
}

/* Bad paths: an absent socket, a bad provider spec, an unusable socket directory. */
static void test_bad_paths(void) {
  st_context *ctx = NULL;
  st_driver *drv = NULL;
  st_turn_result *res = NULL;
  st_local_runtime *rt = NULL;
  st_local_runtime_options ro = ST_LOCAL_RUNTIME_OPTIONS_INIT;
  st_turn_options to = ST_TURN_OPTIONS_INIT;
  const char *argv[] = {"/nonexistent/program/sessionturn-runtime"};
  st_status s;

  REQUIRE(st_context_new(&ctx, NULL) == ST_OK);
  REQUIRE(st_driver_new_unix(&drv, ctx, "/nonexistent/dir/runtime.sock") == ST_OK);
  to.reconnect = 0;
  to.timeout_ms = WAIT_SECONDS * 1000;
  s = st_driver_submit_turn(&res, drv, "hello", &to);
  CHECK(s == ST_E_CONNECTION_FAILED);
  CHECK(res == NULL);
  CHECK(strstr(st_last_error(), "/nonexistent/dir/runtime.sock") != NULL);
  st_driver_free(drv);

  REQUIRE(st_driver_new_exec(&drv, ctx, argv, 1) == ST_OK);
  s = st_driver_submit_turn(&res, drv, "hello", &to);
  CHECK(s == ST_E_CONNECTION_FAILED || s == ST_E_CONNECTION_LOST);
  CHECK(res == NULL);
  st_driver_free(drv);

  ro.socket_path = "/tmp/st_capi_unused.sock";
  ro.provider = "no-such-provider";
  CHECK(st_local_runtime_start(&rt, &ro) == ST_E_INVALID_ARGUMENT && rt == NULL);
  CHECK(strstr(st_last_error(), "no-such-provider") != NULL);
  ro.provider = NULL;
  ro.socket_path = "/proc/self/no/such/dir/runtime.sock";
  s = st_local_runtime_start(&rt, &ro);
  CHECK(s == ST_E_IO_ERROR);
  CHECK(rt == NULL);
  st_context_free(ctx);
}

/* A blocking echo turn: streamed deltas, the reply, the result accessors. */
static void test_echo_turn(void) {
  fixture fx;
  collector c;
  st_turn_options to = ST_TURN_OPTIONS_INIT;
  st_turn_result *res = NULL;

  fixture_start(&fx, NULL, NULL);
  collector_init(&c);
  to.on_event = on_event;
  to.payload = &c;
  to.timeout_ms = WAIT_SECONDS * 1000;
  REQUIRE(st_driver_submit_turn(&res, fx.driver, "hello from C", &to) == ST_OK);
  REQUIRE(res != NULL);
  CHECK(st_turn_result_status(res) == ST_TURN_COMPLETED);
  CHECK(strlen(st_turn_result_turn_id(res)) > 0);
  CHECK(strstr(st_turn_result_text(res), "hello from C") != NULL);
  CHECK(strcmp(st_turn_result_error_message(res), "") == 0);
  CHECK(st_turn_result_questions_declined(res) == 0);
  CHECK(st_turn_result_questions_answered(res) == 0);
  CHECK(st_turn_result_shared(res) == 0);
  CHECK(st_turn_result_reconnects(res) == 0);
  /* Not pinned: a fresh random requestId (a UUID), and the journal cursor when the turn ended. */
  CHECK(st_turn_result_request_id(res) != NULL && strlen(st_turn_result_request_id(res)) == 36);
  CHECK(st_turn_result_last_event_id(res) > 0);
  CHECK(st_turn_result_last_event_id(res) <= st_local_runtime_last_event_id(fx.runtime));
  {
    char *journal = NULL;
    REQUIRE(st_local_runtime_journal_id(&journal, fx.runtime) == ST_OK);
    CHECK(journal != NULL && strlen(journal) > 0);
    CHECK(strcmp(st_turn_result_journal_id(res), journal) == 0);
    st_string_free(journal);
  }
  CHECK(c.deltas_seen > 0);
  CHECK(strstr(c.deltas, "hello from C") != NULL);
  CHECK(c.completed_seen == 1);
  CHECK(c.raw_ok);
  CHECK(strstr(c.types, "turn.started") != NULL);
  st_turn_result_free(res);

  /* NULL options: the defaults. */
  REQUIRE(st_driver_submit_turn(&res, fx.driver, "second", NULL) == ST_OK);
  CHECK(st_turn_result_status(res) == ST_TURN_COMPLETED);
  CHECK(strstr(st_turn_result_text(res), "second") != NULL);
  st_turn_result_free(res);
  collector_destroy(&c);
  fixture_stop(&fx);
}

/* Prompts refused before any I/O (commands, empty) and by the runtime (/goal with commands allowed). */
static void test_rejected(void) {
  fixture fx;
  st_turn_options to = ST_TURN_OPTIONS_INIT;
  st_turn_result *res = NULL;
  st_status s;

  fixture_start(&fx, NULL, NULL);
  to.timeout_ms = WAIT_SECONDS * 1000;
  s = st_driver_submit_turn(&res, fx.driver, "!ls", &to);
  CHECK(s == ST_E_INVALID_ARGUMENT);
  CHECK(res == NULL);
  CHECK(strlen(st_last_error()) > 0);
  CHECK(st_driver_submit_turn(&res, fx.driver, "  /goal ship it", &to) == ST_E_INVALID_ARGUMENT);
  CHECK(st_driver_submit_turn(&res, fx.driver, "", &to) == ST_E_INVALID_ARGUMENT);

  to.allow_commands = 1;
  s = st_driver_submit_turn(&res, fx.driver, "/goal ship it", &to);
  CHECK(s == ST_E_REJECTED);
  CHECK(res == NULL);
  CHECK(strstr(st_last_error(), "/goal is available only in Codex Sessions") != NULL);

  /* Interrupt with no turn running: the runtime's reason. */
  s = st_driver_interrupt(fx.driver, WAIT_SECONDS * 1000);
  CHECK(s == ST_E_REJECTED);
  CHECK(strstr(st_last_error(), "no active turn") != NULL);
  fixture_stop(&fx);
}

typedef struct async_done {
  latch done;
  st_status status;
  char message[512];
  st_turn_result *result;
} async_done;

static void on_done(st_status status, const char *message, st_turn_result *result, void *payload) {
  async_done *d = (async_done *)payload;
  d->status = status;
  snprintf(d->message, sizeof d->message, "%s", message ? message : "(null)");
  d->result = result;
  latch_add(&d->done);
}

static void test_async_turn(void) {
  fixture fx;
  collector c;
  async_done d;
  st_turn_options to = ST_TURN_OPTIONS_INIT;

  fixture_start(&fx, NULL, NULL);
  collector_init(&c);
  memset(&d, 0, sizeof d);
  latch_init(&d.done);
  to.on_event = on_event;
  to.payload = &c;
  to.timeout_ms = WAIT_SECONDS * 1000;
  REQUIRE(st_driver_submit_turn_async(fx.driver, "async hello", &to, on_done, &d) == ST_OK);
  REQUIRE(latch_wait(&d.done, 1));
  CHECK(d.status == ST_OK);
  CHECK(strcmp(d.message, "") == 0);
  REQUIRE(d.result != NULL);
  CHECK(st_turn_result_status(d.result) == ST_TURN_COMPLETED);
  CHECK(strstr(st_turn_result_text(d.result), "async hello") != NULL);
  st_turn_result_free(d.result);

  /* An argument error is reported through the callback too (no I/O). */
  d.result = NULL;
  REQUIRE(st_driver_submit_turn_async(fx.driver, "!rm -rf /", &to, on_done, &d) == ST_OK);
  REQUIRE(latch_wait(&d.done, 2));
  CHECK(d.status == ST_E_INVALID_ARGUMENT);
  CHECK(strlen(d.message) > 0);
  CHECK(d.result == NULL);

  latch_destroy(&d.done);
  collector_destroy(&c);
  fixture_stop(&fx);
}

/* A long turn (slow echo) cancelled from another thread, and one interrupted through the driver. */
typedef struct canceller {
  collector *c;
  st_cancel *cancel;
  st_driver *driver;
  st_status interrupt_status;
} canceller;

static void *cancel_thread(void *arg) {
  canceller *k = (canceller *)arg;
  if (latch_wait(&k->c->first_event, 1)) {
    if (k->cancel) st_cancel_cancel(k->cancel);
    if (k->driver) {
      /* The turn must have started for interrupt to find it: wait for turn.started. */
      struct timespec ts = {0, 10 * 1000 * 1000};
      int i;
      for (i = 0; i < WAIT_SECONDS * 100; i++) {
        int started;
        pthread_mutex_lock(&k->c->mutex);
        started = strstr(k->c->types, "turn.started") != NULL;
        pthread_mutex_unlock(&k->c->mutex);
        if (started) break;
        nanosleep(&ts, NULL);
      }
      k->interrupt_status = st_driver_interrupt(k->driver, WAIT_SECONDS * 1000);
    }
  }
  return NULL;
}

static void long_turn_fixture(fixture *fx) { fixture_start_paced(fx, 2000); }

static const char *kLongPrompt =
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three twenty-four twenty-five";

static void test_cancel(void) {
  fixture fx;
  collector c;
  canceller k;
  pthread_t t;
  st_turn_options to = ST_TURN_OPTIONS_INIT;
  st_turn_result *res = NULL;
  st_status s;

  long_turn_fixture(&fx);
  collector_init(&c);
  memset(&k, 0, sizeof k);
  k.c = &c;
  REQUIRE(st_cancel_new(&k.cancel) == ST_OK);
  to.on_event = on_event;
  to.payload = &c;
  to.cancel = k.cancel;
  to.timeout_ms = WAIT_SECONDS * 1000;
  REQUIRE(pthread_create(&t, NULL, cancel_thread, &k) == 0);
  s = st_driver_submit_turn(&res, fx.driver, kLongPrompt, &to);
  pthread_join(t, NULL);
  CHECK(s == ST_E_CANCELLED);
  CHECK(res == NULL);
  CHECK(c.completed_seen == 0);
  st_cancel_free(k.cancel);

  /* A deadline: the same long turn with a short timeout. */
  to.cancel = NULL;
  to.timeout_ms = 500;
  s = st_driver_submit_turn(&res, fx.driver, kLongPrompt, &to);
  CHECK(s == ST_E_TIMEOUT);
  CHECK(res == NULL);
  collector_destroy(&c);
  fixture_stop(&fx);
}

static void test_interrupt(void) {
  fixture fx;
  collector c;
  canceller k;
  pthread_t t;
  st_turn_options to = ST_TURN_OPTIONS_INIT;
  st_turn_result *res = NULL;

  long_turn_fixture(&fx);
  collector_init(&c);
  memset(&k, 0, sizeof k);
  k.c = &c;
  k.driver = fx.driver;
  k.interrupt_status = 1;
  to.on_event = on_event;
  to.payload = &c;
  to.timeout_ms = WAIT_SECONDS * 1000;
  REQUIRE(pthread_create(&t, NULL, cancel_thread, &k) == 0);
  REQUIRE(st_driver_submit_turn(&res, fx.driver, kLongPrompt, &to) == ST_OK);
  pthread_join(t, NULL);
  CHECK(k.interrupt_status == ST_OK);
  CHECK(st_turn_result_status(res) == ST_TURN_INTERRUPTED);
  st_turn_result_free(res);
  collector_destroy(&c);
  fixture_stop(&fx);
}

/* A blocking call from a callback on a Context worker (an async turn's) is refused, not deadlocked. */
static void on_event_nested(const st_event *e, void *payload) {
  collector *c = (collector *)payload;
  st_turn_result *res = NULL;
  if (c->nested_status == 1 && strcmp(e->type, "turn.started") == 0) {
    c->nested_status = st_driver_submit_turn(&res, c->driver, "nested", NULL);
    if (res != NULL) {
      pthread_mutex_lock(&c->mutex);
      snprintf(c->nested_text, sizeof c->nested_text, "%s", st_turn_result_text(res));
      pthread_mutex_unlock(&c->mutex);
      st_turn_result_free(res);
    }
  }
}

static void test_would_block(void) {
  fixture fx;
  collector c;
  async_done d;
  st_turn_options to = ST_TURN_OPTIONS_INIT;

  fixture_start(&fx, NULL, NULL);
  collector_init(&c);
  memset(&d, 0, sizeof d);
  latch_init(&d.done);
  c.driver = fx.driver;
  to.on_event = on_event_nested;
  to.payload = &c;
  to.timeout_ms = WAIT_SECONDS * 1000;
  REQUIRE(st_driver_submit_turn_async(fx.driver, "outer", &to, on_done, &d) == ST_OK);
  REQUIRE(latch_wait(&d.done, 1));
  CHECK(d.status == ST_OK);
  CHECK(c.nested_status == ST_E_WOULD_BLOCK);
  st_turn_result_free(d.result);
  latch_destroy(&d.done);
  collector_destroy(&c);
  fixture_stop(&fx);
}

/* A blocking turn over a unix socket runs on the calling thread (its own loop): a blocking call from
 * its callback is not on a worker, so it runs, nested, and the outer turn carries on after it. */
static void test_nested_blocking(void) {
  fixture fx;
  collector c;
  st_turn_options to = ST_TURN_OPTIONS_INIT;
  st_turn_result *res = NULL;

  fixture_start(&fx, NULL, NULL);
  collector_init(&c);
  c.driver = fx.driver;
  to.on_event = on_event_nested;
  to.payload = &c;
  to.timeout_ms = WAIT_SECONDS * 1000;
  REQUIRE(st_driver_submit_turn(&res, fx.driver, "outer", &to) == ST_OK);
  CHECK(st_turn_result_status(res) == ST_TURN_COMPLETED);
  CHECK(strstr(st_turn_result_text(res), "outer") != NULL);
  CHECK(c.nested_status == ST_OK);
  CHECK(strstr(c.nested_text, "nested") != NULL);
  st_turn_result_free(res);
  collector_destroy(&c);
  fixture_stop(&fx);
}

/* Watch: a turn's events seen through a watch, its cursor, stop and end callback. */
static void on_watch_end(st_status status, const char *message, void *payload) {
  collector *c = (collector *)payload;
  (void)message;
  c->nested_status = status;
  latch_add(&c->completed);
  latch_add(&c->completed); /* distinguishable from the turn.completed count below */
}

static void test_watch(void) {
  fixture fx;
  collector c;
  st_watch *w = NULL;
  st_watch_options wo = ST_WATCH_OPTIONS_INIT;
  st_turn_result *res = NULL;
  char *journal = NULL;

  fixture_start(&fx, NULL, NULL);
  collector_init(&c);
  wo.version = 0;
  CHECK(st_driver_watch(&w, fx.driver, &wo, on_event, NULL, &c) == ST_E_INVALID_ARGUMENT);
  wo.version = ST_WATCH_OPTIONS_VERSION;
  REQUIRE(st_driver_watch(&w, fx.driver, &wo, on_event, on_watch_end, &c) == ST_OK);
  REQUIRE(w != NULL);
  CHECK(st_watch_active(w) == 1);
  REQUIRE(st_driver_submit_turn(&res, fx.driver, "watched turn", NULL) == ST_OK);
  st_turn_result_free(res);
  REQUIRE(latch_wait(&c.completed, 1)); /* the watch saw turn.completed */
  pthread_mutex_lock(&c.mutex);
  CHECK(strstr(c.deltas, "watched turn") != NULL);
  CHECK(strstr(c.types, "user.message") != NULL);
  CHECK(c.raw_ok);
  pthread_mutex_unlock(&c.mutex);
  CHECK(st_watch_last_event_id(w) > 0);
  REQUIRE(st_watch_journal_id(&journal, w) == ST_OK);
  CHECK(journal != NULL && strlen(journal) > 0);
  st_string_free(journal);
  CHECK(st_watch_stop(w) == ST_OK);
  CHECK(st_watch_stop(w) == ST_OK);
  CHECK(st_watch_active(w) == 0);
  CHECK(latch_wait(&c.completed, 3)); /* the end callback ran */
  CHECK(c.nested_status == ST_OK);
  st_watch_free(w);
  collector_destroy(&c);
  fixture_stop(&fx);
}

/* The exec driver: a child process bridging stdio to the runtime socket (python, standard library). */
static void test_exec_driver(void) {
  fixture fx;
  st_driver *exec_driver = NULL;
  st_turn_result *res = NULL;
  const char *bridge =
      "import socket,sys,threading\n"
      "s=socket.socket(socket.AF_UNIX);s.connect(sys.argv[1])\n"
      "def up():\n"
      "  while True:\n"
      "    b=sys.stdin.buffer.read1(65536)\n"
      "    if not b: break\n"
      "    s.sendall(b)\n"
      "threading.Thread(target=up,daemon=True).start()\n"
      "while True:\n"
      "  b=s.recv(65536)\n"
      "  if not b: break\n"
      "  sys.stdout.buffer.write(b);sys.stdout.buffer.flush()\n";
  const char *argv[4];

  fixture_start(&fx, NULL, NULL);
  argv[0] = "/usr/bin/python3";
  argv[1] = "-c";
  argv[2] = bridge;
  argv[3] = fx.socket_path;
  REQUIRE(st_driver_new_exec(&exec_driver, fx.context, argv, 4) == ST_OK);
  REQUIRE(st_driver_submit_turn(&res, exec_driver, "through a child", NULL) == ST_OK);
  CHECK(st_turn_result_status(res) == ST_TURN_COMPLETED);
  CHECK(strstr(st_turn_result_text(res), "through a child") != NULL);
  st_turn_result_free(res);
  st_driver_free(exec_driver);
  fixture_stop(&fx);
}

/* ---- The turn's place in the journal: on_accepted, the result's cursor, attaching ------------------------ */

typedef struct accepted_state {
  pthread_mutex_t mutex;
  int calls;
  unsigned int version;
  char request_id[128];
  char turn_id[64];
  char journal_id[128];
  int64_t last_event_id;
  int64_t revision;
} accepted_state;

static void on_accepted(const st_turn_ref *ref, void *payload) {
  accepted_state *a = (accepted_state *)payload;
  pthread_mutex_lock(&a->mutex);
  a->calls++;
  a->version = ref->version;
  snprintf(a->request_id, sizeof a->request_id, "%s", ref->request_id);
  snprintf(a->turn_id, sizeof a->turn_id, "%s", ref->turn_id);
  snprintf(a->journal_id, sizeof a->journal_id, "%s", ref->journal_id);
  a->last_event_id = ref->last_event_id;
  a->revision = ref->revision;
  pthread_mutex_unlock(&a->mutex);
}

/* One payload for the turn's callbacks: on_event and on_accepted share st_turn_options.payload. */
typedef struct turn_payload {
  collector c;
  accepted_state a;
} turn_payload;

static void on_event_tp(const st_event *e, void *payload) { on_event(e, &((turn_payload *)payload)->c); }
static void on_accepted_tp(const st_turn_ref *ref, void *payload) { on_accepted(ref, &((turn_payload *)payload)->a); }

static void turn_payload_init(turn_payload *p) {
  collector_init(&p->c);
  memset(&p->a, 0, sizeof p->a);
  pthread_mutex_init(&p->a.mutex, NULL);
}
static void turn_payload_destroy(turn_payload *p) {
  collector_destroy(&p->c);
  pthread_mutex_destroy(&p->a.mutex);
}

/* A pinned request id comes back in the result; on_accepted gets the turn's ref once. */
static void test_turn_ref(void) {
  fixture fx;
  turn_payload p;
  st_turn_options to = ST_TURN_OPTIONS_INIT;
  st_turn_result *res = NULL;
  char *journal = NULL;

  fixture_start(&fx, NULL, NULL);
  turn_payload_init(&p);
  to.timeout_ms = WAIT_SECONDS * 1000;
  to.request_id = "req-c-pinned-1";
  to.on_event = on_event_tp;
  to.on_accepted = on_accepted_tp;
  to.payload = &p;
  REQUIRE(st_driver_submit_turn(&res, fx.driver, "where am I", &to) == ST_OK);
  REQUIRE(st_local_runtime_journal_id(&journal, fx.runtime) == ST_OK);
  CHECK(st_turn_result_status(res) == ST_TURN_COMPLETED);
  CHECK(strcmp(st_turn_result_request_id(res), "req-c-pinned-1") == 0);
  CHECK(strcmp(st_turn_result_journal_id(res), journal) == 0);
  CHECK(st_turn_result_last_event_id(res) > 0);

  pthread_mutex_lock(&p.a.mutex);
  CHECK(p.a.calls == 1);
  CHECK(p.a.version == ST_TURN_REF_VERSION);
  CHECK(strcmp(p.a.request_id, "req-c-pinned-1") == 0);
  CHECK(strcmp(p.a.turn_id, st_turn_result_turn_id(res)) == 0);
  CHECK(strcmp(p.a.journal_id, journal) == 0);
  /* Accepted at the echo: a cursor inside the turn, before the one it ended at. */
  CHECK(p.a.last_event_id > 0 && p.a.last_event_id < st_turn_result_last_event_id(res));
  CHECK(p.a.revision >= 1);
  pthread_mutex_unlock(&p.a.mutex);
  st_turn_result_free(res);

  /* A version-1 options struct ends before on_accepted: the library must not read it. */
  to.version = 1;
  to.request_id = NULL;
  REQUIRE(st_driver_submit_turn(&res, fx.driver, "old struct", &to) == ST_OK);
  CHECK(st_turn_result_status(res) == ST_TURN_COMPLETED);
  CHECK(strlen(st_turn_result_request_id(res)) == 36);
  pthread_mutex_lock(&p.a.mutex);
  CHECK(p.a.calls == 1);
  pthread_mutex_unlock(&p.a.mutex);
  st_turn_result_free(res);

  st_string_free(journal);
  turn_payload_destroy(&p);
  fixture_stop(&fx);
}

/* Attaching to a turn submitted before: by request id from the start of the journal (the full
 * replay shows it), by turn id from the on_accepted cursor, async; an unknown request id is not found. */
static void test_attach_turn(void) {
  fixture fx;
  turn_payload p;
  collector replay;
  async_done d;
  st_turn_options to = ST_TURN_OPTIONS_INIT;
  st_turn_options ao = ST_TURN_OPTIONS_INIT;
  st_turn_result *submitted = NULL;
  st_turn_result *attached = NULL;
  char *journal = NULL;
  char turn_id[64];
  int64_t accepted_at;
  st_status s;

  fixture_start(&fx, NULL, NULL);
  turn_payload_init(&p);
  to.timeout_ms = WAIT_SECONDS * 1000;
  to.request_id = "req-c-attach-1";
  to.on_accepted = on_accepted_tp;
  to.payload = &p;
  REQUIRE(st_driver_submit_turn(&submitted, fx.driver, "attach to me", &to) == ST_OK);
  REQUIRE(st_turn_result_status(submitted) == ST_TURN_COMPLETED);
  REQUIRE(st_local_runtime_journal_id(&journal, fx.runtime) == ST_OK);
  snprintf(turn_id, sizeof turn_id, "%s", st_turn_result_turn_id(submitted));
  pthread_mutex_lock(&p.a.mutex);
  accepted_at = p.a.last_event_id;
  pthread_mutex_unlock(&p.a.mutex);
  REQUIRE(accepted_at > 0);

  /* By request id, from the start of the journal. */
  collector_init(&replay);
  ao.timeout_ms = WAIT_SECONDS * 1000;
  ao.on_event = on_event;
  ao.payload = &replay;
  REQUIRE(st_driver_attach_turn(&attached, fx.driver, "req-c-attach-1", NULL, 0, journal, 0, &ao) == ST_OK);
  REQUIRE(attached != NULL);
  CHECK(st_turn_result_status(attached) == ST_TURN_COMPLETED);
  CHECK(strcmp(st_turn_result_turn_id(attached), turn_id) == 0);
  CHECK(strcmp(st_turn_result_request_id(attached), "req-c-attach-1") == 0);
  CHECK(strcmp(st_turn_result_text(attached), st_turn_result_text(submitted)) == 0);
  CHECK(strstr(st_turn_result_text(attached), "attach to me") != NULL);
  CHECK(strcmp(st_turn_result_journal_id(attached), journal) == 0);
  CHECK(st_turn_result_last_event_id(attached) >= st_turn_result_last_event_id(submitted));
  CHECK(replay.completed_seen == 1);
  CHECK(strstr(replay.types, "turn.started") != NULL);
  CHECK(strstr(replay.deltas, "attach to me") != NULL);
  CHECK(replay.raw_ok);
  st_turn_result_free(attached);
  attached = NULL;

  /* By turn id, from the cursor on_accepted reported; on_accepted is not called for an attachment. */
  REQUIRE(st_driver_attach_turn(&attached, fx.driver, NULL, turn_id, accepted_at, journal, 0, &to) == ST_OK);
  CHECK(st_turn_result_status(attached) == ST_TURN_COMPLETED);
  CHECK(strcmp(st_turn_result_text(attached), st_turn_result_text(submitted)) == 0);
  pthread_mutex_lock(&p.a.mutex);
  CHECK(p.a.calls == 1);
  pthread_mutex_unlock(&p.a.mutex);
  st_turn_result_free(attached);
  attached = NULL;

  /* Async. */
  memset(&d, 0, sizeof d);
  latch_init(&d.done);
  REQUIRE(st_driver_attach_turn_async(fx.driver, "req-c-attach-1", "", 0, journal, 0, NULL, on_done, &d) == ST_OK);
  REQUIRE(latch_wait(&d.done, 1));
  CHECK(d.status == ST_OK);
  REQUIRE(d.result != NULL);
  CHECK(strcmp(st_turn_result_turn_id(d.result), turn_id) == 0);
  st_turn_result_free(d.result);
  d.result = NULL;

  /* Nothing to attach to: not found, blocking and async. */
  s = st_driver_attach_turn(&attached, fx.driver, "req-c-nobody", NULL, 0, journal, 0, &ao);
  CHECK(s == ST_E_NOT_FOUND);
  CHECK(attached == NULL);
  CHECK(strstr(st_last_error(), "req-c-nobody") != NULL);
  REQUIRE(st_driver_attach_turn_async(fx.driver, "req-c-nobody", NULL, 0, journal, 0, &ao, on_done, &d) == ST_OK);
  REQUIRE(latch_wait(&d.done, 2));
  CHECK(d.status == ST_E_NOT_FOUND);
  CHECK(strstr(d.message, "req-c-nobody") != NULL);
  CHECK(d.result == NULL);

  /* Argument errors before any I/O. */
  CHECK(st_driver_attach_turn(&attached, fx.driver, NULL, NULL, 0, journal, 0, &ao) == ST_E_INVALID_ARGUMENT);
  CHECK(st_driver_attach_turn(&attached, fx.driver, "", "", 0, journal, 0, &ao) == ST_E_INVALID_ARGUMENT);
  CHECK(st_driver_attach_turn(&attached, fx.driver, "req-c-attach-1", NULL, -1, journal, 0, &ao) ==
        ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "last_event_id") != NULL);
  CHECK(st_driver_attach_turn_async(fx.driver, "req-c-attach-1", NULL, 0, journal, 0, &ao, NULL, NULL) ==
        ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "done") != NULL);
  ao.version = 99;
  CHECK(st_driver_attach_turn(&attached, fx.driver, "req-c-attach-1", NULL, 0, journal, 0, &ao) ==
        ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "version") != NULL);
  CHECK(attached == NULL);

  latch_destroy(&d.done);
  collector_destroy(&replay);
  st_string_free(journal);
  st_turn_result_free(submitted);
  turn_payload_destroy(&p);
  fixture_stop(&fx);
}

/* ---- Questions ------------------------------------------------------------------------------------------- */

static const char *kQuestionScript = QUESTION_SCRIPT;

typedef struct question_state {
  latch asked;
  pthread_mutex_t mutex;
  st_responder *responder;
  char input_id[128];
  char question_id[64];
  char question[128];
  char first_label[64];
  size_t option_count;
  int ok;
} question_state;

static void on_question(const st_question_request *req, st_responder *responder, void *payload) {
  question_state *q = (question_state *)payload;
  pthread_mutex_lock(&q->mutex);
  q->ok = req->version >= 1 && req->question_count == 1 && req->raw_json && req->raw_json[0] == '{' &&
          strcmp(st_responder_input_id(responder), req->input_id) == 0;
  snprintf(q->input_id, sizeof q->input_id, "%s", req->input_id);
  if (req->question_count > 0) {
    snprintf(q->question_id, sizeof q->question_id, "%s", req->questions[0].id);
    snprintf(q->question, sizeof q->question, "%s", req->questions[0].question);
    q->option_count = req->questions[0].option_count;
    if (q->option_count > 0) snprintf(q->first_label, sizeof q->first_label, "%s", req->questions[0].options[0].label);
  }
  q->responder = responder; /* answered later, from another thread */
  pthread_mutex_unlock(&q->mutex);
  latch_add(&q->asked);
}

static void *answer_thread(void *arg) {
  question_state *q = (question_state *)arg;
  if (latch_wait(&q->asked, 1)) {
    const char *values[] = {"blue"};
    st_answer a;
    pthread_mutex_lock(&q->mutex);
    a.question_id = q->question_id;
    a.values = values;
    a.value_count = 1;
    CHECK(st_responder_answer(q->responder, &a, 1) == ST_OK);
    CHECK(st_responder_answer(q->responder, &a, 1) == ST_E_REJECTED); /* exactly once */
    CHECK(st_responder_decline(q->responder) == ST_E_REJECTED);
    st_responder_free(q->responder);
    q->responder = NULL;
    pthread_mutex_unlock(&q->mutex);
  }
  return NULL;
}

static void question_state_init(question_state *q) {
  memset(q, 0, sizeof *q);
  latch_init(&q->asked);
  pthread_mutex_init(&q->mutex, NULL);
}

static void test_question_answered_from_thread(void) {
  fixture fx;
  question_state q;
  pthread_t t;
  st_turn_options to = ST_TURN_OPTIONS_INIT;
  st_turn_result *res = NULL;

  fixture_start(&fx, NULL, kQuestionScript);
  question_state_init(&q);
  to.on_question = on_question;
  to.payload = &q;
  to.timeout_ms = WAIT_SECONDS * 1000;
  to.answer_timeout_ms = WAIT_SECONDS * 1000;
  REQUIRE(pthread_create(&t, NULL, answer_thread, &q) == 0);
  REQUIRE(st_driver_submit_turn(&res, fx.driver, "ask me", &to) == ST_OK);
  pthread_join(t, NULL);
  CHECK(q.ok);
  CHECK(strcmp(q.input_id, "q-1") == 0);
  CHECK(strcmp(q.question_id, "color") == 0);
  CHECK(strcmp(q.question, "Which color?") == 0);
  CHECK(q.option_count == 2);
  CHECK(strcmp(q.first_label, "red") == 0);
  CHECK(st_turn_result_status(res) == ST_TURN_COMPLETED);
  CHECK(strstr(st_turn_result_text(res), "Answers: color=blue") != NULL);
  CHECK(st_turn_result_questions_answered(res) == 1);
  CHECK(st_turn_result_questions_declined(res) == 0);
  st_turn_result_free(res);
  latch_destroy(&q.asked);
  pthread_mutex_destroy(&q.mutex);
  fixture_stop(&fx);
}

static void test_question_never_answered(void) {
  fixture fx;
  question_state q;
  st_turn_options to = ST_TURN_OPTIONS_INIT;
  st_turn_result *res = NULL;

  fixture_start(&fx, NULL, kQuestionScript);
  question_state_init(&q);
  to.on_question = on_question;
  to.payload = &q;
  to.timeout_ms = WAIT_SECONDS * 1000;
  to.answer_timeout_ms = 300; /* nobody answers: declined at this deadline */
  REQUIRE(st_driver_submit_turn(&res, fx.driver, "ask me", &to) == ST_OK);
  CHECK(latch_wait(&q.asked, 1));
  CHECK(st_turn_result_questions_declined(res) == 1);
  CHECK(st_turn_result_questions_answered(res) == 0);
  CHECK(strstr(st_turn_result_text(res), "declined") != NULL);
  /* The responder outlives its turn: using it now is refused, freeing it is fine. */
  CHECK(st_responder_decline(q.responder) == ST_E_REJECTED);
  CHECK(strstr(st_last_error(), "q-1") != NULL);
  st_responder_free(q.responder);
  st_turn_result_free(res);

  /* No question callback: the policy declines at once. */
  REQUIRE(st_driver_submit_turn(&res, fx.driver, "ask me again", NULL) == ST_OK);
  CHECK(st_turn_result_questions_declined(res) == 1);
  st_turn_result_free(res);
  latch_destroy(&q.asked);
  pthread_mutex_destroy(&q.mutex);
  fixture_stop(&fx);
}

/* ---- Kubernetes Sessions (run by run_with_fake_kube.py: a fake API server, Sessions s1 and s2,
 * Pod s1-pod bridged to ST_TEST_RUNTIME_SOCKET) ------------------------------------------------------ */

static int find_session(const st_session_list *list, const char *name) {
  size_t i;
  for (i = 0; i < st_session_list_count(list); i++) {
    if (strcmp(st_session_list_name(list, i), name) == 0) return (int)i;
  }
  return -1;
}

/* Polls until Session `name` shows `phase` (the fake controller acts asynchronously). */
static int wait_phase(st_kube *kube, const char *name, const char *phase) {
  struct timespec ts = {0, 50 * 1000 * 1000};
  int i;
  for (i = 0; i < WAIT_SECONDS * 20; i++) {
    st_session_list *list = NULL;
    int found = 0;
    if (st_session_list_new(&list, kube, NULL) == ST_OK) {
      int at = find_session(list, name);
      found = at >= 0 && strcmp(st_session_list_phase(list, (size_t)at), phase) == 0;
    }
    st_session_list_free(list);
    if (found) return 1;
    nanosleep(&ts, NULL);
  }
  return 0;
}

static void test_kube_sessions(void) {
  const char *kubeconfig = getenv("ST_TEST_KUBECONFIG");
  const char *socket_path = getenv("ST_TEST_RUNTIME_SOCKET");
  st_kube_options ko = ST_KUBE_OPTIONS_INIT;
  st_kube *kube = NULL;
  st_context *ctx = NULL;
  st_session_list *list = NULL;
  st_local_runtime *rt = NULL;
  st_local_runtime_options ro = ST_LOCAL_RUNTIME_OPTIONS_INIT;
  st_driver *drv = NULL;
  st_turn_result *res = NULL;
  char *pod = NULL;
  int at;

  REQUIRE(kubeconfig != NULL && socket_path != NULL); /* run through run_with_fake_kube.py */

  /* Errors first: a missing file, NULL handles. */
  ko.kubeconfig = "/nonexistent/kubeconfig";
  CHECK(st_kube_new(&kube, &ko) != ST_OK && kube == NULL);
  CHECK(strstr(st_last_error(), "/nonexistent/kubeconfig") != NULL);
  ko.version = 0;
  CHECK(st_kube_new(&kube, &ko) == ST_E_INVALID_ARGUMENT);
  CHECK(st_kube_new(NULL, NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(st_kube_namespace(NULL) == NULL);
  CHECK(st_session_list_new(&list, NULL, NULL) == ST_E_INVALID_ARGUMENT && list == NULL);
  CHECK(st_session_list_count(NULL) == 0);
  CHECK(st_session_list_name(NULL, 0) == NULL);
  CHECK(st_session_suspend(NULL, "s1") == ST_E_INVALID_ARGUMENT);
  CHECK(st_session_resume(NULL, "s1") == ST_E_INVALID_ARGUMENT);
  CHECK(st_session_wait_ready(&pod, NULL, "s1", 1000, 1) == ST_E_INVALID_ARGUMENT && pod == NULL);
  CHECK(st_driver_new_session(&drv, NULL, NULL, "s1", 1000) == ST_E_INVALID_ARGUMENT);

  ko.version = ST_KUBE_OPTIONS_VERSION;
  ko.kubeconfig = kubeconfig;
  REQUIRE(st_kube_new(&kube, &ko) == ST_OK);
  CHECK(strcmp(st_kube_namespace(kube), "default") == 0);
  CHECK(st_session_suspend(kube, NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(st_session_suspend(kube, "") == ST_E_INVALID_ARGUMENT);

  /* List. */
  REQUIRE(st_session_list_new(&list, kube, NULL) == ST_OK);
  CHECK(st_session_list_count(list) == 2);
  at = find_session(list, "s1");
  CHECK(at >= 0);
  CHECK(find_session(list, "s2") >= 0);
  if (at >= 0) {
    CHECK(st_session_list_phase(list, (size_t)at) != NULL);
    CHECK(st_session_list_pod_name(list, (size_t)at) != NULL);
    CHECK(st_session_list_message(list, (size_t)at) != NULL);
  }
  CHECK(st_session_list_name(list, 99) == NULL);
  CHECK(strstr(st_last_error(), "out of range") != NULL);
  st_session_list_free(list);
  list = NULL;
  REQUIRE(st_session_list_new(&list, kube, "no-such-label=x") == ST_OK);
  CHECK(st_session_list_count(list) == 0);
  st_session_list_free(list);

  /* Wait-ready: s1 becomes Ready with its Pod; a missing Session times out (NotFound keeps waiting). */
  REQUIRE(st_session_wait_ready(&pod, kube, "s1", WAIT_SECONDS * 1000, 1) == ST_OK);
  CHECK(pod != NULL && strcmp(pod, "s1-pod") == 0);
  st_string_free(pod);
  CHECK(st_session_wait_ready(NULL, kube, "missing", 500, 1) == ST_E_TIMEOUT);

  /* Suspend by the owner: waiting reports it; resume: Ready again. */
  REQUIRE(st_session_wait_ready(NULL, kube, "s2", WAIT_SECONDS * 1000, 1) == ST_OK);
  CHECK(st_session_suspend(kube, "s2") == ST_OK);
  CHECK(wait_phase(kube, "s2", "Suspended"));
  CHECK(st_session_wait_ready(NULL, kube, "s2", WAIT_SECONDS * 1000, 1) == ST_E_UNAVAILABLE);
  CHECK(st_session_resume(kube, "s2") == ST_OK);
  CHECK(st_session_wait_ready(NULL, kube, "s2", WAIT_SECONDS * 1000, 1) == ST_OK);
  CHECK(st_session_suspend(kube, "missing") == ST_E_NOT_FOUND);
  CHECK(st_last_error_http_status() == 404);

  /* A driver for s1: through the fake's pods/exec to a local runtime. */
  REQUIRE(st_context_new(&ctx, NULL) == ST_OK);
  ro.socket_path = socket_path;
  ro.echo_delay_ms = 5;
  REQUIRE(st_local_runtime_start(&rt, &ro) == ST_OK);
  REQUIRE(st_driver_new_session(&drv, ctx, kube, "s1", WAIT_SECONDS * 1000) == ST_OK);
  REQUIRE(st_driver_submit_turn(&res, drv, "over kubernetes exec", NULL) == ST_OK);
  CHECK(st_turn_result_status(res) == ST_TURN_COMPLETED);
  CHECK(strstr(st_turn_result_text(res), "over kubernetes exec") != NULL);
  st_turn_result_free(res);
  st_driver_free(drv);
  CHECK(st_driver_new_session(&drv, ctx, kube, "missing", 300) == ST_E_TIMEOUT && drv == NULL);

  st_local_runtime_free(rt);
  st_context_free(ctx);
  st_kube_free(kube);
  st_kube_free(NULL);
  st_session_list_free(NULL);
}

/* ---- main ------------------------------------------------------------------------------------------------ */

static const test_case kCases[] = {
    {"version", test_version},
    {"null_handles", test_null_handles},
    {"bad_paths", test_bad_paths},
    {"echo_turn", test_echo_turn},
    {"rejected", test_rejected},
    {"async_turn", test_async_turn},
    {"cancel", test_cancel},
    {"interrupt", test_interrupt},
    {"would_block", test_would_block},
    {"nested_blocking", test_nested_blocking},
    {"watch", test_watch},
    {"exec_driver", test_exec_driver},
    {"turn_ref", test_turn_ref},
    {"attach_turn", test_attach_turn},
    {"question_answered_from_thread", test_question_answered_from_thread},
    {"question_never_answered", test_question_never_answered},
    {"kube_sessions", test_kube_sessions},
};

int main(int argc, char **argv) {
  /* Without an argument every case runs except those that need the fake API server. */
  return run_cases(kCases, sizeof kCases / sizeof kCases[0], argc, argv, "kube_");
}
