/* A complete C program over the sessionturn C ABI: connect to a Session runtime, submit one turn,
 * print the reply as it streams, and answer the agent's questions (with the first option offered).
 *
 *   turn-c SOCKET PROMPT                          talk to the runtime listening on SOCKET
 *   turn-c --local [--provider SPEC] SOCKET PROMPT start a local runtime on SOCKET first (a demo)
 *
 * Build: cc turn.c -lsessionturn_c   (or link the CMake target sessionturn::c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sessionturn.h"

/* Runs on a context worker: print and return quickly. */
static void on_event(const st_event *event, void *payload) {
  (void)payload;
  if (strcmp(event->type, "assistant.delta") == 0) {
    fputs(event->text, stdout);
    fflush(stdout);
  } else if (strcmp(event->type, "tool.started") == 0) {
    printf("\n[tool %s]\n", event->tool_name);
  }
}

/* Runs on a context worker. A real bot would post the question to a person and answer later from
 * any thread; this one picks the first option of each question at once. */
static void on_question(const st_question_request *request, st_responder *responder, void *payload) {
  st_answer answers[16];
  const char *values[16];
  size_t i, n = request->question_count < 16 ? request->question_count : 16;
  (void)payload;
  for (i = 0; i < n; i++) {
    const st_question *q = &request->questions[i];
    values[i] = q->option_count > 0 ? q->options[0].label : "yes";
    printf("\n[question] %s -> %s\n", q->question, values[i]);
    answers[i].question_id = q->id;
    answers[i].values = &values[i];
    answers[i].value_count = 1;
  }
  if (st_responder_answer(responder, answers, n) != ST_OK) {
    fprintf(stderr, "could not answer: %s\n", st_last_error());
  }
  st_responder_free(responder);
}

int main(int argc, char **argv) {
  const char *socket_path, *prompt, *provider = NULL;
  int local = 0, arg = 1, rc = 1;
  st_context *context = NULL;
  st_local_runtime *runtime = NULL;
  st_driver *driver = NULL;
  st_turn_result *result = NULL;
  st_turn_options options = ST_TURN_OPTIONS_INIT;
  st_status status;

  if (arg < argc && strcmp(argv[arg], "--local") == 0) {
    local = 1;
    arg++;
  }
  if (arg + 1 < argc && strcmp(argv[arg], "--provider") == 0) {
    provider = argv[arg + 1];
    arg += 2;
  }
  if (argc - arg != 2) {
    fprintf(stderr, "usage: %s [--local [--provider SPEC]] SOCKET PROMPT\n", argv[0]);
    return 2;
  }
  socket_path = argv[arg];
  prompt = argv[arg + 1];

  if (st_context_new(&context, NULL) != ST_OK) {
    fprintf(stderr, "context: %s\n", st_last_error());
    return 1;
  }
  if (local) {
    st_local_runtime_options ro = ST_LOCAL_RUNTIME_OPTIONS_INIT;
    ro.socket_path = socket_path;
    ro.provider = provider;
    if (st_local_runtime_start(&runtime, &ro) != ST_OK) {
      fprintf(stderr, "local runtime: %s\n", st_last_error());
      goto done;
    }
  }
  if (st_driver_new_unix(&driver, context, socket_path) != ST_OK) {
    fprintf(stderr, "driver: %s\n", st_last_error());
    goto done;
  }

  options.on_event = on_event;
  options.on_question = on_question;
  options.timeout_ms = 10 * 60 * 1000;
  status = st_driver_submit_turn(&result, driver, prompt, &options);
  if (status != ST_OK) {
    fprintf(stderr, "\nturn failed (%s): %s\n", st_status_name(status), st_last_error());
    goto done;
  }
  printf("\n--- turn %s %s (questions answered %d, declined %d)\n%s\n", st_turn_result_turn_id(result),
         st_turn_status_name(st_turn_result_status(result)), st_turn_result_questions_answered(result),
         st_turn_result_questions_declined(result), st_turn_result_text(result));
  rc = st_turn_result_status(result) == ST_TURN_COMPLETED ? 0 : 1;

done:
  st_turn_result_free(result);
  st_driver_free(driver);
  st_local_runtime_free(runtime);
  st_context_free(context);
  return rc;
}
