/* What the C ABI's test programs share: CHECK/REQUIRE that report the library's last error, a latch
 * (wait for a count with a deadline), and temporary directories. C99 + POSIX; each program is one
 * translation unit, so the statics here are its own. */
#ifndef SESSIONTURN_CAPI_TEST_H
#define SESSIONTURN_CAPI_TEST_H

#include "sessionturn.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Deadline of every wait in these tests: far above what a healthy run needs, so only a real hang fails. */
#define WAIT_SECONDS 30

static int g_failures = 0;

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond,   \
              st_last_error());                                                                  \
      g_failures++;                                                                              \
    }                                                                                            \
  } while (0)

#define REQUIRE(cond)                                                                            \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "%s:%d: REQUIRE failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              st_last_error());                                                                  \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

static inline void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  REQUIRE(f != NULL);
  fputs(text, f);
  fclose(f);
}

static inline void remove_tree(const char *dir) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* ---- A latch: wait for a count with a deadline ------------------------------------------------------ */

typedef struct latch {
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  int count;
} latch;

static inline void latch_init(latch *l) {
  pthread_mutex_init(&l->mutex, NULL);
  pthread_cond_init(&l->cond, NULL);
  l->count = 0;
}
static inline void latch_destroy(latch *l) {
  pthread_mutex_destroy(&l->mutex);
  pthread_cond_destroy(&l->cond);
}
static inline void latch_add(latch *l) {
  pthread_mutex_lock(&l->mutex);
  l->count++;
  pthread_cond_broadcast(&l->cond);
  pthread_mutex_unlock(&l->mutex);
}
/* 1 when the count reached `n` before the deadline. */
static inline int latch_wait(latch *l, int n) {
  struct timespec deadline;
  int ok;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += WAIT_SECONDS;
  pthread_mutex_lock(&l->mutex);
  while (l->count < n) {
    if (pthread_cond_timedwait(&l->cond, &l->mutex, &deadline) == ETIMEDOUT) break;
  }
  ok = l->count >= n;
  pthread_mutex_unlock(&l->mutex);
  return ok;
}

/* ---- Fixture: a temp dir, a context, a local runtime, a driver ---------------------------------- */

typedef struct fixture {
  char dir[256];
  char socket_path[300];
  char script_path[300];
  st_context *context;
  st_local_runtime *runtime;
  st_driver *driver;
} fixture;

/* A temp dir, a context, a local runtime and a driver. provider: NULL for echo; script: JSON text written
 * to a file and used as "script:FILE"; echo_delay_ms: the pause between the echo provider's deltas. */
static inline void fixture_start_with(fixture *fx, const char *provider, const char *script, int64_t echo_delay_ms) {
  st_local_runtime_options ro = ST_LOCAL_RUNTIME_OPTIONS_INIT;
  char spec[400];
  memset(fx, 0, sizeof *fx);
  strcpy(fx->dir, "/tmp/st_capi_XXXXXX");
  REQUIRE(mkdtemp(fx->dir) != NULL);
  snprintf(fx->socket_path, sizeof fx->socket_path, "%s/runtime.sock", fx->dir);
  REQUIRE(st_context_new(&fx->context, NULL) == ST_OK);
  ro.socket_path = fx->socket_path;
  ro.provider = provider;
  ro.echo_delay_ms = echo_delay_ms;
  if (script) {
    snprintf(fx->script_path, sizeof fx->script_path, "%s/script.json", fx->dir);
    write_file(fx->script_path, script);
    snprintf(spec, sizeof spec, "script:%s", fx->script_path);
    ro.provider = spec;
  }
  REQUIRE(st_local_runtime_start(&fx->runtime, &ro) == ST_OK);
  REQUIRE(strcmp(st_local_runtime_socket_path(fx->runtime), fx->socket_path) == 0);
  REQUIRE(st_driver_new_unix(&fx->driver, fx->context, fx->socket_path) == ST_OK);
}

static inline void fixture_start(fixture *fx, const char *provider, const char *script) {
  fixture_start_with(fx, provider, script, 5);
}

/* An echo runtime pacing its deltas `delay_ms` apart (three deltas): a turn of several seconds, time to
 * cancel or interrupt it. */
static inline void fixture_start_paced(fixture *fx, int64_t delay_ms) { fixture_start_with(fx, NULL, NULL, delay_ms); }

/* A script provider that asks one question, then replies with what it got ("Answers: color=blue"). */
#define QUESTION_SCRIPT                                                                                      \
  "{\"turns\": [{\"steps\": ["                                                                                \
  "{\"type\": \"question\", \"inputId\": \"q-1\", \"questions\": [{\"id\": \"color\", \"header\": \"Color\", "    \
  "\"question\": \"Which color?\", \"options\": [{\"label\": \"red\"}, {\"label\": \"blue\"}]}]},"              \
  "{\"type\": \"message\", \"text\": \"done asking\"}"                                                           \
  "]}]}"

static inline void fixture_stop(fixture *fx) {
  st_driver_free(fx->driver);
  CHECK(st_local_runtime_stop(fx->runtime) == ST_OK);
  CHECK(st_local_runtime_stop(fx->runtime) == ST_OK); /* idempotent */
  st_local_runtime_free(fx->runtime);
  st_context_free(fx->context);
  remove_tree(fx->dir);
}

/* ---- main: one case per run --------------------------------------------------------------------------- */

typedef struct test_case {
  const char *name;
  void (*fn)(void);
} test_case;

/* Runs the case named argv[1], or (no argument) every case whose name does not start with `skip`. */
static inline int run_cases(const test_case *cases, size_t count, int argc, char **argv, const char *skip) {
  size_t i;
  int ran = 0;
  for (i = 0; i < count; i++) {
    const int selected = argc < 2 ? (skip == NULL || strncmp(cases[i].name, skip, strlen(skip)) != 0)
                                  : strcmp(argv[1], cases[i].name) == 0;
    if (selected) {
      fprintf(stderr, "== %s\n", cases[i].name);
      cases[i].fn();
      ran++;
    }
  }
  if (ran == 0) {
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
  }
  if (g_failures) fprintf(stderr, "%d check(s) failed\n", g_failures);
  return g_failures ? 1 : 0;
}

#endif
