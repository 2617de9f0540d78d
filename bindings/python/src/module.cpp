// _sessionturn: the pybind11 extension behind the `sessionturn` package. It binds the C++ API (the
// driver here; errors.cpp, local_runtime.cpp and kube.cpp the rest) directly; the package facade (sessionturn/__init__.py) adds the asyncio
// variant. Rules kept here: the GIL is released during every blocking call, every callback into Python
// re-acquires it, Python objects captured by C++ callbacks are released with the GIL held, and a
// blocking submit_turn waits in slices so Ctrl-C (KeyboardInterrupt) can abandon the turn.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sessionturn/context.hpp"
#include "sessionturn/driver.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/protocol.hpp"
#include "sessionturn/turn.hpp"

#include "common.hpp"

namespace py = pybind11;
namespace st = sessionturn;

namespace {

// How often a blocking wait wakes up to look for Ctrl-C: short enough to feel immediate, long
// enough to cost nothing.
constexpr std::chrono::milliseconds kSignalPollInterval{50};
// What a Python `events()` iterator may hold unread (bytes of the events' JSON lines) before the watch
// is ended with TooLargeError: a consumer that stopped reading must not grow memory without bound,
// and a count alone would not bound it (one event may carry megabytes of tool output). Bytes, like
// the C++ connection's queue (kDefaultMaxQueuedBytes) whose lines feed it: a consumer that keeps up
// never comes near it.
constexpr std::size_t kDefaultMaxBufferedBytes = 64u << 20;

using sessionturn::python::MakeException;
using sessionturn::python::Raise;

template <typename T>
T Unwrap(st::Result<T> result) {
  if (!result) Raise(result.error());
  return std::move(*result);
}

void Check(const st::Status& status) {
  if (!status) Raise(status.error());
}

// "64 MiB" for whole MiB, else "N bytes" (the bound a TooLargeError names).
std::string FormatBytes(std::size_t bytes) {
  constexpr std::size_t kMiB = 1u << 20;
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  return std::to_string(bytes) + " bytes";
}

// What one buffered event counts against the bound: its JSON line (raw_json), as the connection's
// queue counts lines, so the bound is predictable from what the caller sees. The memory it holds is a
// small multiple of that (the decoded fields and the struct).
std::size_t BufferedBytes(const st::Event& e) { return e.line.empty() ? st::EncodeEvent(e).size() : e.line.size(); }

std::chrono::milliseconds Seconds(double seconds) {
  if (!(seconds > 0)) {
    throw py::value_error("timeout must be a positive number of seconds");
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

// A Python object referenced from C++ callbacks that may be destroyed on a Context worker: it drops
// its reference with the GIL held.
class PyRef {
 public:
  explicit PyRef(py::object object) : object_(std::move(object)) {}
  ~PyRef() {
    if (!object_ || !sessionturn::python::PythonAlive()) {
      object_.release();  // interpreter gone: leaking beats crashing
      return;
    }
    py::gil_scoped_acquire gil;
    object_ = py::object();
  }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  const py::object& get() const { return object_; }

 private:
  py::object object_;
};

// ---- Value types exposed to Python -------------------------------------------------------------------

struct PyEvent {
  std::int64_t id = 0;
  std::string type, turn_id, request_id, text, status, tool_id, tool_name, output, input_id, line;

  static PyEvent From(const st::Event& e) {
    PyEvent out;
    out.id = e.id;
    out.type = e.type;
    out.turn_id = e.turn_id;
    out.request_id = e.request_id;
    out.text = e.text;
    out.status = e.status;
    out.tool_id = e.tool_id;
    out.tool_name = e.tool_name;
    out.output = e.output;
    out.input_id = e.input_id;
    out.line = e.line.empty() ? st::EncodeEvent(e) : e.line;
    return out;
  }
  py::object Raw() const { return py::module_::import("json").attr("loads")(py::str(line)); }
};

struct PyQuestion {
  std::string id, header, question;
  std::vector<std::string> options;
  std::vector<std::string> option_descriptions;
  bool multi_select = false;
  bool secret = false;
};

struct PyQuestionRequest {
  std::string input_id, turn_id, line;
  std::vector<PyQuestion> questions;

  static PyQuestionRequest From(const st::Event& e) {
    PyQuestionRequest out;
    out.input_id = e.input_id;
    out.turn_id = e.turn_id;
    out.line = e.line.empty() ? st::EncodeEvent(e) : e.line;
    for (const auto& q : e.questions) {
      PyQuestion pq;
      pq.id = q.id;
      pq.header = q.header;
      pq.question = q.question;
      for (const auto& o : q.options) {
        pq.options.push_back(o.label);
        pq.option_descriptions.push_back(o.description);
      }
      pq.multi_select = q.multi_select;
      pq.secret = q.secret;
      out.questions.push_back(std::move(pq));
    }
    return out;
  }
};

// Where a turn is in the journal (on_accepted's argument): what attach_turn needs later.
struct PyTurnRef {
  std::string request_id, turn_id, journal_id;
  std::int64_t last_event_id = 0, revision = 0;

  static PyTurnRef From(const st::TurnRef& r) {
    return PyTurnRef{r.request_id, r.turn_id, r.journal_id, r.last_event_id, r.revision};
  }
  // attach_turn's keyword arguments: `driver.attach_turn(**ref.to_dict())`, or JSON to persist.
  py::dict ToDict() const {
    py::dict d;
    d["request_id"] = request_id;
    d["turn_id"] = turn_id;
    d["last_event_id"] = last_event_id;
    d["journal_id"] = journal_id;
    d["revision"] = revision;
    return d;
  }
};

struct PyTurnResult {
  std::string request_id, turn_id, status, text, message, journal_id;
  int declined_questions = 0, answered_questions = 0, reconnects = 0;
  std::int64_t last_event_id = 0;
  bool shared = false;

  static PyTurnResult From(const st::TurnResult& r) {
    PyTurnResult out;
    out.request_id = r.request_id;
    out.turn_id = r.turn_id;
    out.last_event_id = r.last_event_id;
    out.journal_id = r.journal_id;
    out.status = std::string(st::ToString(r.status));
    out.text = r.text;
    out.message = r.error_message;
    out.declined_questions = r.questions_declined;
    out.answered_questions = r.questions_answered;
    out.reconnects = r.reconnects;
    out.shared = r.shared;
    return out;
  }
};

// ---- A turn in flight --------------------------------------------------------------------------------

// Shared by the Python call and the C++ callbacks of one turn. The first exception a Python callback
// raises is kept here, the turn is cancelled, and the call re-raises it instead of CancelledError.
struct TurnState {
  st::CancellationSource cancel;
  std::mutex mutex;
  std::condition_variable cv;
  std::optional<st::Result<st::TurnResult>> outcome;
  std::optional<py::error_already_set> callback_error;  // touched only with the GIL held

  void Finish(st::Result<st::TurnResult> r) {
    {
      std::lock_guard lock(mutex);
      outcome = std::move(r);
    }
    cv.notify_all();
  }
  // Waits up to `timeout` for the outcome; true when it is there. Called without the GIL.
  bool WaitFor(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex);
    return cv.wait_for(lock, timeout, [&] { return outcome.has_value(); });
  }
};

// Runs a Python callback on a Context worker. An exception is recorded (first one wins) and the turn
// is cancelled, so it is abandoned properly and the caller gets the exception back.
template <typename Fn>
void CallPython(const std::shared_ptr<TurnState>& state, Fn&& fn) {
  py::gil_scoped_acquire gil;
  try {
    fn();
  } catch (py::error_already_set& e) {
    if (!state->callback_error) state->callback_error = std::move(e);
    state->cancel.Cancel();
  } catch (const std::exception& e) {
    if (!state->callback_error) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
      state->callback_error = py::error_already_set();
    }
    state->cancel.Cancel();
  }
}

class PyResponder {
 public:
  // `owner` is the Python Driver: the responder's C++ state uses the driver's Context, so the driver
  // must outlive it even when a script keeps the responder and drops the driver.
  PyResponder(st::Responder responder, std::string input_id, py::object owner)
      : responder_(std::move(responder)), input_id_(std::move(input_id)), owner_(std::move(owner)) {}
  // Non-blocking (the request is written asynchronously); any thread. True when this call was the one.
  bool Answer(std::map<std::string, std::vector<std::string>> answers) {
    py::gil_scoped_release release;
    return responder_.Answer(std::move(answers));
  }
  bool Decline() {
    py::gil_scoped_release release;
    return responder_.Decline();
  }
  const std::string& input_id() const { return input_id_; }

 private:
  st::Responder responder_;
  std::string input_id_;
  py::object owner_;
};

// A turn started asynchronously (for the asyncio facade): cancel() abandons it.
class PyTurnHandle {
 public:
  explicit PyTurnHandle(std::shared_ptr<TurnState> state) : state_(std::move(state)) {}
  void Cancel() { state_->cancel.Cancel(); }

 private:
  std::shared_ptr<TurnState> state_;
};

// ---- Events iterator (Watch) ---------------------------------------------------------------------------

struct WatchState {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<st::Event> events;
  std::size_t buffered_bytes = 0;  // BufferedBytes() of `events`
  std::size_t max_buffered_bytes = kDefaultMaxBufferedBytes;
  bool ended = false;
  std::optional<st::Error> error;
  // The watch, once Watch() returned; an overflow before that asks for the stop here instead.
  std::optional<st::WatchHandle> handle;
  bool stop_requested = false;
};

class PyEventStream {
 public:
  PyEventStream(std::shared_ptr<WatchState> state, st::WatchHandle handle, std::optional<double> timeout)
      : state_(std::move(state)), handle_(std::move(handle)), timeout_(timeout) {}
  PyEventStream(const PyEventStream&) = delete;
  PyEventStream& operator=(const PyEventStream&) = delete;
  ~PyEventStream() {
    py::gil_scoped_release release;
    handle_.Stop();
  }

  PyEvent Next() {
    const auto deadline =
        timeout_ ? std::chrono::steady_clock::now() + Seconds(*timeout_) : std::chrono::steady_clock::time_point::max();
    for (;;) {
      {
        py::gil_scoped_release release;
        std::unique_lock lock(state_->mutex);
        state_->cv.wait_for(lock, kSignalPollInterval,
                            [&] { return !state_->events.empty() || state_->ended; });
        if (!state_->events.empty()) {
          st::Event e = std::move(state_->events.front());
          state_->events.pop_front();
          state_->buffered_bytes -= BufferedBytes(e);
          lock.unlock();
          py::gil_scoped_acquire gil;
          return PyEvent::From(e);
        }
        if (state_->ended) {
          std::optional<st::Error> error = state_->error;
          lock.unlock();
          py::gil_scoped_acquire gil;
          if (error) Raise(*error);
          throw py::stop_iteration();
        }
      }
      if (PyErr_CheckSignals() != 0) {
        Close();
        throw py::error_already_set();
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        Raise(st::Error(st::Errc::timeout, "no event within " + std::to_string(*timeout_) + " s"));
      }
    }
  }

  void Close() {
    py::gil_scoped_release release;
    handle_.Stop();
    {
      std::lock_guard lock(state_->mutex);
      state_->ended = true;  // iteration ends now, whatever the end handler reports later
    }
    state_->cv.notify_all();
  }
  std::int64_t last_event_id() const { return handle_.last_event_id(); }
  std::string journal_id() const { return handle_.journal_id(); }
  std::size_t max_buffered_bytes() const { return state_->max_buffered_bytes; }
  bool active() const { return handle_.Active(); }

 private:
  std::shared_ptr<WatchState> state_;
  st::WatchHandle handle_;
  std::optional<double> timeout_;
};

// ---- Driver --------------------------------------------------------------------------------------------

class PyDriver {
 public:
  // Drivers share a Context (sessionturn.Context; default: the process's one, one worker) instead of
  // one OS thread each: a bot with many Sessions has as many workers as it asks for.
  static std::unique_ptr<PyDriver> Unix(const std::string& path, py::object context) {
    if (path.empty()) Raise(st::Error(st::Errc::invalid_argument, "socket path is empty"));
    return FromConnector([&](st::Context& c) { return st::MakeUnixConnector(c, path); }, "unix:" + path,
                         std::move(context));
  }
  static std::unique_ptr<PyDriver> FromConnector(
      const std::function<std::shared_ptr<st::Connector>(st::Context&)>& make, std::string describe,
      py::object context) {
    auto d = std::unique_ptr<PyDriver>(new PyDriver(std::move(context)));
    d->driver_ = std::make_unique<st::Driver>(*d->context_, make(*d->context_));
    d->describe_ = std::move(describe);
    return d;
  }
  static std::unique_ptr<PyDriver> Exec(const std::vector<std::string>& argv, py::object context) {
    if (argv.empty() || argv[0].empty()) Raise(st::Error(st::Errc::invalid_argument, "argv is empty"));
    return FromConnector([&](st::Context& c) { return st::MakeProcessConnector(c, argv); }, "exec:" + argv[0],
                         std::move(context));
  }

  ~PyDriver() {
    // Abandoning turns waits for the workers, which may need the GIL for a callback (and, on a worker,
    // for itself: then it happens on a thread of its own).
    sessionturn::python::DestroyOffWorker(context_owner_.cast<std::shared_ptr<sessionturn::python::LibContext>>(),
                                          std::move(driver_));
    context_owner_ = py::object();  // with the GIL; the Context outlives every driver on it
  }

  PyTurnResult SubmitTurn(const std::string& prompt, double timeout, py::object on_event, py::object on_question,
                          bool reconnect, bool allow_commands, double answer_timeout, py::object on_accepted,
                          std::optional<std::string> request_id) {
    RefuseOnWorker("submit_turn");
    auto state = std::make_shared<TurnState>();
    st::TurnOptions options = MakeOptions(state, timeout, std::move(on_event), std::move(on_question), reconnect,
                                          allow_commands, answer_timeout);
    SetAcceptOptions(options, state, std::move(on_accepted), std::move(request_id));
    return Blocking(state, std::move(options), [&](st::TurnOptions o) { return driver_->SubmitTurn(prompt, std::move(o)); });
  }

  // Follows a turn an earlier process submitted (Driver::AttachTurn), blocking like SubmitTurn.
  PyTurnResult AttachTurn(std::optional<std::string> request_id, std::optional<std::string> turn_id,
                          std::int64_t last_event_id, std::optional<std::string> journal_id, std::int64_t revision,
                          double timeout, py::object on_event, py::object on_question, bool reconnect,
                          double answer_timeout) {
    RefuseOnWorker("attach_turn");
    auto state = std::make_shared<TurnState>();
    st::TurnOptions options = MakeOptions(state, timeout, std::move(on_event), std::move(on_question), reconnect,
                                          false, answer_timeout);
    st::TurnRef ref = MakeRef(std::move(request_id), std::move(turn_id), last_event_id, std::move(journal_id), revision);
    return Blocking(state, std::move(options),
                    [&](st::TurnOptions o) { return driver_->AttachTurn(std::move(ref), std::move(o)); });
  }

  // The asyncio facade's primitive: starts the turn and calls done(result, exception) once, on a
  // worker (with the GIL). Returns a handle whose cancel() abandons the turn.
  PyTurnHandle StartTurn(const std::string& prompt, double timeout, py::object on_event, py::object on_question,
                         bool reconnect, bool allow_commands, double answer_timeout, py::object on_accepted,
                         std::optional<std::string> request_id, py::object done) {
    auto state = std::make_shared<TurnState>();
    st::TurnOptions options = MakeOptions(state, timeout, std::move(on_event), std::move(on_question), reconnect,
                                          allow_commands, answer_timeout);
    SetAcceptOptions(options, state, std::move(on_accepted), std::move(request_id));
    Cancellable(options, state);
    auto handler = AsyncDone(state, std::move(done), "submit_turn_async");
    {
      py::gil_scoped_release release;
      driver_->AsyncSubmitTurn(prompt, std::move(options), std::move(handler));
    }
    return PyTurnHandle(state);
  }

  // The same for attach_turn_async.
  PyTurnHandle StartAttach(std::optional<std::string> request_id, std::optional<std::string> turn_id,
                           std::int64_t last_event_id, std::optional<std::string> journal_id, std::int64_t revision,
                           double timeout, py::object on_event, py::object on_question, bool reconnect,
                           double answer_timeout, py::object done) {
    auto state = std::make_shared<TurnState>();
    st::TurnOptions options = MakeOptions(state, timeout, std::move(on_event), std::move(on_question), reconnect,
                                          false, answer_timeout);
    st::TurnRef ref = MakeRef(std::move(request_id), std::move(turn_id), last_event_id, std::move(journal_id), revision);
    Cancellable(options, state);
    auto handler = AsyncDone(state, std::move(done), "attach_turn_async");
    {
      py::gil_scoped_release release;
      driver_->AsyncAttachTurn(std::move(ref), std::move(options), std::move(handler));
    }
    return PyTurnHandle(state);
  }

  std::unique_ptr<PyEventStream> Events(std::optional<std::int64_t> since, std::optional<std::string> journal_id,
                                        std::optional<double> timeout, bool reconnect,
                                        std::int64_t max_buffered_bytes) {
    if (max_buffered_bytes <= 0) {
      Raise(st::Error(st::Errc::invalid_argument,
                      "max_buffered_bytes must be > 0, got " + std::to_string(max_buffered_bytes)));
    }
    auto state = std::make_shared<WatchState>();
    state->max_buffered_bytes = static_cast<std::size_t>(max_buffered_bytes);
    st::WatchOptions options;
    if (since) {
      if (*since < 0) Raise(st::Error(st::Errc::invalid_argument, "since must be >= 0"));
      options.since = *since;
    }
    if (journal_id) options.journal_id = *journal_id;
    options.reconnect.enabled = reconnect;
    if (timeout) Seconds(*timeout);  // validates
    st::WatchHandle handle;
    st::Context* context = context_;
    {
      py::gil_scoped_release release;
      handle = driver_->Watch(
          std::move(options),
          [state, context](const st::Event& e) {
            std::optional<st::WatchHandle> stop;
            {
              std::lock_guard lock(state->mutex);
              if (state->ended) return;
              const std::size_t bytes = BufferedBytes(e);
              if (state->buffered_bytes + bytes > state->max_buffered_bytes) {
                // The events buffered so far are still delivered, then the error: nothing is dropped
                // silently. This event and later ones are not taken; the watch is stopped.
                state->ended = true;
                state->error = st::Error(
                    st::Errc::too_large,
                    "events(): the unread events exceed the max_buffered_bytes bound of " +
                        FormatBytes(state->max_buffered_bytes) + " (" + std::to_string(state->events.size()) +
                        " events buffered, event " + std::to_string(e.id) +
                        " not taken); the watch was stopped: read faster, or raise max_buffered_bytes");
                if (state->handle) {
                  stop = state->handle;
                } else {
                  state->stop_requested = true;
                }
              } else {
                state->buffered_bytes += bytes;
                state->events.push_back(e);
              }
            }
            state->cv.notify_all();
            // Not here: Stop() waits for this callback to return. A worker does it right after.
            if (stop) context->Post([h = std::move(*stop)]() mutable { h.Stop(); });
          },
          [state](st::Status status) {
            {
              std::lock_guard lock(state->mutex);
              if (!state->ended) {
                state->ended = true;
                if (!status) state->error = status.error();
              }
            }
            state->cv.notify_all();
          });
      bool stop_now;
      {
        std::lock_guard lock(state->mutex);
        state->handle = handle;
        stop_now = state->stop_requested;
      }
      if (stop_now) handle.Stop();
    }
    return std::make_unique<PyEventStream>(state, std::move(handle), timeout);
  }

  void Interrupt(double timeout) {
    auto t = Seconds(timeout);
    st::Status status;
    {
      py::gil_scoped_release release;
      status = driver_->Interrupt(t);
    }
    Check(status);
  }

  std::size_t TurnsInFlight() const { return driver_->TurnsInFlight(); }
  const std::string& describe() const { return describe_; }

 private:
  explicit PyDriver(py::object context)
      : context_owner_(sessionturn::python::ContextOrDefault(std::move(context))),
        context_(&context_owner_.cast<sessionturn::python::LibContext&>().get()) {}

  // Waiting on a worker would wait for the thread that has to finish the turn.
  void RefuseOnWorker(const char* what) const {
    if (context_->InWorkerThread()) {
      Raise(st::Error(st::Errc::would_block, std::string(what) +
                                                 " was called from a callback (the driver's worker thread); use " +
                                                 what + "_async or another thread"));
    }
  }

  // A blocking turn: the Driver's blocking call with the GIL released (over a unix socket or the local
  // backend it runs on this thread, its callbacks taking the GIL here), asking about every 100 ms
  // whether a signal (Ctrl-C; only the main thread sees them) arrived: then the turn is abandoned,
  // withdrawn, and the exception raised. A callback's exception is raised before the turn's outcome.
  template <typename Call>
  PyTurnResult Blocking(const std::shared_ptr<TurnState>& state, st::TurnOptions options, Call&& call) {
    options.keep_waiting = [state] {
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() == 0) return true;
      if (!state->callback_error) {
        state->callback_error = py::error_already_set();  // KeyboardInterrupt (or what the handler raised)
      } else {
        PyErr_Clear();
      }
      return false;
    };
    st::Result<st::TurnResult> result = st::Fail(st::Errc::internal, "the turn did not run");
    {
      py::gil_scoped_release release;
      result = call(std::move(options));
    }
    if (state->callback_error) {
      py::error_already_set e = std::move(*state->callback_error);
      state->callback_error.reset();
      throw e;
    }
    if (!result) Raise(result.error());
    return PyTurnResult::From(*result);
  }

  // The completion of an async turn: done(result, exception) on the worker, with the GIL.
  static st::TurnHandler AsyncDone(const std::shared_ptr<TurnState>& state, py::object done, const char* what) {
    auto done_ref = std::make_shared<PyRef>(std::move(done));
    std::string unraisable = std::string("sessionturn: the completion callback of ") + what;
    return [state, done_ref, unraisable](st::Result<st::TurnResult> r) {
      py::gil_scoped_acquire gil;
      try {
        if (state->callback_error) {
          py::object exc = state->callback_error->value();
          state->callback_error.reset();
          done_ref->get()(py::none(), exc);
        } else if (r) {
          done_ref->get()(PyTurnResult::From(*r), py::none());
        } else {
          done_ref->get()(py::none(), MakeException(r.error()));
        }
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable(unraisable.c_str());
      }
    };
  }

  static st::TurnRef MakeRef(std::optional<std::string> request_id, std::optional<std::string> turn_id,
                             std::int64_t last_event_id, std::optional<std::string> journal_id,
                             std::int64_t revision) {
    // The driver refuses a ref without either id and a negative cursor (InvalidArgumentError).
    if (revision < 0) Raise(st::Error(st::Errc::invalid_argument, "revision must be >= 0"));
    st::TurnRef ref;
    if (request_id) ref.request_id = std::move(*request_id);
    if (turn_id) ref.turn_id = std::move(*turn_id);
    ref.last_event_id = last_event_id;
    if (journal_id) ref.journal_id = std::move(*journal_id);
    ref.revision = revision;
    return ref;
  }

  // submit_turn's on_accepted (called with a TurnRef, on the worker) and its pinned request id.
  static void SetAcceptOptions(st::TurnOptions& options, const std::shared_ptr<TurnState>& state,
                               py::object on_accepted, std::optional<std::string> request_id) {
    if (request_id) {
      if (request_id->empty()) Raise(st::Error(st::Errc::invalid_argument, "request_id is empty (pass None for a fresh one)"));
      options.request_id = std::move(*request_id);
    }
    if (on_accepted.is_none()) return;
    if (!PyCallable_Check(on_accepted.ptr())) throw py::type_error("on_accepted must be callable or None");
    options.cancel = state->cancel.Token();
    auto ref = std::make_shared<PyRef>(std::move(on_accepted));
    options.on_accepted = [state, ref](const st::TurnRef& r) {
      CallPython(state, [&] { ref->get()(PyTurnRef::From(r)); });
    };
  }

  // An async turn's handle can cancel it.
  static void Cancellable(st::TurnOptions& options, const std::shared_ptr<TurnState>& state) {
    options.cancel = state->cancel.Token();
  }

  st::TurnOptions MakeOptions(const std::shared_ptr<TurnState>& state, double timeout, py::object on_event,
                              py::object on_question, bool reconnect, bool allow_commands, double answer_timeout) {
    st::TurnOptions options;
    options.timeout = Seconds(timeout);
    options.answer_timeout = Seconds(answer_timeout);
    options.reconnect.enabled = reconnect;
    options.allow_commands = allow_commands;
    // The turn listens to state->cancel only where something can cancel it: a Python callback that
    // raises (CallPython), or an async handle's cancel() (Cancellable). A blocking turn without
    // callbacks has neither (Ctrl-C reaches it through keep_waiting), and registers nothing.
    if (!on_event.is_none()) {
      options.cancel = state->cancel.Token();
      if (!PyCallable_Check(on_event.ptr())) throw py::type_error("on_event must be callable or None");
      auto ref = std::make_shared<PyRef>(std::move(on_event));
      options.on_event = [state, ref](const st::Event& e) {
        CallPython(state, [&] { ref->get()(PyEvent::From(e)); });
      };
    }
    if (!on_question.is_none()) {
      options.cancel = state->cancel.Token();
      if (!PyCallable_Check(on_question.ptr())) throw py::type_error("on_question must be callable or None");
      auto ref = std::make_shared<PyRef>(std::move(on_question));
      options.questions = st::QuestionPolicy::ask;
      options.on_question = [this, state, ref](const st::Event& e, st::Responder responder) {
        CallPython(state, [&] {
          // The Python wrapper of this driver (alive: a turn in flight holds it through its call).
          py::object owner = py::cast(this, py::return_value_policy::reference);
          ref->get()(PyQuestionRequest::From(e), PyResponder(std::move(responder), e.input_id, std::move(owner)));
        });
      };
    }
    return options;
  }

  py::object context_owner_;  // the sessionturn.Context: alive as long as the driver
  st::Context* context_;
  std::unique_ptr<st::Driver> driver_;
  std::string describe_;
};

// ---- Registration ------------------------------------------------------------------------------------


}  // namespace

py::object sessionturn::python::NewDriver(const std::function<std::shared_ptr<st::Connector>(st::Context&)>& make,
                                         std::string describe, py::object context) {
  return py::cast(PyDriver::FromConnector(make, std::move(describe), std::move(context)));
}

PYBIND11_MODULE(_sessionturn, m) {
  m.doc() = "sessionturn C++ bindings (use the `sessionturn` package)";
  sessionturn::python::RegisterErrors(m);
  sessionturn::python::RegisterRouter(m);
  sessionturn::python::RegisterChat(m);
  m.attr("DEFAULT_MAX_BUFFERED_BYTES") = static_cast<std::int64_t>(kDefaultMaxBufferedBytes);

  py::class_<PyEvent>(m, "Event", "One event of a turn or a watch.")
      .def_readonly("id", &PyEvent::id)
      .def_readonly("type", &PyEvent::type)
      .def_readonly("turn_id", &PyEvent::turn_id)
      .def_readonly("request_id", &PyEvent::request_id)
      .def_readonly("text", &PyEvent::text)
      .def_readonly("status", &PyEvent::status)
      .def_readonly("tool_id", &PyEvent::tool_id)
      .def_readonly("tool_name", &PyEvent::tool_name)
      .def_readonly("output", &PyEvent::output)
      .def_readonly("input_id", &PyEvent::input_id)
      .def_readonly("raw_json", &PyEvent::line)
      .def_property_readonly("raw", &PyEvent::Raw, "The whole event as a dict.")
      .def("__repr__", [](const PyEvent& e) {
        return "<sessionturn.Event " + std::to_string(e.id) + " " + e.type + " turn=" + e.turn_id + ">";
      });

  py::class_<PyQuestion>(m, "Question", "One question of an input request.")
      .def_readonly("id", &PyQuestion::id)
      .def_readonly("header", &PyQuestion::header)
      .def_readonly("question", &PyQuestion::question)
      .def_readonly("options", &PyQuestion::options, "The option labels.")
      .def_readonly("option_descriptions", &PyQuestion::option_descriptions)
      .def_readonly("multi_select", &PyQuestion::multi_select)
      .def_readonly("secret", &PyQuestion::secret)
      .def("__repr__", [](const PyQuestion& q) { return "<sessionturn.Question " + q.id + ": " + q.question + ">"; });

  py::class_<PyQuestionRequest>(m, "QuestionRequest", "An input request of the agent (input.requested).")
      .def_readonly("input_id", &PyQuestionRequest::input_id)
      .def_readonly("turn_id", &PyQuestionRequest::turn_id)
      .def_readonly("questions", &PyQuestionRequest::questions)
      .def_property_readonly("raw", [](const PyQuestionRequest& r) {
        return py::module_::import("json").attr("loads")(py::str(r.line));
      });

  py::class_<PyResponder>(m, "Responder",
                          "Answers or declines one question, exactly once, now or later, from any thread.")
      .def("answer", &PyResponder::Answer, py::arg("answers"),
           "Answer with {question_id: [values]}. True when this call answered; False when the question was "
           "already answered or declined (also at its deadline) or the turn ended.")
      .def("decline", &PyResponder::Decline, "Decline. True when this call declined.")
      .def_property_readonly("input_id", &PyResponder::input_id);

  py::class_<PyTurnRef>(m, "TurnRef",
                        "Where a turn is in the runtime's journal (on_accepted's argument): persist it to follow "
                        "the turn from another process with Driver.attach_turn(**ref.to_dict()).")
      .def_readonly("request_id", &PyTurnRef::request_id)
      .def_readonly("turn_id", &PyTurnRef::turn_id)
      .def_readonly("last_event_id", &PyTurnRef::last_event_id)
      .def_readonly("journal_id", &PyTurnRef::journal_id)
      .def_readonly("revision", &PyTurnRef::revision)
      .def("to_dict", &PyTurnRef::ToDict, "The fields as a dict (attach_turn's keyword arguments).")
      .def("__repr__", [](const PyTurnRef& r) {
        return "<sessionturn.TurnRef " + r.turn_id + " request=" + r.request_id + " at " + r.journal_id + "/" +
               std::to_string(r.last_event_id) + ">";
      });

  py::class_<PyTurnResult>(m, "TurnResult", "A finished turn (also a failed or interrupted one: see status).")
      .def_readonly("request_id", &PyTurnResult::request_id, "The message's requestId.")
      .def_readonly("turn_id", &PyTurnResult::turn_id)
      .def_readonly("last_event_id", &PyTurnResult::last_event_id, "The journal cursor when the turn ended.")
      .def_readonly("journal_id", &PyTurnResult::journal_id, "The journal last_event_id belongs to.")
      .def_readonly("status", &PyTurnResult::status)
      .def_readonly("text", &PyTurnResult::text)
      .def_readonly("message", &PyTurnResult::message)
      .def_readonly("declined_questions", &PyTurnResult::declined_questions)
      .def_readonly("answered_questions", &PyTurnResult::answered_questions)
      .def_readonly("shared", &PyTurnResult::shared)
      .def_readonly("reconnects", &PyTurnResult::reconnects)
      .def("__repr__", [](const PyTurnResult& r) {
        return "<sessionturn.TurnResult " + r.turn_id + " " + r.status + " text=" + std::to_string(r.text.size()) +
               " bytes>";
      });

  py::class_<PyTurnHandle>(m, "TurnHandle", "A turn started by the asyncio variant.")
      .def("cancel", &PyTurnHandle::Cancel, "Abandon the turn; its completion gets CancelledError.");

  py::class_<PyEventStream>(m, "EventStream", "An iterator over a Session's events (a watch).")
      .def("__iter__", [](PyEventStream& s) -> PyEventStream& { return s; })
      .def("__next__", &PyEventStream::Next)
      .def("close", &PyEventStream::Close, "Stop the watch; the iteration ends.")
      .def("__enter__", [](PyEventStream& s) -> PyEventStream& { return s; })
      .def("__exit__", [](PyEventStream& s, py::object, py::object, py::object) { s.Close(); })
      .def_property_readonly("last_event_id", &PyEventStream::last_event_id)
      .def_property_readonly("journal_id", &PyEventStream::journal_id)
      .def_property_readonly("max_buffered_bytes", &PyEventStream::max_buffered_bytes)
      .def_property_readonly("active", &PyEventStream::active,
                             "True while the watch runs (False after close(), its end, or a TooLargeError stop).");

  py::class_<PyDriver>(m, "Driver", "Talks to one Session runtime. Thread-safe.")
      .def_static("unix", &PyDriver::Unix, py::arg("path"), py::kw_only(), py::arg("context") = py::none(),
                  "A driver for the runtime at a unix socket path, on `context` (None: sessionturn.default_context()).")
      .def_static("exec", &PyDriver::Exec, py::arg("argv"), py::kw_only(), py::arg("context") = py::none(),
                  "A driver that runs argv (no shell) and speaks over its stdin/stdout, on `context`.")
      .def("submit_turn", &PyDriver::SubmitTurn, py::arg("prompt"), py::kw_only(), py::arg("timeout") = 3600.0,
           py::arg("on_event") = py::none(), py::arg("on_question") = py::none(), py::arg("reconnect") = true,
           py::arg("allow_commands") = false, py::arg("answer_timeout") = 600.0, py::arg("on_accepted") = py::none(),
           py::arg("request_id") = py::none(),
           "Submit a prompt and block until the turn ends (the GIL is released; Ctrl-C abandons the turn). "
           "on_accepted(TurnRef) runs once when the runtime accepted the prompt; request_id pins the message's "
           "requestId (None: a fresh random one).")
      .def("attach_turn", &PyDriver::AttachTurn, py::kw_only(), py::arg("request_id") = py::none(),
           py::arg("turn_id") = py::none(), py::arg("last_event_id") = 0, py::arg("journal_id") = py::none(),
           py::arg("revision") = 0, py::arg("timeout") = 3600.0, py::arg("on_event") = py::none(),
           py::arg("on_question") = py::none(), py::arg("reconnect") = true, py::arg("answer_timeout") = 600.0,
           "Follow a turn an earlier process submitted, from {last_event_id, journal_id}, found by turn_id or "
           "(turn_id None) by request_id, and block until it ends as submit_turn would, without sending the "
           "prompt again. NotFoundError when the journal shows no such turn.")
      .def("_start_turn", &PyDriver::StartTurn, py::arg("prompt"), py::arg("timeout"), py::arg("on_event"),
           py::arg("on_question"), py::arg("reconnect"), py::arg("allow_commands"), py::arg("answer_timeout"),
           py::arg("on_accepted"), py::arg("request_id"), py::arg("done"), py::keep_alive<0, 1>())
      .def("_start_attach", &PyDriver::StartAttach, py::arg("request_id"), py::arg("turn_id"),
           py::arg("last_event_id"), py::arg("journal_id"), py::arg("revision"), py::arg("timeout"),
           py::arg("on_event"), py::arg("on_question"), py::arg("reconnect"), py::arg("answer_timeout"),
           py::arg("done"), py::keep_alive<0, 1>())
      .def("events", &PyDriver::Events, py::arg("since") = py::none(), py::kw_only(),
           py::arg("journal_id") = py::none(), py::arg("timeout") = py::none(), py::arg("reconnect") = true,
           py::arg("max_buffered_bytes") = static_cast<std::int64_t>(kDefaultMaxBufferedBytes),
           py::keep_alive<0, 1>(),  // the stream's watch runs on the driver's Context
           "Iterate over the Session's events from `since` (None: the retained journal). `timeout` bounds the "
           "wait for each event (TimeoutError). The unread events' JSON lines may hold up to max_buffered_bytes "
           "(default DEFAULT_MAX_BUFFERED_BYTES, 64 MiB); beyond it the watch stops and, after the events "
           "buffered so far, iteration raises TooLargeError.")
      .def("interrupt", &PyDriver::Interrupt, py::arg("timeout") = 30.0,
           "Stop whichever turn runs now (RejectedError when none does).")
      .def_property_readonly("turns_in_flight", &PyDriver::TurnsInFlight)
      .def("__repr__", [](const PyDriver& d) { return "<sessionturn.Driver " + d.describe() + ">"; });


  sessionturn::python::RegisterLocalRuntime(m);
  sessionturn::python::RegisterKube(m);
}
