/* The Router through the C ABI with a chat adapter written in C (a recording one), over a local
 * backend hosting its runtimes in this process: the conversation is remembered, a reply to an older
 * bot message goes to the Session that wrote it, the agent's question is answered with a button, an
 * adapter failing its edits gets the reply as a new post, completions finished later from another
 * thread, stop, bad options named, and the pure helpers. C99, one case per run:
 * `test_capi_router <case>`. */
#define _POSIX_C_SOURCE 200809L

#include "capi_test.h"

#include <unistd.h>

/* ---- A recording adapter ------------------------------------------------------------------------------ */

#define MAX_MESSAGES 64
#define MAX_BUTTONS 8
#define GEAR "\xE2\x9A\x99" /* placeholders start with U+2699 */

typedef struct recorder {
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  int count; /* messages posted; message i has id "i+1" */
  char texts[MAX_MESSAGES][4096];
  char ops[8192]; /* "post:1,edit:1,..." */
  int posts, edits, typings;
  int fail_edits;     /* edits fail with ST_E_INVALID_ARGUMENT ("message can't be edited") */
  int defer;          /* completions are finished later, from a thread of ours */
  int nested_status;  /* what a blocking router call made inside a callback returned */
  st_router *router;  /* for nested_status */
  /* the last post that carried buttons */
  int button_message;
  size_t button_count;
  char button_label[MAX_BUTTONS][64];
  char button_data[MAX_BUTTONS][128];
  size_t button_row[MAX_BUTTONS];
} recorder;

static void recorder_init(recorder *r) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->mutex, NULL);
  pthread_cond_init(&r->cond, NULL);
  r->nested_status = 1;
}

static void recorder_destroy(recorder *r) {
  pthread_mutex_destroy(&r->mutex);
  pthread_cond_destroy(&r->cond);
}

static void append_op(recorder *r, const char *op, const char *id) {
  if (strlen(r->ops) + strlen(op) + strlen(id) + 3 < sizeof r->ops) {
    strcat(r->ops, op);
    strcat(r->ops, ":");
    strcat(r->ops, id);
    strcat(r->ops, ",");
  }
}

typedef struct deferred {
  st_completion *done;
  char id[16];
  int fail;
} deferred;

static void *finish_later(void *arg) {
  deferred *d = (deferred *)arg;
  struct timespec pause = {0, 20 * 1000 * 1000};
  nanosleep(&pause, NULL);
  if (d->fail) {
    CHECK(st_completion_fail(d->done, ST_E_INVALID_ARGUMENT, "message can't be edited", 0) == ST_OK);
  } else {
    CHECK(st_completion_ok(d->done, d->id[0] ? d->id : NULL) == ST_OK);
  }
  free(d);
  return NULL;
}

/* Finishes `done` now, or (defer) from a detached thread in a moment. */
static void finish(recorder *r, st_completion *done, const char *id, int fail) {
  if (r->defer) {
    pthread_t t;
    deferred *d = (deferred *)calloc(1, sizeof *d);
    REQUIRE(d != NULL);
    d->done = done;
    d->fail = fail;
    if (id) snprintf(d->id, sizeof d->id, "%s", id);
    REQUIRE(pthread_create(&t, NULL, finish_later, d) == 0);
    pthread_detach(t);
    return;
  }
  if (fail) {
    CHECK(st_completion_fail(done, ST_E_INVALID_ARGUMENT, "message can't be edited", 0) == ST_OK);
  } else {
    CHECK(st_completion_ok(done, id) == ST_OK);
  }
}

static void on_post(const st_thread_ref *where, const st_outbound_message *message, st_completion *done,
                    void *userdata) {
  recorder *r = (recorder *)userdata;
  char id[16];
  size_t i;
  pthread_mutex_lock(&r->mutex);
  CHECK(where->platform != NULL && strcmp(where->chat, "C1") == 0 && where->thread != NULL);
  CHECK(message->version == ST_OUTBOUND_MESSAGE_VERSION && message->reply_to != NULL);
  REQUIRE(r->count < MAX_MESSAGES);
  snprintf(r->texts[r->count], sizeof r->texts[r->count], "%s", message->text);
  r->count++;
  r->posts++;
  snprintf(id, sizeof id, "%d", r->count);
  append_op(r, "post", id);
  if (message->button_count > 0) {
    r->button_message = r->count;
    r->button_count = message->button_count < MAX_BUTTONS ? message->button_count : MAX_BUTTONS;
    for (i = 0; i < r->button_count; i++) {
      snprintf(r->button_label[i], sizeof r->button_label[i], "%s", message->buttons[i].label);
      snprintf(r->button_data[i], sizeof r->button_data[i], "%s", message->buttons[i].data);
      r->button_row[i] = message->buttons[i].row;
    }
  }
  if (r->router) r->nested_status = st_router_stop(r->router, 1000);
  pthread_cond_broadcast(&r->cond);
  pthread_mutex_unlock(&r->mutex);
  finish(r, done, id, 0);
}

static void on_edit(const st_thread_ref *where, const char *message_id, const st_outbound_message *message,
                    st_completion *done, void *userdata) {
  recorder *r = (recorder *)userdata;
  int index = atoi(message_id) - 1, fail;
  (void)where;
  pthread_mutex_lock(&r->mutex);
  r->edits++;
  append_op(r, "edit", message_id);
  fail = r->fail_edits;
  if (!fail && index >= 0 && index < r->count)
    snprintf(r->texts[index], sizeof r->texts[index], "%s", message->text);
  pthread_cond_broadcast(&r->cond);
  pthread_mutex_unlock(&r->mutex);
  finish(r, done, NULL, fail);
}

static void on_typing(const st_thread_ref *where, st_completion *done, void *userdata) {
  recorder *r = (recorder *)userdata;
  (void)where;
  pthread_mutex_lock(&r->mutex);
  r->typings++;
  pthread_mutex_unlock(&r->mutex);
  CHECK(st_completion_ok(done, NULL) == ST_OK);
}

static void capabilities(st_capabilities *caps, void *userdata) {
  (void)userdata;
  caps->buttons = 1;
  caps->typing = 1;
  caps->command_prefix = "/";
  caps->edit_interval_ms = 10;
}

/* The id (1-based) of a message whose current text contains `needle` and is not a placeholder; 0 after
 * the deadline. */
static int wait_for_text(recorder *r, const char *needle) {
  struct timespec deadline;
  int i, found = 0;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += WAIT_SECONDS;
  pthread_mutex_lock(&r->mutex);
  while (!found) {
    for (i = 0; i < r->count && !found; i++)
      if (strstr(r->texts[i], needle) && strncmp(r->texts[i], GEAR, 3) != 0) found = i + 1;
    if (found) break;
    if (pthread_cond_timedwait(&r->cond, &r->mutex, &deadline) == ETIMEDOUT) break;
  }
  if (!found) {
    fprintf(stderr, "no message with \"%s\"; messages:\n", needle);
    for (i = 0; i < r->count; i++) fprintf(stderr, "  %d: %s\n", i + 1, r->texts[i]);
  }
  pthread_mutex_unlock(&r->mutex);
  return found;
}

/* ---- Fixture: a local backend, a router ---------------------------------------------------------------- */

typedef struct bot {
  char dir[256];
  char store[300];
  char sessions[300];
  char script[300];
  char provider[400];
  st_context *context;
  st_backend *backend;
  st_router *router;
  recorder rec;
  int next_message;
} bot;

static void bot_start(bot *b, const char *script, int defer) {
  st_local_backend_options bo = ST_LOCAL_BACKEND_OPTIONS_INIT;
  st_router_options ro = ST_ROUTER_OPTIONS_INIT;
  st_route route = ST_ROUTE_INIT;
  st_adapter adapter;
  char *describe = NULL;

  memset(b, 0, sizeof *b);
  recorder_init(&b->rec);
  b->rec.defer = defer;
  strcpy(b->dir, "/tmp/st_capi_router_XXXXXX");
  REQUIRE(mkdtemp(b->dir) != NULL);
  snprintf(b->store, sizeof b->store, "%s/router.db", b->dir);
  snprintf(b->sessions, sizeof b->sessions, "%s/sessions", b->dir);
  REQUIRE(st_context_new(&b->context, NULL) == ST_OK);
  bo.state_dir = b->sessions;
  bo.in_process = 1;
  bo.idle_suspend_ms = 0;
  if (script) {
    snprintf(b->script, sizeof b->script, "%s/script.json", b->dir);
    write_file(b->script, script);
    snprintf(b->provider, sizeof b->provider, "script:%s", b->script);
    bo.provider = b->provider;
  }
  REQUIRE(st_backend_new_local(&b->backend, b->context, &bo) == ST_OK);
  REQUIRE(st_backend_describe(&describe, b->backend) == ST_OK);
  CHECK(strncmp(describe, "local in-process (", 18) == 0 && strstr(describe, b->sessions) != NULL);
  st_string_free(describe);

  memset(&adapter, 0, sizeof adapter);
  adapter.version = ST_ADAPTER_VERSION;
  adapter.post = on_post;
  adapter.edit = on_edit;
  adapter.typing = on_typing;
  adapter.capabilities = capabilities;
  adapter.userdata = &b->rec;
  ro.owner_uid = "test-owner";
  ro.store_path = b->store;
  ro.routes = &route;
  ro.route_count = 1;
  ro.progress_interval_ms = 20;
  REQUIRE(st_router_new(&b->router, b->backend, &adapter, &ro) == ST_OK);
  REQUIRE(st_router_start(b->router) == ST_OK);
}

static void bot_stop(bot *b) {
  CHECK(st_router_stop(b->router, WAIT_SECONDS * 1000) == ST_OK);
  st_router_free(b->router);
  st_backend_free(b->backend);
  st_context_free(b->context);
  recorder_destroy(&b->rec);
  remove_tree(b->dir);
}

/* Sends the next message of user U1 in private chat C1; returns the disposition. */
static int bot_say(bot *b, const char *text, const char *reply_to, const char *message_id) {
  st_inbound_message m = ST_INBOUND_MESSAGE_INIT;
  char id[32], event[32];
  int disposition = -1;
  b->next_message++;
  snprintf(id, sizeof id, "m%d", b->next_message);
  snprintf(event, sizeof event, "e%d", b->next_message);
  m.platform = "test";
  m.chat = "C1";
  m.message_id = message_id ? message_id : id;
  m.event_id = event;
  m.author_id = "U1";
  m.author_name = "Ada";
  m.text = text;
  m.reply_to_message_id = reply_to;
  m.is_private_chat = 1;
  CHECK(st_router_handle_message_wait(&disposition, b->router, &m, 0) == ST_OK);
  return disposition;
}

static uint64_t replies_delivered(bot *b) {
  st_router_stats s = ST_ROUTER_STATS_INIT;
  REQUIRE(st_router_stats_get(b->router, &s) == ST_OK);
  return s.replies_delivered;
}

static void wait_replies(bot *b, uint64_t n) {
  int i;
  for (i = 0; i < WAIT_SECONDS * 100 && replies_delivered(b) < n; i++) {
    struct timespec pause = {0, 10 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  CHECK(replies_delivered(b) == n);
}

/* ---- Cases ---------------------------------------------------------------------------------------------- */

static void conversation(int defer) {
  bot b;
  int first, second;
  bot_start(&b, NULL, defer);
  CHECK(bot_say(&b, "hello", NULL, NULL) == ST_DISPOSITION_ACCEPTED);
  first = wait_for_text(&b.rec, "echo #1:");
  CHECK(first > 0 && strstr(b.rec.texts[first - 1], "hello") != NULL);
  CHECK(bot_say(&b, "again", NULL, NULL) == ST_DISPOSITION_ACCEPTED);
  second = wait_for_text(&b.rec, "echo #2:");
  CHECK(second > 0 && strstr(b.rec.texts[second - 1], "again") != NULL);
  /* Each reply is its placeholder, edited in place: one post per message. */
  pthread_mutex_lock(&b.rec.mutex);
  CHECK(b.rec.posts == 2);
  CHECK(b.rec.edits >= 2);
  pthread_mutex_unlock(&b.rec.mutex);
  CHECK(bot_say(&b, "again", NULL, "m2") == ST_DISPOSITION_DUPLICATE);
  wait_replies(&b, 2);
  bot_stop(&b);
}

static void test_conversation_remembered(void) { conversation(0); }

/* The same conversation with every completion finished 20 ms later, from a thread of the adapter's. */
static void test_completions_from_another_thread(void) { conversation(1); }

static void test_reply_to_routes_to_its_session(void) {
  bot b;
  int first, reply;
  char first_id[16];
  bot_start(&b, NULL, 0);
  CHECK(bot_say(&b, "first session", NULL, NULL) == ST_DISPOSITION_ACCEPTED);
  first = wait_for_text(&b.rec, "echo #1: [test message from Ada (U1)]\nfirst session");
  REQUIRE(first > 0);
  snprintf(first_id, sizeof first_id, "%d", first);
  CHECK(bot_say(&b, "/new other", NULL, NULL) == ST_DISPOSITION_ACCEPTED);
  CHECK(wait_for_text(&b.rec, "other") > 0);
  CHECK(bot_say(&b, "in the new one", NULL, NULL) == ST_DISPOSITION_ACCEPTED);
  CHECK(wait_for_text(&b.rec, "in the new one") > 0);
  CHECK(bot_say(&b, "back to the first", first_id, NULL) == ST_DISPOSITION_ACCEPTED);
  reply = wait_for_text(&b.rec, "back to the first");
  CHECK(reply > 0 && strstr(b.rec.texts[reply - 1], "echo #2:") != NULL); /* the first Session's second turn */
  bot_stop(&b);
}

static const char *kQuestionScript = QUESTION_SCRIPT;

typedef struct acks {
  latch count;
  pthread_mutex_t mutex;
  char last[256];
} acks;

static void on_ack(const char *text, void *payload) {
  acks *a = (acks *)payload;
  pthread_mutex_lock(&a->mutex);
  snprintf(a->last, sizeof a->last, "%s", text);
  pthread_mutex_unlock(&a->mutex);
  latch_add(&a->count);
}

static void test_question_answered_with_a_button(void) {
  bot b;
  acks a;
  int question, press, blue = -1;
  size_t i;
  char message_id[16], event_id[32];

  bot_start(&b, kQuestionScript, 0);
  latch_init(&a.count);
  pthread_mutex_init(&a.mutex, NULL);
  CHECK(bot_say(&b, "ask me", NULL, NULL) == ST_DISPOSITION_ACCEPTED);
  question = wait_for_text(&b.rec, "Which color?");
  REQUIRE(question > 0);
  pthread_mutex_lock(&b.rec.mutex);
  CHECK(b.rec.button_message == question);
  CHECK(b.rec.button_count == 2);
  for (i = 0; i < b.rec.button_count; i++) {
    CHECK(b.rec.button_row[i] == i); /* one option per row */
    if (strcmp(b.rec.button_label[i], "blue") == 0) blue = (int)i;
  }
  pthread_mutex_unlock(&b.rec.mutex);
  REQUIRE(blue >= 0);
  snprintf(message_id, sizeof message_id, "%d", question);
  /* The router learns the question's message id when the post returns to it: a press before that is
   * told the question expired, and pressed again. */
  for (press = 1; press < 200; press++) {
    st_inbound_action action = ST_INBOUND_ACTION_INIT;
    snprintf(event_id, sizeof event_id, "press-%d", press);
    action.platform = "test";
    action.chat = "C1";
    action.message_id = message_id;
    action.author_id = "U1";
    action.author_name = "Ada";
    action.data = b.rec.button_data[blue];
    action.event_id = event_id;
    action.ack = on_ack;
    action.ack_payload = &a;
    REQUIRE(st_router_handle_action(b.router, &action) == ST_OK);
    REQUIRE(latch_wait(&a.count, press));
    if (a.last[0] == '\0') break;
    {
      struct timespec pause = {0, 50 * 1000 * 1000};
      nanosleep(&pause, NULL);
    }
  }
  CHECK(a.last[0] == '\0');
  CHECK(wait_for_text(&b.rec, "Answers: color=blue") > 0);
  latch_destroy(&a.count);
  pthread_mutex_destroy(&a.mutex);
  bot_stop(&b);
}

static void test_failed_edits_post_the_reply(void) {
  bot b;
  int reply;
  char expected[32];
  bot_start(&b, NULL, 0);
  b.rec.fail_edits = 1;
  CHECK(bot_say(&b, "edits fail", NULL, NULL) == ST_DISPOSITION_ACCEPTED);
  reply = wait_for_text(&b.rec, "echo #1:");
  REQUIRE(reply > 1); /* not the placeholder (message 1): a new post */
  snprintf(expected, sizeof expected, "post:%d,", reply);
  pthread_mutex_lock(&b.rec.mutex);
  CHECK(strstr(b.rec.ops, expected) != NULL);
  CHECK(strstr(b.rec.ops, "edit:1,") != NULL);
  pthread_mutex_unlock(&b.rec.mutex);
  bot_stop(&b);
}

typedef struct disposition_box {
  latch done;
  st_status status;
  int disposition;
  char message[256];
} disposition_box;

static void on_disposition(st_status status, int disposition, const char *message, void *payload) {
  disposition_box *d = (disposition_box *)payload;
  d->status = status;
  d->disposition = disposition;
  snprintf(d->message, sizeof d->message, "%s", message);
  latch_add(&d->done);
}

static void test_stop_and_blocking_calls_in_callbacks(void) {
  bot b;
  disposition_box d;
  st_inbound_message m = ST_INBOUND_MESSAGE_INIT;
  st_router_stats s = ST_ROUTER_STATS_INIT;

  bot_start(&b, NULL, 0);
  b.rec.router = b.router; /* the adapter's post tries st_router_stop: refused on a worker */
  CHECK(bot_say(&b, "hi", NULL, NULL) == ST_DISPOSITION_ACCEPTED);
  CHECK(wait_for_text(&b.rec, "echo #1:") > 0);
  pthread_mutex_lock(&b.rec.mutex);
  CHECK(b.rec.nested_status == ST_E_WOULD_BLOCK);
  b.rec.router = NULL;
  pthread_mutex_unlock(&b.rec.mutex);
  wait_replies(&b, 1);
  REQUIRE(st_router_stats_get(b.router, &s) == ST_OK);
  CHECK(s.messages_accepted == 1 && s.turns_completed == 1 && s.turns_in_flight == 0);

  CHECK(st_router_stop(b.router, WAIT_SECONDS * 1000) == ST_OK);
  /* Stopped: a message is not taken (the platform will redeliver it). */
  latch_init(&d.done);
  m.platform = "test";
  m.chat = "C1";
  m.message_id = "after-stop";
  m.author_id = "U1";
  m.text = "too late";
  m.is_private_chat = 1;
  CHECK(st_router_handle_message(b.router, &m, on_disposition, &d) == ST_OK);
  REQUIRE(latch_wait(&d.done, 1));
  CHECK(d.status == ST_E_UNAVAILABLE);
  CHECK(d.disposition == -1);
  CHECK(d.message[0] != '\0');
  latch_destroy(&d.done);
  st_router_free(b.router);
  st_router_free(NULL);
  st_backend_free(b.backend);
  st_context_free(b.context);
  recorder_destroy(&b.rec);
  remove_tree(b.dir);
}

static void noop_post(const st_thread_ref *w, const st_outbound_message *m, st_completion *d, void *u) {
  (void)w;
  (void)m;
  (void)u;
  CHECK(st_completion_ok(d, "1") == ST_OK);
}
static void noop_edit(const st_thread_ref *w, const char *id, const st_outbound_message *m, st_completion *d,
                      void *u) {
  (void)w;
  (void)id;
  (void)m;
  (void)u;
  CHECK(st_completion_ok(d, NULL) == ST_OK);
}
static void tiny_capabilities(st_capabilities *caps, void *userdata) {
  (void)userdata;
  caps->max_length = 10;
}

static void soft_capabilities(st_capabilities *caps, void *userdata) {
  (void)userdata;
  caps->soft_length = 10;
}

static void test_bad_options_are_named(void) {
  char dir[] = "/tmp/st_capi_router_XXXXXX";
  char store[300];
  st_context *ctx = NULL;
  st_backend *backend = NULL;
  st_router *router = NULL;
  st_local_backend_options bo = ST_LOCAL_BACKEND_OPTIONS_INIT;
  st_router_options ro = ST_ROUTER_OPTIONS_INIT;
  st_route route = ST_ROUTE_INIT;
  st_adapter adapter;
  st_inbound_message m = ST_INBOUND_MESSAGE_INIT;
  const char *bad_regex[] = {"(unclosed"};
  const char *bad_pair[] = {"no-equals-sign"};
  int disposition = 0;

  REQUIRE(mkdtemp(dir) != NULL);
  snprintf(store, sizeof store, "%s/router.db", dir);
  REQUIRE(st_context_new(&ctx, NULL) == ST_OK);
  bo.state_dir = dir;
  bo.in_process = 1;
  bo.provider = "nonsense";
  CHECK(st_backend_new_local(&backend, ctx, &bo) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "nonsense") != NULL);
  CHECK(backend == NULL);
  bo.provider = NULL;
  bo.version = 99;
  CHECK(st_backend_new_local(&backend, ctx, &bo) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "st_local_backend_options.version is 99") != NULL);
  bo.version = ST_LOCAL_BACKEND_OPTIONS_VERSION;
  REQUIRE(st_backend_new_local(&backend, ctx, &bo) == ST_OK);

  memset(&adapter, 0, sizeof adapter);
  adapter.version = ST_ADAPTER_VERSION;
  adapter.post = noop_post;
  ro.store_path = store;
  CHECK(st_router_new(&router, backend, &adapter, &ro) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), ".edit") != NULL);
  adapter.edit = noop_edit;
  CHECK(st_router_new(&router, backend, &adapter, NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(st_router_new(&router, backend, &adapter, &ro) == ST_E_INVALID_ARGUMENT); /* no routes */
  CHECK(strstr(st_last_error(), "route") != NULL);
  ro.routes = &route;
  ro.route_count = 1;
  route.triggers = bad_regex;
  route.trigger_count = 1;
  CHECK(st_router_new(&router, backend, &adapter, &ro) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "(unclosed") != NULL);
  route.triggers = NULL;
  route.trigger_count = 0;
  route.session_parameters = bad_pair;
  route.session_parameter_count = 1;
  CHECK(st_router_new(&router, backend, &adapter, &ro) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "routes[0].session_parameters[0] \"no-equals-sign\" is not key=value") != NULL);
  route.session_parameters = NULL;
  route.session_parameter_count = 0;
  route.chat_count = 2; /* chats is NULL */
  CHECK(st_router_new(&router, backend, &adapter, &ro) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "routes[0].chats is NULL") != NULL);
  route.chat_count = 0;
  ro.max_queued = 0;
  CHECK(st_router_new(&router, backend, &adapter, &ro) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "max_queued") != NULL);
  ro.max_queued = 8;
  ro.answerers = 7;
  CHECK(st_router_new(&router, backend, &adapter, &ro) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "answerers") != NULL);
  ro.answerers = ST_ANSWERERS_ALLOWED_USERS;
  adapter.capabilities = tiny_capabilities;
  CHECK(st_router_new(&router, backend, &adapter, &ro) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "st_capabilities.max_length is 10") != NULL);
  adapter.capabilities = soft_capabilities;
  CHECK(st_router_new(&router, backend, &adapter, &ro) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "st_capabilities.soft_length is 10") != NULL);
  adapter.capabilities = NULL;
  REQUIRE(st_router_new(&router, backend, &adapter, &ro) == ST_OK);

  /* A message without its required fields, or of an unknown kind, is refused by name. */
  CHECK(st_router_handle_message_wait(&disposition, router, NULL, 0) == ST_E_INVALID_ARGUMENT);
  m.kind = 9;
  CHECK(st_router_handle_message_wait(&disposition, router, &m, 0) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "st_inbound_message.kind is 9") != NULL);
  m.kind = ST_MESSAGE_NEW;
  CHECK(st_router_handle_message_wait(&disposition, router, &m, 0) == ST_E_INVALID_ARGUMENT);
  CHECK(disposition == -1);
  CHECK(st_router_handle_message(NULL, &m, NULL, NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(st_router_handle_action(router, NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(st_completion_ok(NULL, "1") == ST_E_INVALID_ARGUMENT);
  CHECK(st_completion_fail(NULL, ST_E_FAILED, "x", 0) == ST_E_INVALID_ARGUMENT);
  CHECK(st_router_stop(router, WAIT_SECONDS * 1000) == ST_OK);
  st_router_free(router);
  st_backend_free(backend);
  st_context_free(ctx);
  remove_tree(dir);
}

static void test_helpers(void) {
  char *name = NULL;
  st_parts *parts = NULL;
  st_render_options o = ST_RENDER_OPTIONS_INIT;
  char text[4096];
  size_t i;

  /* The pinned vector of docs/routing-rules.md. */
  REQUIRE(st_session_name(&name, "gravity", "slack", "spawner-uid", "C123", "1790000000.000100") == ST_OK);
  CHECK(strcmp(name, "gravity-slack-21a0bbb0a820") == 0);
  st_string_free(name);
  CHECK(st_session_name(&name, "gravity", NULL, "o", "C1", NULL) == ST_E_INVALID_ARGUMENT);
  CHECK(name == NULL);

  o.dialect = ST_DIALECT_TELEGRAM_HTML;
  o.max_length = 120;
  text[0] = '\0';
  strcat(text, "**bold** and `code`\n\n");
  for (i = 0; i < 100; i++) strcat(text, "word ");
  REQUIRE(st_render(&parts, text, &o) == ST_OK);
  CHECK(st_parts_count(parts) > 1);
  CHECK(strncmp(st_parts_text(parts, 0), "<b>bold</b> and <code>code</code>", 33) == 0);
  for (i = 0; i < st_parts_count(parts); i++) CHECK(strlen(st_parts_text(parts, i)) <= 120);
  CHECK(st_parts_text(parts, st_parts_count(parts)) == NULL);
  CHECK(strstr(st_last_error(), "out of range") != NULL);
  st_parts_free(parts);
  o.dialect = 42;
  CHECK(st_render(&parts, "x", &o) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "st_render_options.dialect is 42") != NULL);
  REQUIRE(st_render(&parts, "plain *x*", NULL) == ST_OK);
  CHECK(st_parts_count(parts) == 1 && strcmp(st_parts_text(parts, 0), "plain x") == 0);
  st_parts_free(parts);

  text[0] = '\0';
  strcat(text, "**not bold** <b>\n\n");
  for (i = 0; i < 60; i++) strcat(text, "word ");
  REQUIRE(st_split(&parts, text, 100, ST_UNIT_CODE_POINTS, 1) == ST_OK);
  CHECK(st_parts_count(parts) > 2);
  CHECK(strncmp(st_parts_text(parts, 0), "**not bold** <b>", 16) == 0);
  for (i = 0; i < st_parts_count(parts); i++) CHECK(strlen(st_parts_text(parts, i)) <= 100);
  CHECK(strstr(st_parts_text(parts, 0), "\n(1/") != NULL);
  st_parts_free(parts);
  CHECK(st_split(&parts, "x", 10, ST_UNIT_UTF16, 1) == ST_E_INVALID_ARGUMENT);
  CHECK(strstr(st_last_error(), "max_length 10") != NULL);
  CHECK(st_split(&parts, "x", 100, 5, 1) == ST_E_INVALID_ARGUMENT);
  st_parts_free(NULL);

  CHECK(strcmp(st_disposition_name(ST_DISPOSITION_ACCEPTED), "accepted") == 0);
  CHECK(strcmp(st_disposition_name(ST_DISPOSITION_REFUSED), "refused") == 0);
  CHECK(strcmp(st_disposition_name(17), "unknown") == 0);
}

static const test_case kCases[] = {
    {"conversation_remembered", test_conversation_remembered},
    {"completions_from_another_thread", test_completions_from_another_thread},
    {"reply_to_routes_to_its_session", test_reply_to_routes_to_its_session},
    {"question_answered_with_a_button", test_question_answered_with_a_button},
    {"failed_edits_post_the_reply", test_failed_edits_post_the_reply},
    {"stop_and_blocking_calls_in_callbacks", test_stop_and_blocking_calls_in_callbacks},
    {"bad_options_are_named", test_bad_options_are_named},
    {"helpers", test_helpers},
};

int main(int argc, char **argv) { return run_cases(kCases, sizeof kCases / sizeof kCases[0], argc, argv, NULL); }
