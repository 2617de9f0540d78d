/* sessionturn C ABI: a stable C99 surface over the C++ library, for bots in other languages.
 * Opaque handles, versioned option structs, negative status codes with a thread-local message.
 * Conventions, ownership, threading and the error table: docs/c-api.md. */
#ifndef SESSIONTURN_H
#define SESSIONTURN_H

#include <stddef.h>
#include <stdint.h>

/* The C ABI has its own version, independent of the C++ library's. MAJOR changes break the ABI
 * (and bump the shared library's SOVERSION); MINOR adds functions or appends struct fields. */
#define ST_VERSION_MAJOR 1
#define ST_VERSION_MINOR 1
#define ST_VERSION_PATCH 0

#if defined(_WIN32)
#if defined(ST_BUILDING_LIBRARY)
#define ST_API __declspec(dllexport)
#else
#define ST_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define ST_API __attribute__((visibility("default")))
#else
#define ST_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status and errors ------------------------------------------------------------------------ */

/* 0 is success; a negative value is an error whose code mirrors the C++ Errc (only ever appended). */
typedef int st_status;

enum {
  ST_OK = 0,
  ST_E_INVALID_ARGUMENT = -1,  /* the caller passed something unusable (named in the message) */
  ST_E_PROTOCOL_ERROR = -2,    /* the runtime broke the wire contract */
  ST_E_CONNECTION_FAILED = -3, /* could not reach the runtime */
  ST_E_CONNECTION_LOST = -4,   /* the stream dropped and could not be re-established */
  ST_E_TIMEOUT = -5,           /* a deadline passed */
  ST_E_CANCELLED = -6,         /* the caller cancelled */
  ST_E_REJECTED = -7,          /* the runtime (or a used-up responder) refused the request */
  ST_E_NOT_FOUND = -8,
  ST_E_UNAUTHORIZED = -9,
  ST_E_FORBIDDEN = -10,
  ST_E_CONFLICT = -11,
  ST_E_TOO_LARGE = -12,        /* a bound was exceeded (line, queue, reply) */
  ST_E_UNAVAILABLE = -13,
  ST_E_IO_ERROR = -14,         /* local I/O: files, sockets, processes */
  ST_E_WOULD_BLOCK = -15,      /* a blocking call was made on a Context worker thread (a callback) */
  ST_E_FAILED = -16,
  ST_E_INTERNAL = -17          /* a bug in sessionturn; please report it */
};

/* The version of the library actually loaded; any out pointer may be NULL. Returns "1.1.0". */
ST_API const char *st_version(int *major, int *minor, int *patch);

/* The message of the last failed st_* call on this thread ("" if none). Borrowed: valid until the
 * next st_* call on this thread. Thread-local, never shared between threads. */
ST_API const char *st_last_error(void);
/* The HTTP status that came with the last error on this thread, else 0. */
ST_API int st_last_error_http_status(void);
/* A short stable name for a status: "ok", "invalid_argument", ..., "unknown". Static storage. */
ST_API const char *st_status_name(st_status status);

/* Frees a string the library allocated for the caller (every `char **out`). NULL is a no-op. */
ST_API void st_string_free(char *string);

/* ---- Context ----------------------------------------------------------------------------------- */

typedef struct st_context st_context;

enum { ST_LOG_DEBUG = 0, ST_LOG_INFO = 1, ST_LOG_WARNING = 2, ST_LOG_ERROR = 3 };

/* Receives log lines on any thread; must be thread-safe and must not block. `message` is borrowed
 * for the call. Never contains tokens or secrets. */
typedef void (*st_log_fn)(int level, const char *message, void *payload);

#define ST_CONTEXT_OPTIONS_VERSION 1
typedef struct st_context_options {
  unsigned int version; /* ST_CONTEXT_OPTIONS_VERSION */
  int threads;          /* worker threads, >= 1 */
  int min_log_level;    /* ST_LOG_* */
  st_log_fn log;        /* NULL: warnings and errors to stderr */
  void *log_payload;
} st_context_options;
#define ST_CONTEXT_OPTIONS_INIT {ST_CONTEXT_OPTIONS_VERSION, 1, ST_LOG_WARNING, NULL, NULL}

/* Starts a context (its worker threads run every callback). `options` may be NULL (defaults). */
ST_API st_status st_context_new(st_context **out, const st_context_options *options);
/* Stops and joins the workers. Free every driver, watch and local runtime made from it first.
 * Not from a callback. NULL is a no-op. */
ST_API void st_context_free(st_context *context);

/* ---- Cancellation ------------------------------------------------------------------------------ */

typedef struct st_cancel st_cancel;
ST_API st_status st_cancel_new(st_cancel **out);
/* Cancels every turn that carries this source; idempotent, any thread, non-blocking. */
ST_API st_status st_cancel_cancel(st_cancel *cancel);
/* 1 when cancelled, 0 when not, negative on error. */
ST_API int st_cancel_is_cancelled(const st_cancel *cancel);
ST_API void st_cancel_free(st_cancel *cancel);

/* ---- Events and questions (borrowed views passed to callbacks) --------------------------------- */

/* One event of a turn or a watch. Every string is non-NULL (possibly "") and borrowed for the
 * callback only. Fields are only ever appended; `version` says which are present. */
#define ST_EVENT_VERSION 1
typedef struct st_event {
  unsigned int version;
  int64_t id; /* journal id, 0 for unjournaled events */
  const char *type;      /* "assistant.delta", "tool.started", ... */
  const char *turn_id;
  const char *request_id;
  const char *text;
  const char *status;
  const char *tool_id;
  const char *tool_name;
  const char *output;    /* tool output */
  const char *input_id;
  const char *raw_json;  /* the whole event as one JSON object */
} st_event;

typedef void (*st_event_fn)(const st_event *event, void *payload);

typedef struct st_question_option {
  const char *label;
  const char *description;
} st_question_option;

typedef struct st_question {
  const char *id;
  const char *header;
  const char *question;
  const st_question_option *options;
  size_t option_count;
  int multi_select;
  int secret;
} st_question;

#define ST_QUESTION_REQUEST_VERSION 1
typedef struct st_question_request {
  unsigned int version;
  const char *input_id;
  const char *turn_id;
  const st_question *questions;
  size_t question_count;
  const char *raw_json;
} st_question_request;

/* Answers or declines one question. Owned by the callback's receiver: free it with
 * st_responder_free (any thread) whether or not it was used, before freeing its driver. */
typedef struct st_responder st_responder;

/* `request` is borrowed for the call; `responder` is owned by the receiver. Runs on a worker: do not
 * block; answer now or later, from any thread. Unanswered questions are declined at the deadline. */
typedef void (*st_question_fn)(const st_question_request *request, st_responder *responder, void *payload);

typedef struct st_answer {
  const char *question_id;
  const char *const *values; /* chosen labels or free text */
  size_t value_count;
} st_answer;

/* Answer (or decline) exactly once; any thread; non-blocking (the request is written
 * asynchronously). ST_E_REJECTED when this responder was already used, or the question is no longer
 * open (the turn ended, or it was declined at its deadline). */
ST_API st_status st_responder_answer(st_responder *responder, const st_answer *answers, size_t answer_count);
ST_API st_status st_responder_decline(st_responder *responder);
/* The question's input id; borrowed from the responder. NULL on a NULL responder. */
ST_API const char *st_responder_input_id(const st_responder *responder);
ST_API void st_responder_free(st_responder *responder);

/* ---- Driver ------------------------------------------------------------------------------------ */

typedef struct st_driver st_driver;

/* A driver for the runtime at a unix socket path / run as a child process (argv[0] is looked up in
 * PATH, no shell). Non-blocking: nothing connects until a turn or watch starts. The context must
 * outlive the driver. */
ST_API st_status st_driver_new_unix(st_driver **out, st_context *context, const char *socket_path);
ST_API st_status st_driver_new_exec(st_driver **out, st_context *context, const char *const *argv, size_t argc);
/* Abandons turns in flight (their completion callbacks get ST_E_CANCELLED). Not from a callback. */
ST_API void st_driver_free(st_driver *driver);

typedef enum st_turn_status {
  ST_TURN_COMPLETED = 0,
  ST_TURN_FAILED = 1,
  ST_TURN_INTERRUPTED = 2,
  ST_TURN_REMOVED = 3
} st_turn_status;
/* "completed", "failed", "interrupted", "removed"; "unknown" otherwise. Static storage. */
ST_API const char *st_turn_status_name(int status);

/* Where a turn is in the runtime's journal: what a later process needs to follow it again
 * (st_driver_attach_turn). Passed to on_accepted as a borrowed view: every string is non-NULL
 * (possibly "") and valid for the call only; copy what you persist. Fields are only ever appended. */
#define ST_TURN_REF_VERSION 1
typedef struct st_turn_ref {
  unsigned int version;      /* ST_TURN_REF_VERSION */
  const char *request_id;    /* the message's requestId */
  const char *turn_id;       /* "turn-N" */
  int64_t last_event_id;     /* the last journaled event seen */
  const char *journal_id;    /* the journal last_event_id belongs to */
  int64_t revision;          /* the queued turn's revision (to withdraw it); 0: unknown */
} st_turn_ref;

/* Called once when the runtime accepted the prompt (its echo, or the merge into a queued turn), on a
 * worker: must not block. */
typedef void (*st_turn_accepted_fn)(const st_turn_ref *ref, void *payload);

/* Version 2 appended on_accepted; a version-1 struct is still accepted (without it). */
#define ST_TURN_OPTIONS_VERSION 2
typedef struct st_turn_options {
  unsigned int version;      /* ST_TURN_OPTIONS_VERSION */
  int64_t timeout_ms;        /* the whole turn; <= 0: 60 minutes */
  int reconnect;             /* nonzero: reconnect and resume after a dropped stream */
  int allow_commands;        /* nonzero: allow "!cmd" and "/goal" prompts (refused otherwise) */
  int64_t answer_timeout_ms; /* a question unanswered this long is declined; <= 0: 10 minutes */
  st_event_fn on_event;      /* every event of the turn, in order, on a worker; may be NULL */
  st_question_fn on_question;/* NULL: questions are declined at once */
  void *payload;             /* passed to on_event and on_question */
  st_cancel *cancel;         /* NULL or a cancel source that abandons the turn; must outlive it */
  const char *request_id;    /* NULL: a fresh random one (pin it for idempotent retries) */
  /* version >= 2 */
  st_turn_accepted_fn on_accepted; /* NULL or called once with the turn's place in the journal (with
                                      `payload`); never called by st_driver_attach_turn */
} st_turn_options;
#define ST_TURN_OPTIONS_INIT {ST_TURN_OPTIONS_VERSION, 3600000, 1, 0, 600000, NULL, NULL, NULL, NULL, NULL, NULL}

/* A finished turn (also when it failed or was interrupted: look at its status). The accessors are
 * non-blocking and may be called from any thread (also a callback); strings are borrowed from the
 * result, valid until st_turn_result_free. A NULL result gives NULL / ST_TURN_FAILED / a negative
 * number and sets the last error. */
typedef struct st_turn_result st_turn_result;
ST_API const char *st_turn_result_turn_id(const st_turn_result *result);
ST_API st_turn_status st_turn_result_status(const st_turn_result *result);
ST_API const char *st_turn_result_text(const st_turn_result *result);
ST_API const char *st_turn_result_error_message(const st_turn_result *result);
ST_API int st_turn_result_questions_declined(const st_turn_result *result);
ST_API int st_turn_result_questions_answered(const st_turn_result *result);
ST_API int st_turn_result_shared(const st_turn_result *result);
ST_API int st_turn_result_reconnects(const st_turn_result *result);
/* The message's requestId (the pinned st_turn_options.request_id, else the random one; for an
 * attached turn the one it was submitted with). */
ST_API const char *st_turn_result_request_id(const st_turn_result *result);
/* The journal cursor when the turn ended: the last event id seen (> 0 for a turn that ran), and the
 * journal it belongs to. Persist both to follow the Session on from there (st_watch_options). */
ST_API int64_t st_turn_result_last_event_id(const st_turn_result *result);
ST_API const char *st_turn_result_journal_id(const st_turn_result *result);
ST_API void st_turn_result_free(st_turn_result *result);

/* Submits `prompt` and blocks until the turn ends. Any thread except a worker (ST_E_WOULD_BLOCK).
 * `options` may be NULL (ST_TURN_OPTIONS_INIT). On ST_OK *out is the caller's. */
ST_API st_status st_driver_submit_turn(st_turn_result **out, st_driver *driver, const char *prompt,
                                       const st_turn_options *options);

/* Called exactly once when an async turn ends, on a worker. On success status is ST_OK, message is
 * "" and result is owned by the receiver (st_turn_result_free); otherwise result is NULL. */
typedef void (*st_turn_done_fn)(st_status status, const char *message, st_turn_result *result, void *payload);

/* Non-blocking. ST_OK: `done` will be called exactly once. An error return: it never will. */
ST_API st_status st_driver_submit_turn_async(st_driver *driver, const char *prompt, const st_turn_options *options,
                                             st_turn_done_fn done, void *done_payload);

/* Follows a turn that an earlier process submitted (after a restart, from what it persisted, e.g. the
 * st_turn_ref of on_accepted) and reports it as st_driver_submit_turn would, without sending the
 * prompt again: resumes at {last_event_id, journal_id} and finds the turn by `turn_id`, or by
 * `request_id` when turn_id is NULL or "". ST_E_NOT_FOUND when the journal after last_event_id shows
 * no such turn; ST_E_INVALID_ARGUMENT when both ids are NULL/"" or last_event_id < 0. `revision`
 * (0: unknown) lets an abandoned queued turn be withdrawn. `options` as for submit (timeout_ms bounds
 * the attachment from this call; on_accepted is not called). Blocks like st_driver_submit_turn: any
 * thread except a worker (ST_E_WOULD_BLOCK). On ST_OK *out is the caller's. */
ST_API st_status st_driver_attach_turn(st_turn_result **out, st_driver *driver, const char *request_id,
                                       const char *turn_id, int64_t last_event_id, const char *journal_id,
                                       int64_t revision, const st_turn_options *options);
/* The same without blocking; `done` as for st_driver_submit_turn_async (exactly once on ST_OK,
 * never on an error return). Any thread. */
ST_API st_status st_driver_attach_turn_async(st_driver *driver, const char *request_id, const char *turn_id,
                                             int64_t last_event_id, const char *journal_id, int64_t revision,
                                             const st_turn_options *options, st_turn_done_fn done,
                                             void *done_payload);

/* Stops whichever turn runs now (ST_E_REJECTED "Session has no active turn" otherwise). Blocks up
 * to timeout_ms (<= 0: 30 s). Not from a callback. */
ST_API st_status st_driver_interrupt(st_driver *driver, int64_t timeout_ms);

/* ---- Watch ------------------------------------------------------------------------------------- */

typedef struct st_watch st_watch;

#define ST_WATCH_OPTIONS_VERSION 1
typedef struct st_watch_options {
  unsigned int version;     /* ST_WATCH_OPTIONS_VERSION */
  int64_t since;            /* deliver events with id > since (0: the retained journal) */
  const char *journal_id;   /* the journal `since` belongs to; NULL when since == 0 */
  int reconnect;            /* nonzero: reconnect and resume */
  int history_bounds;       /* nonzero: a condensed page instead of the raw replay */
  int64_t history_items;
  int64_t history_bytes;
} st_watch_options;
#define ST_WATCH_OPTIONS_INIT {ST_WATCH_OPTIONS_VERSION, 0, NULL, 1, 0, 0, 0}

/* Called once when the watch ends: ST_OK after st_watch_stop, else why. On a worker. */
typedef void (*st_watch_end_fn)(st_status status, const char *message, void *payload);

/* Follows the Session's events. Non-blocking; `on_event` (required) and `on_end` (may be NULL) run
 * on a worker with `payload`, which must stay valid until st_watch_free returns. Free the watch
 * before its driver. */
ST_API st_status st_driver_watch(st_watch **out, st_driver *driver, const st_watch_options *options,
                                 st_event_fn on_event, st_watch_end_fn on_end, void *payload);
/* Stops delivering events and closes the connection. Idempotent. Not from a callback. */
ST_API st_status st_watch_stop(st_watch *watch);
/* 1 while active, 0 when ended, negative on error. */
ST_API int st_watch_active(const st_watch *watch);
/* The cursor: id of the last delivered event (negative on error) and its journal id (*out is the
 * caller's: st_string_free). */
ST_API int64_t st_watch_last_event_id(const st_watch *watch);
ST_API st_status st_watch_journal_id(char **out, const st_watch *watch);
/* Stops the watch if needed; after it returns no callback of this watch runs. Not from a callback. */
ST_API void st_watch_free(st_watch *watch);

/* ---- Kubernetes Sessions -------------------------------------------------------------------------- */

/* A cluster connection for one namespace: a kubeconfig (or the in-cluster configuration) and a REST
 * client. Thread-safe. Its calls block (HTTP), so not from a callback. */
typedef struct st_kube st_kube;

#define ST_KUBE_OPTIONS_VERSION 1
typedef struct st_kube_options {
  unsigned int version;       /* ST_KUBE_OPTIONS_VERSION */
  const char *kubeconfig;     /* NULL: $KUBECONFIG, else ~/.kube/config, else in-cluster */
  const char *context;        /* NULL: the current-context */
  const char *namespace_name; /* NULL: the context's namespace, else "default" */
} st_kube_options;
#define ST_KUBE_OPTIONS_INIT {ST_KUBE_OPTIONS_VERSION, NULL, NULL, NULL}

/* Reads the configuration (files, no cluster I/O). `options` may be NULL. */
ST_API st_status st_kube_new(st_kube **out, const st_kube_options *options);
/* The namespace every st_session_* call of this handle uses; borrowed. */
ST_API const char *st_kube_namespace(const st_kube *kube);
/* Free drivers made from it first. */
ST_API void st_kube_free(st_kube *kube);

/* A snapshot of Sessions. Strings are borrowed from the list; index out of range gives NULL. */
typedef struct st_session_list st_session_list;
/* Lists the namespace's Sessions (label_selector may be NULL). Blocks. */
ST_API st_status st_session_list_new(st_session_list **out, st_kube *kube, const char *label_selector);
ST_API size_t st_session_list_count(const st_session_list *list);
ST_API const char *st_session_list_name(const st_session_list *list, size_t index);
ST_API const char *st_session_list_phase(const st_session_list *list, size_t index);    /* Pending, Ready, ... */
ST_API const char *st_session_list_pod_name(const st_session_list *list, size_t index); /* "" until Ready */
ST_API const char *st_session_list_message(const st_session_list *list, size_t index);
ST_API void st_session_list_free(st_session_list *list);

/* spec.suspend true / removed. Block (HTTP, retried on 409). */
ST_API st_status st_session_suspend(st_kube *kube, const char *name);
ST_API st_status st_session_resume(st_kube *kube, const char *name);
/* Waits until the Session is Ready with a Pod (requesting a resume when its idle policy suspended it
 * and resume_idle is nonzero). ST_E_FAILED (phase Failed), ST_E_UNAVAILABLE (suspended by its owner),
 * ST_E_TIMEOUT. `*pod_name` (may be NULL) is the caller's: st_string_free. Blocks up to timeout_ms
 * (<= 0: 10 minutes). */
ST_API st_status st_session_wait_ready(char **pod_name, st_kube *kube, const char *name, int64_t timeout_ms,
                                       int resume_idle);
/* Waits until the Session is Ready (as above, resuming an idle one) and makes a driver that reaches
 * its runtime through the Pod's exec subresource. Blocks up to wait_timeout_ms. The context and the
 * kube handle must outlive the driver. */
ST_API st_status st_driver_new_session(st_driver **out, st_context *context, st_kube *kube, const char *name,
                                       int64_t wait_timeout_ms);

/* ---- Local runtime (testing) ------------------------------------------------------------------- */

typedef struct st_local_runtime st_local_runtime;

#define ST_LOCAL_RUNTIME_OPTIONS_VERSION 1
typedef struct st_local_runtime_options {
  unsigned int version;     /* ST_LOCAL_RUNTIME_OPTIONS_VERSION */
  const char *socket_path;  /* required */
  const char *state_dir;    /* NULL: in-memory journal */
  const char *provider;     /* NULL: "echo"; "script:FILE", "command:CMD" */
  int allow_shell;          /* nonzero: run "!" commands */
  const char *session_name; /* NULL: "local" */
  int64_t echo_delay_ms;    /* pause between the echo provider's deltas; < 0: default (20 ms) */
} st_local_runtime_options;
#define ST_LOCAL_RUNTIME_OPTIONS_INIT {ST_LOCAL_RUNTIME_OPTIONS_VERSION, NULL, NULL, NULL, 0, NULL, -1}

/* Starts an in-process runtime serving `socket_path` (blocks until it listens). */
ST_API st_status st_local_runtime_start(st_local_runtime **out, const st_local_runtime_options *options);
/* Borrowed from the handle. */
ST_API const char *st_local_runtime_socket_path(const st_local_runtime *runtime);
/* The runtime's journal id (*out is the caller's: st_string_free) and its last journaled event id
 * (negative on error). Any thread, non-blocking. */
ST_API st_status st_local_runtime_journal_id(char **out, const st_local_runtime *runtime);
ST_API int64_t st_local_runtime_last_event_id(const st_local_runtime *runtime);
/* Closes every connection and removes the socket; blocks until stopped. Idempotent. */
ST_API st_status st_local_runtime_stop(st_local_runtime *runtime);
ST_API void st_local_runtime_free(st_local_runtime *runtime);

#ifdef __cplusplus
}
#endif

#endif /* SESSIONTURN_H */
