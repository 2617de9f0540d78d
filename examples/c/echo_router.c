/* A complete chat bot in C over the sessionturn C ABI: the chat is this terminal. Each line on stdin
 * is a message in one private chat; the Router runs it as a turn of the chat's current Session (a
 * local backend: one runtime per Session under STATE_DIR) and the adapter below, written in C,
 * "posts" and "edits" by printing to stdout. Chat commands work as in any chat: /new NAME, /use NAME,
 * /sessions. At end of input it waits for the replies, stops the router and exits.
 *
 *   echo-router [--provider SPEC] [--state DIR]     (SPEC: echo, script:FILE, claude-code, ...)
 *
 * Build: cc echo_router.c -lsessionturn_c   (or link the CMake target sessionturn::c). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sessionturn.h"

static int g_next_id = 0; /* message ids; the router calls the adapter on one strand at a time */

/* The adapter: runs on a context worker, must not block. Printing is quick enough; a real platform
 * would start an HTTP request here and finish `done` from its completion. Progress edits (they start
 * with U+2699) are left out of the transcript. */
static void print_message(const char *what, const char *id, const st_outbound_message *m) {
  size_t i;
  if (strncmp(m->text, "\xE2\x9A\x99", 3) == 0) return;
  printf("[%s %s] %s\n", what, id, m->text);
  for (i = 0; i < m->button_count; i++) printf("  (button %zu: %s)\n", m->buttons[i].row, m->buttons[i].label);
  fflush(stdout);
}

static void post(const st_thread_ref *where, const st_outbound_message *message, st_completion *done,
                 void *userdata) {
  char id[32];
  (void)where;
  (void)userdata;
  snprintf(id, sizeof id, "%d", ++g_next_id);
  print_message("post", id, message);
  st_completion_ok(done, id);
}

static void edit(const st_thread_ref *where, const char *message_id, const st_outbound_message *message,
                 st_completion *done, void *userdata) {
  (void)where;
  (void)userdata;
  print_message("edit", message_id, message);
  st_completion_ok(done, NULL);
}

static void capabilities(st_capabilities *caps, void *userdata) {
  (void)userdata;
  caps->command_prefix = "/"; /* "/new", "/use", "/sessions" */
  caps->edit_interval_ms = 100;
}

/* True once nothing runs, waits or remains to be delivered, twice in a row 100 ms apart. */
static int quiet(st_router *router) {
  st_router_stats s = ST_ROUTER_STATS_INIT;
  if (st_router_stats_get(router, &s) != ST_OK) return 1;
  return s.turns_in_flight == 0 && s.turns_waiting == 0 && s.outbox == 0;
}

static int wait_quiet(st_router *router, int seconds) {
  struct timespec pause = {0, 100 * 1000 * 1000};
  int i, calm = 0;
  for (i = 0; i < seconds * 10; i++) {
    calm = quiet(router) ? calm + 1 : 0;
    if (calm >= 3) return 1;
    nanosleep(&pause, NULL);
  }
  return 0;
}

static int fail(const char *what) {
  fprintf(stderr, "echo-router: %s: %s\n", what, st_last_error());
  return 1;
}

int main(int argc, char **argv) {
  const char *provider = NULL, *state = NULL;
  char store[1024], line[4096], id[32];
  int i, n = 0, disposition, rc = 0;
  st_context *context = NULL;
  st_backend *backend = NULL;
  st_router *router = NULL;
  st_local_backend_options bo = ST_LOCAL_BACKEND_OPTIONS_INIT;
  st_router_options ro = ST_ROUTER_OPTIONS_INIT;
  st_route route = ST_ROUTE_INIT;
  st_adapter adapter = {ST_ADAPTER_VERSION, post, edit, NULL, capabilities, NULL};
  const time_t start = time(NULL);

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--provider") == 0 && i + 1 < argc) provider = argv[++i];
    else if (strcmp(argv[i], "--state") == 0 && i + 1 < argc) state = argv[++i];
    else {
      fprintf(stderr, "usage: echo-router [--provider SPEC] [--state DIR]\n");
      return 2;
    }
  }
  if (st_context_new(&context, NULL) != ST_OK) return fail("context");
  bo.state_dir = state;  /* NULL: ~/.local/state/sessionturn */
  bo.provider = provider;
  if (st_backend_new_local(&backend, context, &bo) != ST_OK) {
    rc = fail("local backend");
    goto out;
  }
  if (state) {
    snprintf(store, sizeof store, "%s/router.db", state);
    ro.store_path = store;
  }
  ro.session_prefix = "terminal";
  ro.owner_uid = "echo-router";
  ro.routes = &route; /* one route taking every message */
  ro.route_count = 1;
  if (st_router_new(&router, backend, &adapter, &ro) != ST_OK) {
    rc = fail("router");
    goto out;
  }
  st_router_start(router);

  while (fgets(line, sizeof line, stdin)) {
    st_inbound_message m = ST_INBOUND_MESSAGE_INIT;
    line[strcspn(line, "\n")] = '\0';
    if (line[0] == '\0') continue;
    /* The router dedupes by message id across restarts (its store): ids unique to this run. */
    snprintf(id, sizeof id, "%ld-%ld-%d", (long)start, (long)getpid(), ++n);
    m.platform = "terminal";
    m.chat = "stdin";
    m.message_id = id;
    m.event_id = id;
    m.author_id = "me";
    m.author_name = "me";
    m.text = line;
    m.is_private_chat = 1;
    if (st_router_handle_message_wait(&disposition, router, &m, 0) != ST_OK) {
      rc = fail("handle_message");
      break;
    }
    if (disposition != ST_DISPOSITION_ACCEPTED) printf("(%s: %s)\n", id, st_disposition_name(disposition));
    /* One line at a time, like a person waiting for the answer before typing the next. */
    if (!wait_quiet(router, 120)) fprintf(stderr, "echo-router: still waiting for a reply to %s\n", id);
  }
  if (router && st_router_stop(router, 0) != ST_OK) rc = fail("stop");

out:
  st_router_free(router);
  st_backend_free(backend);
  st_context_free(context);
  return rc;
}
