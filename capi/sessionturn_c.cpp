// The C ABI over the C++ API. Every exported function body runs through Guard(), the one exception
// firewall: it catches everything, records the thread-local last error and returns a status, so no
// C++ exception, STL type or allocator ever crosses extern "C". The opaque handles are defined here
// as structs holding the real C++ objects.
#include "sessionturn.h"

#include "capi_internal.hpp"
#include "capi_views.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "sessionturn/context.hpp"
#include "sessionturn/driver.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/protocol.hpp"

using namespace sessionturn::capi;  // NOLINT: the firewall helpers

// ---- Handles ---------------------------------------------------------------------------------------

struct st_cancel {
  st::CancellationSource source;
};

struct st_turn_result {
  st::TurnResult result;
};

struct st_responder {
  st::Responder responder;
  std::string input_id;
};

LastError& sessionturn::capi::ThreadLastError() {
  thread_local LastError last;
  return last;
}

namespace {

// The ref's strings outlive the view: they belong to the tracker's copy for the call.
struct TurnRefView {
  st_turn_ref view{};

  explicit TurnRefView(const st::TurnRef& ref) {
    view.version = ST_TURN_REF_VERSION;
    view.request_id = ref.request_id.c_str();
    view.turn_id = ref.turn_id.c_str();
    view.last_event_id = ref.last_event_id;
    view.journal_id = ref.journal_id.c_str();
    view.revision = ref.revision;
  }
};

// Builds the C++ turn options from the C struct (NULL = defaults).
st::Result<st::TurnOptions> MakeTurnOptions(st_driver* driver, const st_turn_options* in) {
  st::TurnOptions out;
  if (!in) return out;
  if (auto ok = CheckVersion(in->version, ST_TURN_OPTIONS_VERSION, "st_turn_options"); !ok) return st::Fail(ok.error());
  out.timeout = OrDefault(in->timeout_ms, st::kDefaultTurnTimeout);
  out.reconnect.enabled = in->reconnect != 0;
  out.allow_commands = in->allow_commands != 0;
  out.answer_timeout = OrDefault(in->answer_timeout_ms, st::kDefaultAnswerTimeout);
  if (in->cancel) out.cancel = in->cancel->source.Token();
  if (in->request_id) out.request_id = in->request_id;
  st::Context* context = driver->context;
  if (in->on_event) {
    st_event_fn fn = in->on_event;
    void* payload = in->payload;
    out.on_event = [fn, payload, context](const st::Event& e) {
      CallUser(context, "on_event", [&] {
        EventView view(e);
        fn(&view.view, payload);
      });
    };
  }
  if (in->on_question) {
    st_question_fn fn = in->on_question;
    void* payload = in->payload;
    out.questions = st::QuestionPolicy::ask;
    out.on_question = [fn, payload, context](const st::Event& e, st::Responder responder) {
      CallUser(context, "on_question", [&] {
        QuestionView view(e);
        auto* handle = new st_responder{responder, e.input_id};
        fn(&view.view, handle, payload);
      });
    };
  }
  // Version 3 appended the reconnect policy and the abandon grace: an older struct ends before them.
  if (in->version >= 3) {
    if (in->reconnect_max_attempts > 0) out.reconnect.max_attempts = in->reconnect_max_attempts;
    out.reconnect.initial_backoff = OrDefault(in->reconnect_initial_backoff_ms, out.reconnect.initial_backoff);
    out.reconnect.max_backoff = OrDefault(in->reconnect_max_backoff_ms, out.reconnect.max_backoff);
    out.reconnect.handshake_timeout = OrDefault(in->handshake_timeout_ms, out.reconnect.handshake_timeout);
    out.abandon_grace = OrDefault(in->abandon_grace_ms, out.abandon_grace);
  }
  // on_accepted was appended in version 2: a version-1 struct ends before it.
  if (in->version >= 2 && in->on_accepted) {
    st_turn_accepted_fn fn = in->on_accepted;
    void* payload = in->payload;
    out.on_accepted = [fn, payload, context](const st::TurnRef& ref) {
      CallUser(context, "on_accepted", [&] {
        TurnRefView view(ref);
        fn(&view.view, payload);
      });
    };
  }
  return out;
}

st::Status CheckPrompt(const char* prompt) {
  if (!prompt) return st::Fail(st::Errc::invalid_argument, "prompt is NULL");
  return {};
}

// The C++ ref from st_driver_attach_turn's arguments (NULL strings are empty; the C++ driver
// validates the rest: an id is needed, the cursor must not be negative).
st::TurnRef MakeTurnRef(const char* request_id, const char* turn_id, int64_t last_event_id, const char* journal_id,
                        int64_t revision) {
  st::TurnRef ref;
  if (request_id) ref.request_id = request_id;
  if (turn_id) ref.turn_id = turn_id;
  ref.last_event_id = last_event_id;
  if (journal_id) ref.journal_id = journal_id;
  ref.revision = revision;
  return ref;
}

// Hands an async turn's outcome to the C completion callback.
st::TurnHandler MakeDoneHandler(st::Context* context, st_turn_done_fn done, void* done_payload) {
  return [done, done_payload, context](st::Result<st::TurnResult> r) {
    CallUser(context, "done", [&] {
      if (r) {
        done(ST_OK, "", new st_turn_result{std::move(*r)}, done_payload);
      } else {
        const st_status status = ToStatus(r.error().code);
        done(status == ST_OK ? ST_E_INTERNAL : status, r.error().message.c_str(), nullptr, done_payload);
      }
    });
  };
}

#define ST_STRINGIFY2(x) #x
#define ST_STRINGIFY(x) ST_STRINGIFY2(x)

}  // namespace

// ---- Version, errors, strings ------------------------------------------------------------------------

ST_API const char* st_version(int* major, int* minor, int* patch) {
  return Guard("st_version", static_cast<const char*>(nullptr), [&]() -> const char* {
    if (major) *major = ST_VERSION_MAJOR;
    if (minor) *minor = ST_VERSION_MINOR;
    if (patch) *patch = ST_VERSION_PATCH;
    return ST_STRINGIFY(ST_VERSION_MAJOR) "." ST_STRINGIFY(ST_VERSION_MINOR) "." ST_STRINGIFY(ST_VERSION_PATCH);
  });
}

ST_API const char* st_last_error(void) {
  return Guard("st_last_error", static_cast<const char*>(""),
               []() -> const char* { return ThreadLastError().message.c_str(); });
}

ST_API int st_last_error_http_status(void) {
  return Guard("st_last_error_http_status", 0, []() -> int { return ThreadLastError().http_status; });
}

ST_API const char* st_status_name(st_status status) {
  return Guard("st_status_name", static_cast<const char*>("unknown"), [&]() -> const char* {
    if (status == ST_OK) return "ok";
    if (status < 0 && status >= ST_E_INTERNAL) {
      // ToString returns a view of a string literal, so its data is static and NUL-terminated.
      return st::ToString(static_cast<st::Errc>(-status)).data();
    }
    return "unknown";
  });
}

ST_API void st_string_free(char* string) {
  Guard("st_string_free", 0, [&] {
    std::free(string);
    return 0;
  });
}

// ---- Context -------------------------------------------------------------------------------------------

ST_API st_status st_context_new(st_context** out, const st_context_options* options) {
  return GuardStatus("st_context_new", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    st::ContextOptions opts;
    if (options) {
      if (auto ok = CheckVersion(options->version, ST_CONTEXT_OPTIONS_VERSION, "st_context_options"); !ok) return ok;
      if (options->threads < 1) {
        return st::Fail(InvalidArgument("st_context_options.threads must be >= 1, got " +
                                        std::to_string(options->threads)));
      }
      if (options->min_log_level < ST_LOG_DEBUG || options->min_log_level > ST_LOG_ERROR) {
        return st::Fail(InvalidArgument("st_context_options.min_log_level must be one of ST_LOG_*, got " +
                                        std::to_string(options->min_log_level)));
      }
      opts.threads = options->threads;
      opts.min_level = static_cast<st::LogLevel>(options->min_log_level);
      if (options->log) {
        st_log_fn fn = options->log;
        void* payload = options->log_payload;
        opts.log_sink = [fn, payload](st::LogLevel level, std::string_view message) {
          CallUser(nullptr, "log", [&] {
            std::string text(message);
            fn(static_cast<int>(level), text.c_str(), payload);
          });
        };
      }
    }
    auto handle = std::make_unique<st_context>();
    handle->context = std::make_unique<st::Context>(std::move(opts));
    *out = handle.release();
    return {};
  });
}

ST_API void st_context_free(st_context* context) {
  Guard("st_context_free", 0, [&] {
    delete context;
    return 0;
  });
}

// ---- Cancellation ----------------------------------------------------------------------------------------

ST_API st_status st_cancel_new(st_cancel** out) {
  return GuardStatus("st_cancel_new", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = new st_cancel();
    return {};
  });
}

ST_API st_status st_cancel_cancel(st_cancel* cancel) {
  return GuardStatus("st_cancel_cancel", [&]() -> st::Status {
    if (!cancel) return st::Fail(InvalidArgument("cancel is NULL"));
    cancel->source.Cancel();
    return {};
  });
}

ST_API int st_cancel_is_cancelled(const st_cancel* cancel) {
  return Guard("st_cancel_is_cancelled", static_cast<int>(ST_E_INTERNAL), [&]() -> int {
    if (!cancel) return Record(InvalidArgument("cancel is NULL"));
    return cancel->source.IsCancelled() ? 1 : 0;
  });
}

ST_API void st_cancel_free(st_cancel* cancel) {
  Guard("st_cancel_free", 0, [&] {
    delete cancel;
    return 0;
  });
}

// ---- Responder --------------------------------------------------------------------------------------------

namespace {

// The C answers as the C++ map (question id -> values), every pointer checked.
st::Result<std::map<std::string, std::vector<std::string>>> AnswersFrom(const st_answer* answers, size_t answer_count) {
  if (!answers && answer_count > 0) return st::Fail(InvalidArgument("answers is NULL but answer_count > 0"));
  std::map<std::string, std::vector<std::string>> map;
  for (size_t i = 0; i < answer_count; ++i) {
    const st_answer& a = answers[i];
    if (!a.question_id) return st::Fail(InvalidArgument("answers[" + std::to_string(i) + "].question_id is NULL"));
    if (!a.values && a.value_count > 0) {
      return st::Fail(InvalidArgument("answers[" + std::to_string(i) + "].values is NULL but value_count > 0"));
    }
    auto& values = map[a.question_id];
    for (size_t j = 0; j < a.value_count; ++j) {
      if (!a.values[j]) {
        return st::Fail(InvalidArgument("answers[" + std::to_string(i) + "].values[" + std::to_string(j) +
                                        "] is NULL"));
      }
      values.emplace_back(a.values[j]);
    }
  }
  return map;
}

}  // namespace

ST_API st_status st_responder_answer(st_responder* responder, const st_answer* answers, size_t answer_count) {
  return GuardStatus("st_responder_answer", [&]() -> st::Status {
    if (!responder) return st::Fail(InvalidArgument("responder is NULL"));
    auto map = AnswersFrom(answers, answer_count);
    if (!map) return st::Fail(map.error());
    if (!responder->responder.Answer(std::move(*map))) {
      return st::Fail(st::Errc::rejected, "question " + responder->input_id +
                                              " is no longer open: already answered or declined, or its turn ended");
    }
    return {};
  });
}

ST_API st_status st_responder_decline(st_responder* responder) {
  return GuardStatus("st_responder_decline", [&]() -> st::Status {
    if (!responder) return st::Fail(InvalidArgument("responder is NULL"));
    if (!responder->responder.Decline()) {
      return st::Fail(st::Errc::rejected, "question " + responder->input_id +
                                              " is no longer open: already answered or declined, or its turn ended");
    }
    return {};
  });
}

ST_API const char* st_responder_input_id(const st_responder* responder) {
  return Guard("st_responder_input_id", static_cast<const char*>(nullptr), [&]() -> const char* {
    if (!responder) {
      Record(InvalidArgument("responder is NULL"));
      return nullptr;
    }
    return responder->input_id.c_str();
  });
}

ST_API void st_responder_free(st_responder* responder) {
  Guard("st_responder_free", 0, [&] {
    delete responder;
    return 0;
  });
}

// ---- Driver --------------------------------------------------------------------------------------------------

ST_API st_status st_driver_new_unix(st_driver** out, st_context* context, const char* socket_path) {
  return GuardStatus("st_driver_new_unix", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (!context) return st::Fail(InvalidArgument("context is NULL"));
    if (!socket_path || !*socket_path) return st::Fail(InvalidArgument("socket_path is NULL or empty"));
    auto handle = std::make_unique<st_driver>();
    handle->context = context->context.get();
    handle->driver = std::make_unique<st::Driver>(*context->context, st::MakeUnixConnector(*context->context, socket_path));
    *out = handle.release();
    return {};
  });
}

ST_API st_status st_driver_new_exec(st_driver** out, st_context* context, const char* const* argv, size_t argc) {
  return GuardStatus("st_driver_new_exec", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (!context) return st::Fail(InvalidArgument("context is NULL"));
    if (!argv || argc == 0) return st::Fail(InvalidArgument("argv is NULL or empty"));
    std::vector<std::string> args;
    for (size_t i = 0; i < argc; ++i) {
      if (!argv[i]) return st::Fail(InvalidArgument("argv[" + std::to_string(i) + "] is NULL"));
      args.emplace_back(argv[i]);
    }
    if (args[0].empty()) return st::Fail(InvalidArgument("argv[0] is empty"));
    auto handle = std::make_unique<st_driver>();
    handle->context = context->context.get();
    handle->driver =
        std::make_unique<st::Driver>(*context->context, st::MakeProcessConnector(*context->context, std::move(args)));
    *out = handle.release();
    return {};
  });
}

ST_API void st_driver_free(st_driver* driver) {
  Guard("st_driver_free", 0, [&] {
    delete driver;
    return 0;
  });
}

ST_API const char* st_turn_status_name(int status) {
  return Guard("st_turn_status_name", static_cast<const char*>("unknown"), [&]() -> const char* {
    switch (status) {
      case ST_TURN_COMPLETED: return "completed";
      case ST_TURN_FAILED: return "failed";
      case ST_TURN_INTERRUPTED: return "interrupted";
      case ST_TURN_REMOVED: return "removed";
    }
    return "unknown";
  });
}

namespace {

st_turn_status ToCStatus(st::TurnStatus status) {
  switch (status) {
    case st::TurnStatus::completed: return ST_TURN_COMPLETED;
    case st::TurnStatus::failed: return ST_TURN_FAILED;
    case st::TurnStatus::interrupted: return ST_TURN_INTERRUPTED;
    case st::TurnStatus::removed: return ST_TURN_REMOVED;
  }
  return ST_TURN_FAILED;
}

// Accessors of a result: NULL handles yield a neutral value and set the last error.
template <typename R, typename Fn>
R ResultField(const char* name, const st_turn_result* result, R fallback, Fn&& fn) noexcept {
  return Guard(name, fallback, [&]() -> R {
    if (!result) {
      Record(InvalidArgument("result is NULL"));
      return fallback;
    }
    return fn(result->result);
  });
}

}  // namespace

ST_API const char* st_turn_result_turn_id(const st_turn_result* result) {
  return ResultField("st_turn_result_turn_id", result, static_cast<const char*>(nullptr),
                     [](const st::TurnResult& r) { return r.turn_id.c_str(); });
}
ST_API st_turn_status st_turn_result_status(const st_turn_result* result) {
  return ResultField("st_turn_result_status", result, ST_TURN_FAILED,
                     [](const st::TurnResult& r) { return ToCStatus(r.status); });
}
ST_API const char* st_turn_result_text(const st_turn_result* result) {
  return ResultField("st_turn_result_text", result, static_cast<const char*>(nullptr),
                     [](const st::TurnResult& r) { return r.text.c_str(); });
}
ST_API const char* st_turn_result_error_message(const st_turn_result* result) {
  return ResultField("st_turn_result_error_message", result, static_cast<const char*>(nullptr),
                     [](const st::TurnResult& r) { return r.error_message.c_str(); });
}
ST_API int st_turn_result_questions_declined(const st_turn_result* result) {
  return ResultField("st_turn_result_questions_declined", result, static_cast<int>(ST_E_INVALID_ARGUMENT),
                     [](const st::TurnResult& r) { return r.questions_declined; });
}
ST_API int st_turn_result_questions_answered(const st_turn_result* result) {
  return ResultField("st_turn_result_questions_answered", result, static_cast<int>(ST_E_INVALID_ARGUMENT),
                     [](const st::TurnResult& r) { return r.questions_answered; });
}
ST_API int st_turn_result_shared(const st_turn_result* result) {
  return ResultField("st_turn_result_shared", result, static_cast<int>(ST_E_INVALID_ARGUMENT),
                     [](const st::TurnResult& r) { return r.shared ? 1 : 0; });
}
ST_API int st_turn_result_reconnects(const st_turn_result* result) {
  return ResultField("st_turn_result_reconnects", result, static_cast<int>(ST_E_INVALID_ARGUMENT),
                     [](const st::TurnResult& r) { return r.reconnects; });
}
ST_API const char* st_turn_result_request_id(const st_turn_result* result) {
  return ResultField("st_turn_result_request_id", result, static_cast<const char*>(nullptr),
                     [](const st::TurnResult& r) { return r.request_id.c_str(); });
}
ST_API int64_t st_turn_result_last_event_id(const st_turn_result* result) {
  return ResultField("st_turn_result_last_event_id", result, static_cast<int64_t>(ST_E_INVALID_ARGUMENT),
                     [](const st::TurnResult& r) { return static_cast<int64_t>(r.last_event_id); });
}
ST_API const char* st_turn_result_journal_id(const st_turn_result* result) {
  return ResultField("st_turn_result_journal_id", result, static_cast<const char*>(nullptr),
                     [](const st::TurnResult& r) { return r.journal_id.c_str(); });
}
namespace {
int64_t MillisOr(const std::optional<std::chrono::milliseconds>& d) { return d ? static_cast<int64_t>(d->count()) : -1; }
}  // namespace

ST_API int64_t st_turn_result_time_to_accepted_ms(const st_turn_result* result) {
  return ResultField("st_turn_result_time_to_accepted_ms", result, std::numeric_limits<int64_t>::min(),
                     [](const st::TurnResult& r) { return MillisOr(r.time_to_accepted); });
}
ST_API int64_t st_turn_result_time_to_started_ms(const st_turn_result* result) {
  return ResultField("st_turn_result_time_to_started_ms", result, std::numeric_limits<int64_t>::min(),
                     [](const st::TurnResult& r) { return MillisOr(r.time_to_started); });
}
ST_API int64_t st_turn_result_time_to_completed_ms(const st_turn_result* result) {
  return ResultField("st_turn_result_time_to_completed_ms", result, std::numeric_limits<int64_t>::min(),
                     [](const st::TurnResult& r) { return MillisOr(r.time_to_completed); });
}
ST_API void st_turn_result_free(st_turn_result* result) {
  Guard("st_turn_result_free", 0, [&] {
    delete result;
    return 0;
  });
}

ST_API st_status st_driver_submit_turn(st_turn_result** out, st_driver* driver, const char* prompt,
                                       const st_turn_options* options) {
  return GuardStatus("st_driver_submit_turn", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (auto ok = CheckDriver(driver); !ok) return ok;
    if (auto ok = CheckPrompt(prompt); !ok) return ok;
    auto opts = MakeTurnOptions(driver, options);
    if (!opts) return st::Fail(opts.error());
    auto result = driver->driver->SubmitTurn(prompt, std::move(*opts));
    if (!result) return st::Fail(result.error());
    *out = new st_turn_result{std::move(*result)};
    return {};
  });
}

ST_API st_status st_driver_submit_turn_async(st_driver* driver, const char* prompt, const st_turn_options* options,
                                             st_turn_done_fn done, void* done_payload) {
  return GuardStatus("st_driver_submit_turn_async", [&]() -> st::Status {
    if (auto ok = CheckDriver(driver); !ok) return ok;
    if (auto ok = CheckPrompt(prompt); !ok) return ok;
    if (!done) return st::Fail(InvalidArgument("done is NULL"));
    auto opts = MakeTurnOptions(driver, options);
    if (!opts) return st::Fail(opts.error());
    driver->driver->AsyncSubmitTurn(prompt, std::move(*opts), MakeDoneHandler(driver->context, done, done_payload));
    return {};
  });
}

ST_API st_status st_driver_attach_turn(st_turn_result** out, st_driver* driver, const char* request_id,
                                       const char* turn_id, int64_t last_event_id, const char* journal_id,
                                       int64_t revision, const st_turn_options* options) {
  return GuardStatus("st_driver_attach_turn", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (auto ok = CheckDriver(driver); !ok) return ok;
    auto opts = MakeTurnOptions(driver, options);
    if (!opts) return st::Fail(opts.error());
    auto result = driver->driver->AttachTurn(MakeTurnRef(request_id, turn_id, last_event_id, journal_id, revision),
                                             std::move(*opts));
    if (!result) return st::Fail(result.error());
    *out = new st_turn_result{std::move(*result)};
    return {};
  });
}

ST_API st_status st_driver_attach_turn_async(st_driver* driver, const char* request_id, const char* turn_id,
                                             int64_t last_event_id, const char* journal_id, int64_t revision,
                                             const st_turn_options* options, st_turn_done_fn done,
                                             void* done_payload) {
  return GuardStatus("st_driver_attach_turn_async", [&]() -> st::Status {
    if (auto ok = CheckDriver(driver); !ok) return ok;
    if (!done) return st::Fail(InvalidArgument("done is NULL"));
    auto opts = MakeTurnOptions(driver, options);
    if (!opts) return st::Fail(opts.error());
    driver->driver->AsyncAttachTurn(MakeTurnRef(request_id, turn_id, last_event_id, journal_id, revision),
                                    std::move(*opts), MakeDoneHandler(driver->context, done, done_payload));
    return {};
  });
}

ST_API st_status st_driver_interrupt(st_driver* driver, int64_t timeout_ms) {
  return GuardStatus("st_driver_interrupt", [&]() -> st::Status {
    if (auto ok = CheckDriver(driver); !ok) return ok;
    return driver->driver->Interrupt(OrDefault(timeout_ms, st::kOneShotTimeout));
  });
}

ST_API st_status st_driver_interrupt_async(st_driver* driver, int64_t timeout_ms, st_done_fn done, void* payload) {
  return GuardStatus("st_driver_interrupt_async", [&]() -> st::Status {
    if (auto ok = CheckDriver(driver); !ok) return ok;
    if (!done) return st::Fail(InvalidArgument("done is NULL"));
    st::Context* context = driver->context;
    driver->driver->AsyncInterrupt(
        [done, payload, context](st::Status status) {
          CallUser(context, "interrupt done", [&] {
            if (status) return done(ST_OK, "", payload);
            const st_status code = ToStatus(status.error().code);
            done(code == ST_OK ? ST_E_INTERNAL : code, status.error().message.c_str(), payload);
          });
        },
        OrDefault(timeout_ms, st::kOneShotTimeout));
    return {};
  });
}

ST_API st_status st_driver_answer(st_driver* driver, const char* input_id, const st_answer* answers,
                                  size_t answer_count, int64_t timeout_ms) {
  return GuardStatus("st_driver_answer", [&]() -> st::Status {
    if (auto ok = CheckDriver(driver); !ok) return ok;
    if (!input_id || !*input_id) return st::Fail(InvalidArgument("input_id is NULL or empty"));
    auto map = AnswersFrom(answers, answer_count);
    if (!map) return st::Fail(map.error());
    return driver->driver->Answer(input_id, std::move(*map), OrDefault(timeout_ms, st::kOneShotTimeout));
  });
}

ST_API st_status st_driver_decline(st_driver* driver, const char* input_id, int64_t timeout_ms) {
  return GuardStatus("st_driver_decline", [&]() -> st::Status {
    if (auto ok = CheckDriver(driver); !ok) return ok;
    if (!input_id || !*input_id) return st::Fail(InvalidArgument("input_id is NULL or empty"));
    return driver->driver->Decline(input_id, OrDefault(timeout_ms, st::kOneShotTimeout));
  });
}

st::Status sessionturn::capi::NewDriver(st_driver** out, st_context* context, std::shared_ptr<st::Connector> connector) {
  auto handle = std::make_unique<st_driver>();
  handle->context = context->context.get();
  handle->driver = std::make_unique<st::Driver>(*context->context, std::move(connector));
  *out = handle.release();
  return {};
}
