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
#define ST_VERSION_MINOR 2
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

/* The version of the library actually loaded; any out pointer may be NULL. Returns "1.2.0". */
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
#define ST_EVENT_VERSION 2
struct st_question;
struct st_runtime_status;
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
  /* version >= 2 */
  int64_t revision;          /* a queued turn's revision (turn.queued/.updated), else 0 */
  const char *journal_id;    /* history.start/.end and reset events */
  int64_t first_event_id;    /* history.start/.end: the retained range */
  int64_t last_event_id;
  int session_command;       /* nonzero: the prompt was a runtime command ("!" shell, "/goal") */
  const struct st_question *questions; /* input.requested: its questions (NULL when none) */
  size_t question_count;
  const struct st_runtime_status *runtime; /* runtime.status: what it reported; NULL otherwise */
  const char *timestamp;     /* RFC 3339, as the runtime wrote it */
} st_event;

typedef void (*st_event_fn)(const st_event *event, void *payload);

/* What a runtime.status event reported (st_event.runtime). Token counts are -1 when the runtime
 * reported no usage. */
typedef struct st_runtime_status {
  const char *session_name;
  const char *agent_type;
  const char *model;
  const char *working_dir;
  const char *branch;
  int64_t input_tokens;
  int64_t output_tokens;
  int64_t total_tokens;
  int64_t context_tokens;
  int64_t context_window;
} st_runtime_status;

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

/* Version 2 appended on_accepted, version 3 the reconnect policy and the abandon grace; an older
 * struct is still accepted (the fields it lacks take their defaults). */
#define ST_TURN_OPTIONS_VERSION 3
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
  /* version >= 3 (each <= 0 takes the default): the reconnect policy, used when `reconnect` is nonzero,
   * the handshake bound of every connection (the first too), and the abandon grace */
  int reconnect_max_attempts;            /* consecutive failed attempts before ST_E_CONNECTION_LOST; 5 */
  int64_t reconnect_initial_backoff_ms;  /* doubled after each failed attempt; 100 */
  int64_t reconnect_max_backoff_ms;      /* 5000 */
  int64_t handshake_timeout_ms;          /* a (re)connected stream must finish its replay within; 30000 */
  int64_t abandon_grace_ms;              /* how long an abandoned turn may take to withdraw; 5000 */
} st_turn_options;
#define ST_TURN_OPTIONS_INIT \
  {ST_TURN_OPTIONS_VERSION, 3600000, 1, 0, 600000, NULL, NULL, NULL, NULL, NULL, NULL, 5, 100, 5000, 30000, 5000}

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
/* Milliseconds from the call to the runtime accepting the prompt, to the turn starting, to its end;
 * -1 when that never happened (a turn that failed before it was accepted); INT64_MIN for a NULL
 * result (the last error says so). */
ST_API int64_t st_turn_result_time_to_accepted_ms(const st_turn_result *result);
ST_API int64_t st_turn_result_time_to_started_ms(const st_turn_result *result);
ST_API int64_t st_turn_result_time_to_completed_ms(const st_turn_result *result);
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

/* Called exactly once when an async one-shot request ends, on a worker: ST_OK and "", or why not. */
typedef void (*st_done_fn)(st_status status, const char *message, void *payload);

/* st_driver_interrupt without blocking: ST_OK means `done` will be called exactly once (an error
 * return: never), within timeout_ms, also after st_driver_free (the request is not the driver's: keep
 * `payload` until `done` ran); never when the context is freed first. Any thread, also a callback. */
ST_API st_status st_driver_interrupt_async(st_driver *driver, int64_t timeout_ms, st_done_fn done, void *payload);

/* Answers / declines an open question by its input id (an st_event "input.requested" seen by a watch,
 * or one another process surfaced), on a connection of its own: the way to answer a question that
 * no responder of this process holds. ST_E_REJECTED when the runtime has no such open question. Block
 * up to timeout_ms (<= 0: 30 s); not from a callback (ST_E_WOULD_BLOCK). */
ST_API st_status st_driver_answer(st_driver *driver, const char *input_id, const st_answer *answers,
                                  size_t answer_count, int64_t timeout_ms);
ST_API st_status st_driver_decline(st_driver *driver, const char *input_id, int64_t timeout_ms);

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

/* ---- Session backends ----------------------------------------------------------------------------- */

/* Where a router's Sessions live: this machine (one runtime process per Session, state on disk) or a
 * cluster. docs/backends.md. Thread-safe; free it after every router made from it, before its context. */
typedef struct st_backend st_backend;

#define ST_LOCAL_BACKEND_OPTIONS_VERSION 1
typedef struct st_local_backend_options {
  unsigned int version;        /* ST_LOCAL_BACKEND_OPTIONS_VERSION */
  const char *state_dir;       /* NULL: $XDG_STATE_HOME/sessionturn, else ~/.local/state/sessionturn */
  const char *provider;        /* NULL: "echo"; "script:FILE", "command:CMD", "claude-code[:...]" */
  const char *agent_bin;       /* claude-code's program; NULL: "claude" on PATH */
  int64_t idle_suspend_ms;     /* suspend a Session idle this long; 0: never; < 0: 30 minutes */
  int64_t delete_after_ms;     /* delete a Session suspended this long; <= 0: never */
  const char *owner;           /* the owner label put on and checked on Sessions; NULL: none */
  const char *runtime_program; /* NULL: sessionturn-local-runtime next to the executable, else on PATH */
  int in_process;              /* nonzero: host the runtimes in this process (tests, benchmarks) */
  int allow_shell;             /* nonzero: "!" prompts run a shell in the Session's workspace */
  int64_t start_timeout_ms;    /* a starting runtime must listen within; <= 0: 10 s */
} st_local_backend_options;
#define ST_LOCAL_BACKEND_OPTIONS_INIT {ST_LOCAL_BACKEND_OPTIONS_VERSION, NULL, NULL, NULL, -1, 0, NULL, NULL, 0, 0, 0}

#define ST_KUBERNETES_BACKEND_OPTIONS_VERSION 1
typedef struct st_kubernetes_backend_options {
  unsigned int version;       /* ST_KUBERNETES_BACKEND_OPTIONS_VERSION */
  const char *kubeconfig;     /* NULL: $KUBECONFIG, else ~/.kube/config, else in-cluster */
  const char *context;        /* NULL: the current-context */
  const char *namespace_name; /* NULL: the context's namespace, else "default" */
  const char *spawner;        /* a SessionSpawner whose template makes new Sessions, or NULL */
  const char *template_file;  /* a Session template (YAML or JSON), or NULL; not both */
  const char *owner;          /* with template_file: the owner label of created Sessions */
} st_kubernetes_backend_options;
#define ST_KUBERNETES_BACKEND_OPTIONS_INIT {ST_KUBERNETES_BACKEND_OPTIONS_VERSION, NULL, NULL, NULL, NULL, NULL, NULL}

/* `options` may be NULL (the defaults). Blocks briefly (creates the state root / reads the
 * kubeconfig, which may run an exec credential plugin); not from a callback. The context must outlive
 * the backend. */
ST_API st_status st_backend_new_local(st_backend **out, st_context *context, const st_local_backend_options *options);
ST_API st_status st_backend_new_kubernetes(st_backend **out, st_context *context,
                                           const st_kubernetes_backend_options *options);
/* "local (/home/u/.local/state/sessionturn)", "kubernetes (namespace agents, spawner chat)". *out is
 * the caller's: st_string_free. */
ST_API st_status st_backend_describe(char **out, const st_backend *backend);
/* Operations in flight end with ST_E_CANCELLED. Not from a callback. NULL is a no-op. */
ST_API void st_backend_free(st_backend *backend);

/* ---- Chat model ------------------------------------------------------------------------------------ */

/* Where a conversation happens: every string non-NULL ("" when the platform has none). */
typedef struct st_thread_ref {
  const char *platform;  /* "slack", "telegram", "terminal", ... */
  const char *workspace; /* Slack team id; "" */
  const char *chat;      /* channel / chat id */
  const char *thread;    /* Slack thread_ts, Telegram forum topic; "" when the chat has no threads */
} st_thread_ref;

/* A button on a message the router sends; buttons with the same `row` form one row, rows in order. */
typedef struct st_button {
  const char *label;
  const char *data; /* opaque; hand it back in st_inbound_action.data when pressed */
  size_t row;
} st_button;

/* A message the router sends, already rendered in the adapter's dialect and within its limit.
 * Borrowed for the callback: copy what you keep. */
#define ST_OUTBOUND_MESSAGE_VERSION 1
typedef struct st_outbound_message {
  unsigned int version;
  const char *text;
  const st_button *buttons; /* NULL when none */
  size_t button_count;
  const char *reply_to;     /* a message id to reply to; "" */
} st_outbound_message;

enum { ST_UNIT_BYTES = 0, ST_UNIT_CODE_POINTS = 1, ST_UNIT_UTF16 = 2 };
enum { ST_DIALECT_PLAIN = 0, ST_DIALECT_TELEGRAM_HTML = 1, ST_DIALECT_SLACK_MRKDWN = 2 };

/* What a platform can do (docs/routing.md); the router adapts to it. */
#define ST_CAPABILITIES_VERSION 1
typedef struct st_capabilities {
  unsigned int version;
  size_t max_length;        /* one message's limit in `unit`, >= 32 */
  int unit;                 /* ST_UNIT_* */
  size_t soft_length;       /* preferred part length; 0: max_length, else >= 32 */
  int dialect;              /* ST_DIALECT_* */
  int edits_per_interval;   /* edits the platform accepts per chat per interval, >= 1 */
  int64_t edit_interval_ms;  /* >= 0; 0: no pacing */
  int buttons;              /* nonzero: messages can carry buttons */
  size_t button_data_limit; /* bytes */
  int threads;              /* nonzero: messages can be in threads */
  int typing;               /* nonzero: the adapter's typing callback shows something */
  const char *command_prefix; /* "/" (Telegram) or "" (the command word after the mention); copied */
} st_capabilities;
#define ST_CAPABILITIES_INIT {ST_CAPABILITIES_VERSION, 4096, ST_UNIT_UTF16, 0, ST_DIALECT_PLAIN, 1, 1000, 0, 64, 0, 0, ""}

/* ---- Adapters written in C ------------------------------------------------------------------------- */

/* The completion of one adapter call. The adapter finishes it exactly once, from any thread, now or
 * later, with st_completion_ok or st_completion_fail; that call frees it (also when it returns an
 * error). Never finishing it leaks it and, after the router's adapter_timeout_ms, the router treats
 * the call as failed (ST_E_TIMEOUT); a completion finished after that, or after the router was freed,
 * is accepted and ignored. */
typedef struct st_completion st_completion;

/* `message_id`: the id of the message a post created (required for a post, ignored otherwise).
 * ST_E_INVALID_ARGUMENT when a post's id is NULL or empty (the router then sees the post failed). */
ST_API st_status st_completion_ok(st_completion *completion, const char *message_id);
/* The platform refused or failed: `status` is the ST_E_* that says how (ST_E_UNAVAILABLE with
 * retry_after_ms for a rate limit, ST_E_NOT_FOUND for a message that is gone, ST_E_FORBIDDEN,
 * ST_E_TOO_LARGE, ...); `message` (may be NULL) is copied into the router's logs. */
ST_API st_status st_completion_fail(st_completion *completion, st_status status, const char *message,
                                    int64_t retry_after_ms);

/* A platform written in C. Every callback runs on a worker of the router's context and must not
 * block: start the platform call, return, and finish `done` when it completes. Views are borrowed
 * for the call. `userdata` is passed last to every callback and must stay valid until
 * st_router_free returns. */
#define ST_ADAPTER_VERSION 1
typedef struct st_adapter {
  unsigned int version; /* ST_ADAPTER_VERSION */
  /* Posts into `where`; finish `done` with the new message's id. Required. */
  void (*post)(const st_thread_ref *where, const st_outbound_message *message, st_completion *done,
               void *userdata);
  /* Replaces the text (and buttons) of message `message_id`. Required. */
  void (*edit)(const st_thread_ref *where, const char *message_id, const st_outbound_message *message,
               st_completion *done, void *userdata);
  /* Shows "typing..."; NULL when the platform has none. */
  void (*typing)(const st_thread_ref *where, st_completion *done, void *userdata);
  /* Fills `capabilities` (initialised with ST_CAPABILITIES_INIT); called once, in st_router_new.
   * Write only the fields that capabilities->version declares (a library older than your header has a
   * shorter struct). NULL: the defaults (plain text, 4096 UTF-16 units, no buttons, no threads). */
  void (*capabilities)(st_capabilities *capabilities, void *userdata);
  void *userdata;
} st_adapter;

/* ---- Router ---------------------------------------------------------------------------------------- */

/* Chat threads as persistent conversations with Sessions (docs/routing.md). Thread-safe. */
typedef struct st_router st_router;

/* Who may talk to the Sessions. Lists are arrays of `count` non-NULL strings (NULL when count is 0).
 * `session_*` are "key=value" strings: the labels, annotations and backend parameters (local:
 * "provider=...", "workdir=...") of the Sessions this route creates. */
#define ST_ROUTE_VERSION 1
typedef struct st_route {
  unsigned int version; /* ST_ROUTE_VERSION */
  const char *name;     /* for logs and errors; NULL: "route-<i>" */
  const char *platform; /* NULL: any */
  const char *const *chats;        size_t chat_count;    /* allowed chat ids; none: any */
  const char *const *users;        size_t user_count;    /* allowed author ids; none: any */
  int require_mention;             /* -1: in group chats, not in private chats; 0: never; 1: always */
  const char *const *triggers;     size_t trigger_count; /* ECMAScript regexes; when set one must match */
  const char *const *excludes;     size_t exclude_count; /* ECMAScript regexes; a match drops the message */
  int allow_bots;                  /* other bots' messages (the bot's own are always ignored) */
  const char *const *allowed_bots; size_t allowed_bot_count;
  const char *const *admins;       size_t admin_count;   /* may run `delete` */
  const char *const *session_labels;      size_t session_label_count;
  const char *const *session_annotations; size_t session_annotation_count;
  const char *const *session_parameters;  size_t session_parameter_count;
} st_route;
#define ST_ROUTE_INIT \
  {ST_ROUTE_VERSION, NULL, NULL, NULL, 0, NULL, 0, -1, NULL, 0, NULL, 0, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0}

enum { ST_ANSWERERS_TURN_AUTHOR = 0, ST_ANSWERERS_ALLOWED_USERS = 1 };

/* The router's configuration (docs/routing.md has what each does). Durations <= 0 take the default. */
#define ST_ROUTER_OPTIONS_VERSION 1
typedef struct st_router_options {
  unsigned int version;      /* ST_ROUTER_OPTIONS_VERSION */
  const char *session_prefix; /* NULL: "chat" */
  const char *owner_uid;      /* names the bot in Session names; NULL: "" */
  const st_route *routes;     /* at least one; the first that matches a message handles it */
  size_t route_count;
  const char *store_path;     /* the SQLite store; NULL: $XDG_STATE_HOME/sessionturn/router.db (else
                                 ~/.local/state/...), whatever the backend's state_dir: set it per bot */
  size_t max_queued;          /* waiting turns per Session; 8 */
  size_t max_in_flight;       /* turns running across Sessions; 64 */
  int64_t progress_interval_ms;  /* 1000 */
  int64_t turn_timeout_ms;       /* 60 minutes */
  int64_t wait_ready_timeout_ms; /* 10 minutes */
  int64_t answer_timeout_ms;     /* 10 minutes */
  int answerers;                 /* ST_ANSWERERS_* */
  int decline_questions;         /* nonzero: decline the agent's questions instead of asking the chat */
  size_t thread_context_messages; /* earlier messages the first turn of a thread carries; 20 */
  int show_usage;                /* a token-usage footer; 1 */
  const char *bot_username;      /* for "/cmd@bot"; NULL: "" */
  int64_t shutdown_budget_ms;    /* 10 s */
  int delivery_attempts;         /* per reply part before the thread is told; 3 */
  int64_t adapter_timeout_ms;    /* an adapter call not completed within fails (ST_E_TIMEOUT); 60 s */
} st_router_options;
#define ST_ROUTER_OPTIONS_INIT \
  {ST_ROUTER_OPTIONS_VERSION, NULL, NULL, NULL, 0, NULL, 8, 64, 1000, 3600000, 600000, 600000, \
   ST_ANSWERERS_TURN_AUTHOR, 0, 20, 1, NULL, 10000, 3, 60000}

enum { ST_MESSAGE_NEW = 0, ST_MESSAGE_EDITED = 1, ST_MESSAGE_DELETED = 2 };

/* A message the platform delivered (verified and parsed by the bot). NULL strings are "". Copied by
 * st_router_handle_message. */
#define ST_INBOUND_MESSAGE_VERSION 1
typedef struct st_inbound_message {
  unsigned int version; /* ST_INBOUND_MESSAGE_VERSION */
  const char *platform;            /* required */
  const char *workspace;
  const char *chat;                /* required */
  const char *thread;
  const char *message_id;          /* required */
  const char *reply_to_message_id;
  const char *author_id;
  const char *author_name;
  const char *text;                /* with the bot's own mention removed */
  const char *const *attachments_text;
  size_t attachment_count;
  int is_bot;
  int is_self;
  int mentions_bot;
  int is_private_chat;
  const char *event_id;            /* the platform's delivery id, for dedupe */
  int kind;                        /* ST_MESSAGE_* */
} st_inbound_message;
#define ST_INBOUND_MESSAGE_INIT \
  {ST_INBOUND_MESSAGE_VERSION, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, NULL, \
   ST_MESSAGE_NEW}

/* Acknowledges a button press on the platform; `text` ("" or a note for the presser) is borrowed
 * for the call. Called at most once, on a worker or in st_router_handle_action. */
typedef void (*st_ack_fn)(const char *text, void *payload);

/* A button press on one of the router's messages. NULL strings are "". Copied. */
#define ST_INBOUND_ACTION_VERSION 1
typedef struct st_inbound_action {
  unsigned int version; /* ST_INBOUND_ACTION_VERSION */
  const char *platform;
  const char *workspace;
  const char *chat;
  const char *thread;
  const char *message_id; /* the message that carried the button */
  const char *author_id;
  const char *author_name;
  const char *data;       /* the button's data */
  const char *event_id;
  st_ack_fn ack;          /* may be NULL */
  void *ack_payload;
} st_inbound_action;
#define ST_INBOUND_ACTION_INIT {ST_INBOUND_ACTION_VERSION, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL}

/* What the router did with a message. */
typedef enum st_disposition {
  ST_DISPOSITION_ACCEPTED = 0,  /* queued for its Session (or answered a question, or ran a command) */
  ST_DISPOSITION_DUPLICATE = 1, /* a redelivery of one already handled */
  ST_DISPOSITION_IGNORED = 2,   /* no route takes it: nothing was sent */
  ST_DISPOSITION_REFUSED = 3    /* a route took it but turned it away (queue full): the thread was told */
} st_disposition;
/* "accepted", "duplicate", "ignored", "refused"; "unknown" otherwise. Static storage. */
ST_API const char *st_disposition_name(int disposition);

/* Opens the store and compiles the routes; the adapter's capabilities are read now. ST_E_INVALID_ARGUMENT
 * names an unusable option (no routes, a bad regex, a bad key=value); ST_E_CONFLICT when another router
 * holds the store; ST_E_IO_ERROR. `options` is required (routes). Blocks briefly; not from a callback.
 * The backend (and its context) must outlive the router. */
ST_API st_status st_router_new(st_router **out, st_backend *backend, const st_adapter *adapter,
                               const st_router_options *options);
/* Picks up where the last run stopped (turns in flight, queued messages, open questions, undelivered
 * replies). Call once. Non-blocking. */
ST_API st_status st_router_start(st_router *router);

/* Called once when the router has the message: ST_OK and the disposition, or why not (ST_E_UNAVAILABLE
 * while stopping: do not acknowledge the delivery, the platform will redeliver). On a worker. */
typedef void (*st_disposition_fn)(st_status status, int disposition, const char *message, void *payload);

/* Takes a message. Non-blocking: `done` (may be NULL) is called exactly once on ST_OK, never on an
 * error return; acknowledge the platform's delivery then. Any thread. */
ST_API st_status st_router_handle_message(st_router *router, const st_inbound_message *message,
                                          st_disposition_fn done, void *payload);
/* The same, blocking until the router has the message (up to timeout_ms; <= 0: 60 s; ST_E_TIMEOUT
 * after it, and the message may still be taken). *disposition (may be NULL) gets ST_DISPOSITION_*.
 * Not from a callback (ST_E_WOULD_BLOCK). */
ST_API st_status st_router_handle_message_wait(int *disposition, st_router *router,
                                               const st_inbound_message *message, int64_t timeout_ms);
/* A button press; acknowledged through action->ack. Non-blocking, any thread. */
ST_API st_status st_router_handle_action(st_router *router, const st_inbound_action *action);

/* Stops accepting, tells every thread with a running or queued turn that the bot is restarting (the
 * turns keep running in their Sessions; their replies come after the restart) and returns when the
 * notices went out: ST_OK, or ST_E_TIMEOUT when timeout_ms (<= 0: the shutdown budget + 5 s) passed
 * first. Then free the router. Not from a callback (ST_E_WOULD_BLOCK). */
ST_API st_status st_router_stop(st_router *router, int64_t timeout_ms);

#define ST_ROUTER_STATS_VERSION 1
typedef struct st_router_stats {
  unsigned int version; /* set by the caller: ST_ROUTER_STATS_VERSION; fields up to it are filled */
  size_t sessions;
  size_t turns_in_flight;
  size_t turns_waiting;
  size_t open_questions;
  size_t outbox;                /* reply parts not delivered yet */
  uint64_t turns_completed;
  uint64_t replies_delivered;
  uint64_t messages_accepted;
  uint64_t edits_sent;
  uint64_t edits_dropped;
} st_router_stats;
#define ST_ROUTER_STATS_INIT {ST_ROUTER_STATS_VERSION, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
/* Fills `stats`. Any thread; takes a lock briefly. */
ST_API st_status st_router_stats_get(const st_router *router, st_router_stats *stats);

/* Destroys the router (waiting up to 5 s for work on its strand) and releases its store. After it
 * returns no adapter callback starts or runs; completions still out are accepted and ignored. A
 * disposition `done` or an `ack` already on its way may still run (keep their payloads until they
 * did). Not from a callback. NULL is a no-op. */
ST_API void st_router_free(st_router *router);

/* ---- Helpers (pure, any thread) -------------------------------------------------------------------- */

/* The Session name of a chat thread: <prefix>-<platform>-<12 hex of SHA-256("prefix:owner:chat:thread")>
 * (docs/routing-rules.md). `thread` may be NULL. *out is the caller's: st_string_free. */
ST_API st_status st_session_name(char **out, const char *prefix, const char *platform, const char *owner_uid,
                                 const char *chat, const char *thread);

/* Parts of a rendered or split text. Strings are borrowed from the handle. */
typedef struct st_parts st_parts;
ST_API size_t st_parts_count(const st_parts *parts);
ST_API const char *st_parts_text(const st_parts *parts, size_t index); /* NULL out of range */
ST_API void st_parts_free(st_parts *parts);

#define ST_RENDER_OPTIONS_VERSION 1
typedef struct st_render_options {
  unsigned int version; /* ST_RENDER_OPTIONS_VERSION */
  int dialect;          /* ST_DIALECT_* */
  size_t max_length;    /* each part's limit in `unit`, label included; >= 32 */
  int unit;             /* ST_UNIT_* */
  size_t soft_length;   /* preferred part length; 0: max_length */
  int label_parts;      /* nonzero: "(i/N)" on each part when there are several */
} st_render_options;
#define ST_RENDER_OPTIONS_INIT {ST_RENDER_OPTIONS_VERSION, ST_DIALECT_PLAIN, 4096, ST_UNIT_UTF16, 0, 1}

/* GitHub-flavoured Markdown rendered in a dialect and split into parts within max_length, as the router
 * sends replies (docs/rendering.md). `options` may be NULL (plain, 4096 UTF-16 units). */
ST_API st_status st_render(st_parts **out, const char *markdown, const st_render_options *options);
/* Plain text (no Markdown) split into parts of at most `limit` (>= 32) units, at paragraph, then line,
 * then word boundaries, never inside a UTF-8 sequence; labelled "(i/N)" when label_parts is nonzero.
 * The whitespace at a cut goes, and so does whitespace that would start a part (the text's too). */
ST_API st_status st_split(st_parts **out, const char *text, size_t limit, int unit, int label_parts);

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
