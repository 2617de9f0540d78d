// The C ABI over the C++ API. Every exported function body runs through Guard(), the one exception
// firewall: it catches everything, records the thread-local last error and returns a status, so no
// C++ exception, STL type or allocator ever crosses extern "C". The opaque handles are defined here
// as structs holding the real C++ objects.
#include "sessionturn.h"

#include "capi_internal.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "sessionturn/context.hpp"
#include "sessionturn/driver.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/protocol.hpp"
#include "sessionturn/testing/local_runtime.hpp"

using namespace sessionturn::capi;  // NOLINT: the firewall helpers

// ---- Handles ---------------------------------------------------------------------------------------

struct st_cancel {
  st::CancellationSource source;
};

struct st_driver {
  st::Context* context = nullptr;
  std::unique_ptr<st::Driver> driver;
};

struct st_turn_result {
  st::TurnResult result;
};

struct st_responder {
  st::Responder responder;
  std::string input_id;
};

struct st_local_runtime {
  std::unique_ptr<st::testing::LocalRuntime> runtime;
  std::string socket_path;
};

LastError& sessionturn::capi::ThreadLastError() {
  thread_local LastError last;
  return last;
}

namespace {

// ---- Borrowed views for callbacks --------------------------------------------------------------------

struct EventView {
  std::string raw;
  st_event view{};

  explicit EventView(const st::Event& e) : raw(e.line.empty() ? st::EncodeEvent(e) : e.line) {
    view.version = ST_EVENT_VERSION;
    view.id = e.id;
    view.type = e.type.c_str();
    view.turn_id = e.turn_id.c_str();
    view.request_id = e.request_id.c_str();
    view.text = e.text.c_str();
    view.status = e.status.c_str();
    view.tool_id = e.tool_id.c_str();
    view.tool_name = e.tool_name.c_str();
    view.output = e.output.c_str();
    view.input_id = e.input_id.c_str();
    view.raw_json = raw.c_str();
  }
};

struct QuestionView {
  std::string raw;
  std::vector<std::vector<st_question_option>> options;
  std::vector<st_question> questions;
  st_question_request view{};

  explicit QuestionView(const st::Event& e) : raw(e.line.empty() ? st::EncodeEvent(e) : e.line) {
    options.reserve(e.questions.size());
    for (const auto& q : e.questions) {
      auto& opts = options.emplace_back();
      for (const auto& o : q.options) opts.push_back(st_question_option{o.label.c_str(), o.description.c_str()});
    }
    for (std::size_t i = 0; i < e.questions.size(); ++i) {
      const auto& q = e.questions[i];
      st_question cq{};
      cq.id = q.id.c_str();
      cq.header = q.header.c_str();
      cq.question = q.question.c_str();
      cq.options = options[i].empty() ? nullptr : options[i].data();
      cq.option_count = options[i].size();
      cq.multi_select = q.multi_select ? 1 : 0;
      cq.secret = q.secret ? 1 : 0;
      questions.push_back(cq);
    }
    view.version = ST_QUESTION_REQUEST_VERSION;
    view.input_id = e.input_id.c_str();
    view.turn_id = e.turn_id.c_str();
    view.questions = questions.empty() ? nullptr : questions.data();
    view.question_count = questions.size();
    view.raw_json = raw.c_str();
  }
};

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

st::Status CheckDriver(const st_driver* driver) {
  if (!driver || !driver->driver) return st::Fail(st::Errc::invalid_argument, "driver is NULL");
  return {};
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

ST_API st_status st_responder_answer(st_responder* responder, const st_answer* answers, size_t answer_count) {
  return GuardStatus("st_responder_answer", [&]() -> st::Status {
    if (!responder) return st::Fail(InvalidArgument("responder is NULL"));
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
    if (!responder->responder.Answer(std::move(map))) {
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

// ---- Watch ------------------------------------------------------------------------------------------------------

namespace {

// A `char **out` string: malloc'd, so the caller frees it with st_string_free (std::free).
char* CopyString(const std::string& text) {
  char* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (!copy) throw std::bad_alloc();
  std::memcpy(copy, text.c_str(), text.size() + 1);
  return copy;
}

// Lets st_watch_free guarantee that no callback runs after it returns: callbacks run under the gate's
// lock, Close() takes it. A callback that frees its own watch already holds the lock (same thread).
struct CallbackGate {
  std::mutex mutex;
  bool open = true;
  std::atomic<std::thread::id> inside{};

  template <typename Fn>
  void Run(Fn&& fn) {
    std::lock_guard lock(mutex);
    if (!open) return;
    inside.store(std::this_thread::get_id());
    fn();
    inside.store(std::thread::id{});
  }

  void Close() {
    if (inside.load() == std::this_thread::get_id()) {
      open = false;
      return;
    }
    std::lock_guard lock(mutex);
    open = false;
  }
};

}  // namespace

struct st_watch {
  st::Context* context = nullptr;
  st::WatchHandle handle;
  std::shared_ptr<CallbackGate> gate;
};

ST_API st_status st_driver_watch(st_watch** out, st_driver* driver, const st_watch_options* options,
                                 st_event_fn on_event, st_watch_end_fn on_end, void* payload) {
  return GuardStatus("st_driver_watch", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (auto ok = CheckDriver(driver); !ok) return ok;
    if (!on_event) return st::Fail(InvalidArgument("on_event is NULL"));
    st::WatchOptions opts;
    if (options) {
      if (auto ok = CheckVersion(options->version, ST_WATCH_OPTIONS_VERSION, "st_watch_options"); !ok) return ok;
      if (options->since < 0) return st::Fail(InvalidArgument("st_watch_options.since must be >= 0"));
      opts.since = options->since;
      if (options->journal_id) opts.journal_id = options->journal_id;
      opts.reconnect.enabled = options->reconnect != 0;
      opts.history_bounds = options->history_bounds != 0;
      opts.history_items = options->history_items;
      opts.history_bytes = options->history_bytes;
    }
    auto handle = std::make_unique<st_watch>();
    handle->context = driver->context;
    handle->gate = std::make_shared<CallbackGate>();
    auto gate = handle->gate;
    st::Context* context = driver->context;
    auto on_ev = [gate, on_event, payload, context](const st::Event& e) {
      gate->Run([&] {
        CallUser(context, "watch on_event", [&] {
          EventView view(e);
          on_event(&view.view, payload);
        });
      });
    };
    st::WatchEndHandler end;
    if (on_end) {
      end = [gate, on_end, payload, context](st::Status status) {
        gate->Run([&] {
          CallUser(context, "watch on_end", [&] {
            if (status) {
              on_end(ST_OK, "", payload);
            } else {
              const st_status code = ToStatus(status.error().code);
              on_end(code == ST_OK ? ST_E_INTERNAL : code, status.error().message.c_str(), payload);
            }
          });
        });
      };
    }
    handle->handle = driver->driver->Watch(std::move(opts), std::move(on_ev), std::move(end));
    *out = handle.release();
    return {};
  });
}

ST_API st_status st_watch_stop(st_watch* watch) {
  return GuardStatus("st_watch_stop", [&]() -> st::Status {
    if (!watch) return st::Fail(InvalidArgument("watch is NULL"));
    if (watch->context && watch->context->InWorkerThread()) {
      return st::Fail(st::Errc::would_block, "st_watch_stop was called from a callback (a Context worker thread)");
    }
    watch->handle.Stop();
    return {};
  });
}

ST_API int st_watch_active(const st_watch* watch) {
  return Guard("st_watch_active", static_cast<int>(ST_E_INTERNAL), [&]() -> int {
    if (!watch) return Record(InvalidArgument("watch is NULL"));
    return watch->handle.Active() ? 1 : 0;
  });
}

ST_API int64_t st_watch_last_event_id(const st_watch* watch) {
  return Guard("st_watch_last_event_id", static_cast<int64_t>(ST_E_INTERNAL), [&]() -> int64_t {
    if (!watch) return Record(InvalidArgument("watch is NULL"));
    return watch->handle.last_event_id();
  });
}

ST_API st_status st_watch_journal_id(char** out, const st_watch* watch) {
  return GuardStatus("st_watch_journal_id", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (!watch) return st::Fail(InvalidArgument("watch is NULL"));
    *out = CopyString(watch->handle.journal_id());
    return {};
  });
}

ST_API void st_watch_free(st_watch* watch) {
  Guard("st_watch_free", 0, [&] {
    if (!watch) return 0;
    watch->handle.Stop();
    watch->gate->Close();
    delete watch;
    return 0;
  });
}

// ---- Local runtime -----------------------------------------------------------------------------------------

ST_API st_status st_local_runtime_start(st_local_runtime** out, const st_local_runtime_options* options) {
  return GuardStatus("st_local_runtime_start", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (!options) return st::Fail(InvalidArgument("options is NULL (socket_path is required)"));
    if (auto ok = CheckVersion(options->version, ST_LOCAL_RUNTIME_OPTIONS_VERSION, "st_local_runtime_options"); !ok) {
      return ok;
    }
    if (!options->socket_path || !*options->socket_path) {
      return st::Fail(InvalidArgument("st_local_runtime_options.socket_path is NULL or empty"));
    }
    st::testing::LocalRuntimeOptions opts;
    opts.socket_path = options->socket_path;
    if (options->state_dir) opts.state_dir = options->state_dir;
    if (options->provider) opts.provider = options->provider;
    opts.allow_shell = options->allow_shell != 0;
    if (options->session_name) opts.session_name = options->session_name;
    if (options->echo_delay_ms >= 0) opts.echo_delay = std::chrono::milliseconds(options->echo_delay_ms);
    auto runtime = st::testing::LocalRuntime::Start(std::move(opts));
    if (!runtime) return st::Fail(runtime.error());
    auto handle = std::make_unique<st_local_runtime>();
    handle->socket_path = (*runtime)->socket_path();
    handle->runtime = std::move(*runtime);
    *out = handle.release();
    return {};
  });
}

ST_API const char* st_local_runtime_socket_path(const st_local_runtime* runtime) {
  return Guard("st_local_runtime_socket_path", static_cast<const char*>(nullptr), [&]() -> const char* {
    if (!runtime) {
      Record(InvalidArgument("runtime is NULL"));
      return nullptr;
    }
    return runtime->socket_path.c_str();
  });
}

ST_API st_status st_local_runtime_journal_id(char** out, const st_local_runtime* runtime) {
  return GuardStatus("st_local_runtime_journal_id", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (!runtime) return st::Fail(InvalidArgument("runtime is NULL"));
    *out = CopyString(runtime->runtime->journal_id());
    return {};
  });
}

ST_API int64_t st_local_runtime_last_event_id(const st_local_runtime* runtime) {
  return Guard("st_local_runtime_last_event_id", static_cast<int64_t>(ST_E_INTERNAL), [&]() -> int64_t {
    if (!runtime) return Record(InvalidArgument("runtime is NULL"));
    return runtime->runtime->last_event_id();
  });
}

ST_API st_status st_local_runtime_stop(st_local_runtime* runtime) {
  return GuardStatus("st_local_runtime_stop", [&]() -> st::Status {
    if (!runtime) return st::Fail(InvalidArgument("runtime is NULL"));
    runtime->runtime->Stop();
    return {};
  });
}

ST_API void st_local_runtime_free(st_local_runtime* runtime) {
  Guard("st_local_runtime_free", 0, [&] {
    delete runtime;
    return 0;
  });
}


st::Status sessionturn::capi::NewDriver(st_driver** out, st_context* context, std::shared_ptr<st::Connector> connector) {
  auto handle = std::make_unique<st_driver>();
  handle->context = context->context.get();
  handle->driver = std::make_unique<st::Driver>(*context->context, std::move(connector));
  *out = handle.release();
  return {};
}
