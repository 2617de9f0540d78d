// The routing part of _sessionturn: a Context to share, the two SessionBackends, the Router driven
// by a chat adapter written in Python, and the router's pure helpers (session names, the prompt
// envelope, rendering). The package facade (sessionturn/_router.py) wraps these in the public
// classes: it turns the adapter's coroutines into the callbacks used here and back.
//
// Rules: the GIL is released around every call into the C++ library that may wait (a Router's or a
// backend's destruction joins work that may need the GIL); every call into Python from a Context
// worker takes it; Python objects held by C++ are dropped with it held. An adapter call that never
// completes (its asyncio loop stopped) fails after `adapter_timeout` instead of holding the router.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <asio.hpp>

#include "common.hpp"
#include "context_gate.hpp"
#include "foreign_call.hpp"
#include "sessionturn/backend.hpp"
#include "sessionturn/kube.hpp"
#include "sessionturn/render.hpp"
#include "sessionturn/router.hpp"
#include "sessionturn/routing.hpp"

namespace py = pybind11;
namespace st = sessionturn;
using sessionturn::python::DestroyOffWorker;
using sessionturn::python::Handoff;
using sessionturn::python::LibContext;
using sessionturn::python::PyHeld;
using sessionturn::python::Raise;

namespace {


std::chrono::milliseconds Millis(double seconds, const char* what) {
  // NaN and anything past a year (inf) are refused: the conversion below would be undefined.
  if (!(seconds >= 0) || seconds > 365.0 * 24 * 3600)
    throw py::value_error(std::string(what) + " must be a number of seconds from 0 to a year");
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

// An attribute of a Python object as text ("" for None or a missing one; str() of anything else).
std::string Text(const py::handle& obj, const char* name) {
  if (!py::hasattr(obj, name)) return {};
  py::object v = obj.attr(name);
  if (v.is_none()) return {};
  return py::str(v);
}
bool Flag(const py::handle& obj, const char* name) { return py::hasattr(obj, name) && py::bool_(obj.attr(name)); }
std::vector<std::string> Texts(const py::handle& obj, const char* name) {
  std::vector<std::string> out;
  if (!py::hasattr(obj, name) || obj.attr(name).is_none()) return out;
  for (const auto& v : obj.attr(name)) out.push_back(py::str(v));
  return out;
}
std::map<std::string, std::string> Mapping(const py::handle& obj, const char* name) {
  std::map<std::string, std::string> out;
  if (!py::hasattr(obj, name) || obj.attr(name).is_none()) return out;
  for (const auto& [k, v] : py::cast<py::dict>(obj.attr(name))) out[py::str(k)] = py::str(v);
  return out;
}

st::LengthUnit ParseUnit(const std::string& s) {
  if (s == "bytes") return st::LengthUnit::bytes;
  if (s == "code_points") return st::LengthUnit::code_points;
  if (s == "utf16") return st::LengthUnit::utf16;
  throw py::value_error("unit must be \"bytes\", \"code_points\" or \"utf16\", not \"" + s + "\"");
}
st::MarkupDialect ParseDialect(const std::string& s) {
  if (s == "plain") return st::MarkupDialect::plain;
  if (s == "telegram_html") return st::MarkupDialect::telegram_html;
  if (s == "slack_mrkdwn") return st::MarkupDialect::slack_mrkdwn;
  throw py::value_error("dialect must be \"plain\", \"telegram_html\" or \"slack_mrkdwn\", not \"" + s + "\"");
}

// The Errc a Python adapter named ("unavailable"); failed for a name we do not know.
st::Errc ErrcNamed(const std::string& name) {
  for (int i = 1; i <= static_cast<int>(st::Errc::internal); ++i)
    if (st::ToString(static_cast<st::Errc>(i)) == name) return static_cast<st::Errc>(i);
  return st::Errc::failed;
}

// ---- Context and backends ------------------------------------------------------------------------------

class PyBackend {
 public:
  PyBackend(py::object context, std::unique_ptr<st::SessionBackend> backend)
      : context_(std::move(context)), backend_(std::move(backend)) {}
  ~PyBackend() { DestroyOffWorker(context_.cast<std::shared_ptr<LibContext>>(), std::move(backend_)); }
  st::SessionBackend& get() { return *backend_; }
  st::Context& context() { return context_.cast<LibContext&>().get(); }
  const py::object& context_object() const { return context_; }
  std::string Describe() const { return backend_->Describe(); }

 private:
  py::object context_;  // the Context outlives the backend
  std::unique_ptr<st::SessionBackend> backend_;
};

std::unique_ptr<PyBackend> MakeLocal(py::object context, const std::string& state_dir, const std::string& provider,
                                     const std::string& agent_bin, double idle_suspend, double delete_after,
                                     const std::string& owner, bool in_process, bool allow_shell,
                                     const std::string& runtime_program) {
  st::LocalBackendOptions o;
  o.state_dir = state_dir;
  o.provider = provider;
  o.agent_bin = agent_bin;
  o.suspend_after = std::chrono::duration_cast<std::chrono::seconds>(Millis(idle_suspend, "idle_suspend"));
  o.delete_after = std::chrono::duration_cast<std::chrono::seconds>(Millis(delete_after, "delete_after"));
  o.owner = owner;
  o.in_process = in_process;
  o.allow_shell = allow_shell;
  o.runtime_program = runtime_program;
  context = sessionturn::python::ContextOrDefault(std::move(context));
  st::Context& ctx = context.cast<LibContext&>().get();
  st::Result<std::unique_ptr<st::SessionBackend>> made;
  {
    py::gil_scoped_release release;
    made = st::MakeLocalBackend(ctx, std::move(o));
  }
  if (!made) Raise(made.error());
  return std::make_unique<PyBackend>(std::move(context), std::move(*made));
}

std::unique_ptr<PyBackend> MakeKubernetes(py::object context, const std::string& namespace_name,
                                          const std::string& spawner, const std::string& template_file,
                                          const std::string& owner, const std::string& kubeconfig,
                                          const std::string& kube_context) {
  st::KubeConfigOptions ko;
  ko.kubeconfig = kubeconfig;
  ko.context = kube_context;
  ko.namespace_name = namespace_name;
  context = sessionturn::python::ContextOrDefault(std::move(context));
  st::Context& ctx = context.cast<LibContext&>().get();
  st::Result<std::unique_ptr<st::SessionBackend>> made;
  {
    py::gil_scoped_release release;  // may run an exec credential plugin
    auto kube = st::KubeConfig::Load(ko);
    if (!kube) {
      made = tl::unexpected(kube.error());
    } else {
      st::KubernetesBackendOptions o;
      o.namespace_name = kube->Namespace();
      o.spawner = spawner;
      o.template_file = template_file;
      o.owner = owner;
      made = st::MakeKubernetesBackend(ctx, std::move(*kube), std::move(o));
    }
  }
  if (!made) Raise(made.error());
  return std::make_unique<PyBackend>(std::move(context), std::move(*made));
}

// ---- The adapter ---------------------------------------------------------------------------------------

st::ChatCapabilities CapabilitiesFrom(const py::handle& c) {
  st::ChatCapabilities caps;
  caps.max_length = py::cast<std::size_t>(c.attr("max_length"));
  caps.unit = ParseUnit(py::str(c.attr("unit")));
  caps.soft_length = py::cast<std::size_t>(c.attr("soft_length"));
  caps.dialect = ParseDialect(py::str(c.attr("dialect")));
  caps.edits_per_interval = py::cast<int>(c.attr("edits_per_interval"));
  caps.edit_interval = Millis(py::cast<double>(c.attr("edit_interval")), "edit_interval");
  caps.buttons = Flag(c, "buttons");
  caps.button_data_limit = py::cast<std::size_t>(c.attr("button_data_limit"));
  caps.threads = Flag(c, "threads");
  caps.typing = Flag(c, "typing");
  caps.fetch_thread = Flag(c, "fetch_thread");
  caps.command_prefix = Text(c, "command_prefix");
  if (caps.max_length < st::kMinPartLength)
    throw py::value_error("capabilities().max_length must be at least " + std::to_string(st::kMinPartLength));
  if (caps.edits_per_interval < 1) throw py::value_error("capabilities().edits_per_interval must be at least 1");
  return caps;
}

py::tuple WhereTuple(const st::ThreadRef& w) { return py::make_tuple(w.platform, w.workspace, w.chat, w.thread); }

py::tuple MessageTuple(const st::OutboundMessage& m) {
  py::list rows;
  for (const auto& row : m.buttons) {
    py::list r;
    for (const auto& b : row) r.append(py::make_tuple(b.label, b.data));
    rows.append(r);
  }
  return py::make_tuple(m.text, rows, m.reply_to);
}

// (code name, message, retry_after seconds, http status) from the facade -> an Error.
st::Error ErrorFrom(const py::handle& e) {
  auto t = py::cast<py::tuple>(e);
  st::Error err(ErrcNamed(py::str(t[0])), py::str(t[1]), py::cast<int>(t[3]));
  err.retry_after = Millis(py::cast<double>(t[2]), "retry_after");
  return err;
}

// The `done(result, error)` a Python adapter call reports through (registered as _sessionturn._Done).
struct AdapterDone {
  std::function<void(py::object, py::object)> fn;
  void Call(py::object result, py::object error) {
    auto f = std::move(fn);  // once: a second call finds it empty
    fn = nullptr;
    if (f) f(std::move(result), std::move(error));
  }
};

// One adapter call waiting for the adapter's loop: what to call, its arguments built there (with the GIL),
// and how its answer reaches the router. Plain C++ until then: the worker that queued it never takes the GIL.
struct QueuedCall {
  std::string method;
  std::function<py::tuple()> args;                      // on the loop thread, with the GIL
  std::function<void(py::object, py::object)> report;   // done(result, error): with the GIL
  std::function<void(st::Error)> fail;                  // without the GIL, when it cannot be handed over
};

// The calls the router made that the adapter's loop has not taken yet. The worker that makes the queue
// non-empty wakes the loop once (the facade's bridge `_wake`: one call_soon_threadsafe per batch); the
// loop takes every call queued by then in one go (`take`). Registered as _sessionturn._CallQueue.
class CallQueue {
 public:
  // True when the queue was empty: the caller wakes the loop.
  bool Push(QueuedCall call) {
    std::lock_guard lock(mu_);
    calls_.push_back(std::move(call));
    return calls_.size() == 1;
  }
  std::vector<QueuedCall> TakeAll() {
    std::lock_guard lock(mu_);
    std::vector<QueuedCall> out;
    out.swap(calls_);
    return out;
  }
  // On the loop, with the GIL: [(method, args, done), ...]. A call whose arguments Python cannot take
  // fails at once (it never reaches the router's strand as an exception).
  py::list Take() {
    std::vector<QueuedCall> calls;
    {
      py::gil_scoped_release release;  // the lock is never held with the GIL by a worker; keep it that way
      calls = TakeAll();
    }
    py::list out;
    for (auto& c : calls) {
      try {
        out.append(py::make_tuple(c.method, c.args(), py::cast(AdapterDone{std::move(c.report)})));
      } catch (const std::exception& e) {
        PyErr_Clear();
        st::Error error(st::Errc::failed, "the adapter's " + c.method + " could not be called: " + e.what());
        py::gil_scoped_release release;
        c.fail(std::move(error));
      }
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<QueuedCall> calls_;
};

// Calls the facade's bridge (a Python object with post/edit/typing/fetch_thread(..., done)); `done`
// is called back once, with (result, None) or (None, error tuple), from any thread; the result is
// converted with the GIL held, then the router's handler runs without it. Calls are queued and the
// bridge drains them on its loop, many per wake-up. A call that the bridge does not finish within the
// timeout fails with Errc::timeout.
class PyChatAdapter final : public st::ChatAdapter {
 public:
  PyChatAdapter(st::Context& ctx, py::object bridge, st::ChatCapabilities caps, std::chrono::milliseconds timeout)
      : ctx_(ctx), caps_(std::move(caps)), timeout_(timeout), queue_(std::make_shared<CallQueue>()) {
    bridge.attr("_attach")(py::cast(queue_));
    bridge_ = std::make_shared<PyHeld>(std::move(bridge));
  }

  st::ChatCapabilities Capabilities() const override { return caps_; }

  void AsyncPost(const st::ThreadRef& where, st::OutboundMessage message, st::ChatHandler<std::string> handler) override {
    Call<std::string>(
        "post", [where, message = std::move(message)] { return py::make_tuple(WhereTuple(where), MessageTuple(message)); },
        [](const py::handle& r) -> st::Result<std::string> {
          if (r.is_none()) return st::Fail(st::Errc::failed, "the adapter's post returned None, not a message id");
          std::string id = py::str(r);
          if (id.empty()) return st::Fail(st::Errc::failed, "the adapter's post returned an empty message id");
          return id;
        },
        std::move(handler));
  }

  void AsyncEdit(const st::ThreadRef& where, const std::string& message_id, st::OutboundMessage message,
                 st::ChatStatusHandler handler) override {
    CallStatus("edit",
               [where, message_id, message = std::move(message)] {
                 return py::make_tuple(WhereTuple(where), message_id, MessageTuple(message));
               },
               std::move(handler));
  }

  void AsyncTyping(const st::ThreadRef& where, st::ChatStatusHandler handler) override {
    if (!caps_.typing) return handler({});
    CallStatus("typing", [where] { return py::make_tuple(WhereTuple(where)); }, std::move(handler));
  }

  void AsyncFetchThread(const st::ThreadRef& where, const std::string& before, std::size_t max_messages,
                        st::ChatHandler<std::vector<st::ThreadHistoryMessage>> handler) override {
    if (!caps_.fetch_thread) return handler(st::Fail(st::Errc::unavailable, "the adapter cannot fetch threads"));
    Call<std::vector<st::ThreadHistoryMessage>>(
        "fetch_thread", [where, before, max_messages] { return py::make_tuple(WhereTuple(where), before, max_messages); },
        [](const py::handle& r) -> st::Result<std::vector<st::ThreadHistoryMessage>> {
          std::vector<st::ThreadHistoryMessage> out;
          if (r.is_none()) return out;
          for (const auto& m : r) out.push_back({Text(m, "author_name"), Text(m, "text"), Flag(m, "is_bot")});
          return out;
        },
        std::move(handler));
  }

 private:
  void CallStatus(const char* method, std::function<py::tuple()> args, st::ChatStatusHandler handler) {
    Call<bool>(
        method, std::move(args), [](const py::handle&) -> st::Result<bool> { return true; },
        [handler = std::move(handler)](st::Result<bool> r) {
          if (r) handler({});
          else handler(st::Fail(r.error()));
        });
  }

  template <typename T>
  void Call(const char* method, std::function<py::tuple()> args,
            std::function<st::Result<T>(const py::handle&)> convert, std::function<void(st::Result<T>)> handler) {
    const std::string name = method;
    auto once = st::detail::ForeignCall<T>::Start(ctx_, "the adapter's " + name, timeout_, std::move(handler),
                                                  "is its asyncio loop running?");
    QueuedCall call;
    call.method = name;
    call.args = std::move(args);
    call.report = [once, convert = std::move(convert)](py::object result, py::object error) {
      st::Result<T> r = st::Fail(st::Errc::internal, "unset");
      try {
        r = error.is_none() ? convert(result) : st::Result<T>(st::Fail(ErrorFrom(error)));
      } catch (py::error_already_set& e) {
        r = st::Fail(st::Errc::failed, std::string("the adapter's answer could not be read: ") + e.what());
      } catch (const std::exception& e) {
        r = st::Fail(st::Errc::failed, std::string("the adapter's answer could not be read: ") + e.what());
      }
      py::gil_scoped_release release;
      once->Complete(std::move(r));
    };
    call.fail = [once](st::Error e) { once->Complete(st::Fail(std::move(e))); };
    if (queue_->Push(std::move(call))) Wake();
  }

  // The queue became non-empty: one call_soon_threadsafe for the batch. When the loop cannot take it
  // (closed), every call queued now fails at once instead of waiting for the timeout.
  void Wake() {
    std::string why;
    {
      py::gil_scoped_acquire gil;
      try {
        bridge_->get().attr("_wake")();
        return;
      } catch (py::error_already_set& e) {
        why = e.what();
      } catch (const std::exception& e) {
        PyErr_Clear();
        why = e.what();
      }
    }
    for (auto& c : queue_->TakeAll())
      c.fail(st::Error(st::Errc::unavailable, "the adapter's " + c.method + " was not sent: " + why));
  }

  st::Context& ctx_;
  std::shared_ptr<PyHeld> bridge_;
  st::ChatCapabilities caps_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<CallQueue> queue_;
};

// The C++ side of bench/py_router.py's comparison: an adapter that completes every post and edit at
// once (its handler posted to the Context, as a platform's answer lands there), with no Python in it.
class ImmediateAdapter final : public st::ChatAdapter {
 public:
  ImmediateAdapter(st::Context& ctx, st::ChatCapabilities caps) : ctx_(ctx), caps_(std::move(caps)) {}
  st::ChatCapabilities Capabilities() const override { return caps_; }
  void AsyncPost(const st::ThreadRef&, st::OutboundMessage, st::ChatHandler<std::string> handler) override {
    std::string id = std::to_string(next_.fetch_add(1) + 1);
    ctx_.Post([handler = std::move(handler), id = std::move(id)]() mutable { handler(std::move(id)); });
  }
  void AsyncEdit(const st::ThreadRef&, const std::string&, st::OutboundMessage, st::ChatStatusHandler handler) override {
    ctx_.Post([handler = std::move(handler)] { handler({}); });
  }

 private:
  st::Context& ctx_;
  st::ChatCapabilities caps_;
  std::atomic<std::uint64_t> next_{0};
};

// Python's marker for it (only the benchmark uses it).
struct ImmediateAdapterMarker {};

// ---- Messages and options from Python --------------------------------------------------------------------

st::InboundMessage MessageFrom(const py::handle& m) {
  st::InboundMessage out;
  out.platform = Text(m, "platform");
  out.workspace = Text(m, "workspace");
  out.chat = Text(m, "chat");
  out.thread = Text(m, "thread");
  out.message_id = Text(m, "message_id");
  out.reply_to_message_id = Text(m, "reply_to_message_id");
  out.author_id = Text(m, "author_id");
  out.author_name = Text(m, "author_name");
  out.text = Text(m, "text");
  out.attachments_text = Texts(m, "attachments_text");
  out.is_bot = Flag(m, "is_bot");
  out.is_self = Flag(m, "is_self");
  out.mentions_bot = Flag(m, "mentions_bot");
  out.is_private_chat = Flag(m, "is_private_chat");
  out.event_id = Text(m, "event_id");
  out.received = std::chrono::system_clock::now();
  const std::string kind = Text(m, "kind");
  if (kind.empty() || kind == "new") out.kind = st::MessageKind::new_message;
  else if (kind == "edited") out.kind = st::MessageKind::edited;
  else if (kind == "deleted") out.kind = st::MessageKind::deleted;
  else throw py::value_error("InboundMessage.kind must be \"new\", \"edited\" or \"deleted\", not \"" + kind + "\"");
  return out;
}

st::InboundAction ActionFrom(const py::handle& a) {
  st::InboundAction out;
  out.platform = Text(a, "platform");
  out.workspace = Text(a, "workspace");
  out.chat = Text(a, "chat");
  out.thread = Text(a, "thread");
  out.message_id = Text(a, "message_id");
  out.author_id = Text(a, "author_id");
  out.author_name = Text(a, "author_name");
  out.data = Text(a, "data");
  out.event_id = Text(a, "event_id");
  py::object ack = py::hasattr(a, "ack") ? py::object(a.attr("ack")) : py::none();
  if (!ack.is_none()) {
    auto held = std::make_shared<PyHeld>(std::move(ack));
    out.ack = [held](std::string_view text) {
      py::gil_scoped_acquire gil;
      try {
        held->get()(std::string(text));
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("sessionturn: InboundAction.ack");
      }
    };
  }
  return out;
}

st::RouteConfig RouteFrom(const py::handle& r) {
  st::RouteConfig out;
  out.name = Text(r, "name");
  out.platform = Text(r, "platform");
  out.chats = Texts(r, "chats");
  out.users = Texts(r, "users");
  if (py::hasattr(r, "require_mention") && !r.attr("require_mention").is_none())
    out.require_mention = py::bool_(r.attr("require_mention"));
  out.triggers = Texts(r, "triggers");
  out.excludes = Texts(r, "excludes");
  out.allow_bots = Flag(r, "allow_bots");
  out.allowed_bots = Texts(r, "allowed_bots");
  out.admins = Texts(r, "admins");
  out.session.labels = Mapping(r, "labels");
  out.session.annotations = Mapping(r, "annotations");
  out.session.parameters = Mapping(r, "parameters");
  return out;
}

st::RouterOptions OptionsFrom(const py::handle& c) {
  st::RouterOptions o;
  o.session_prefix = Text(c, "session_prefix");
  o.owner_uid = Text(c, "owner_uid");
  for (const auto& r : c.attr("routes")) o.routes.push_back(RouteFrom(r));
  o.store_path = Text(c, "store_path");
  o.max_queued = py::cast<std::size_t>(c.attr("max_queued"));
  o.max_in_flight = py::cast<std::size_t>(c.attr("max_in_flight"));
  o.progress_interval = Millis(py::cast<double>(c.attr("progress_interval")), "progress_interval");
  o.turn_timeout = Millis(py::cast<double>(c.attr("turn_timeout")), "turn_timeout");
  o.wait_ready_timeout = Millis(py::cast<double>(c.attr("wait_ready_timeout")), "wait_ready_timeout");
  o.answer_timeout = Millis(py::cast<double>(c.attr("answer_timeout")), "answer_timeout");
  const std::string answerers = Text(c, "answerers");
  if (answerers == "turn_author") o.answerers = st::AnswerPolicy::turn_author;
  else if (answerers == "allowed_users") o.answerers = st::AnswerPolicy::allowed_users;
  else throw py::value_error("answerers must be \"turn_author\" or \"allowed_users\", not \"" + answerers + "\"");
  o.decline_questions = Flag(c, "decline_questions");
  o.thread_context_messages = py::cast<std::size_t>(c.attr("thread_context_messages"));
  o.show_usage = Flag(c, "show_usage");
  o.bot_username = Text(c, "bot_username");
  o.shutdown_budget = Millis(py::cast<double>(c.attr("shutdown_budget")), "shutdown_budget");
  o.delivery_attempts = py::cast<int>(c.attr("delivery_attempts"));
  return o;
}

py::dict StatsDict(const st::RouterStats& s) {
  py::dict d;
  d["sessions"] = s.sessions;
  d["turns_in_flight"] = s.turns_in_flight;
  d["turns_waiting"] = s.turns_waiting;
  d["open_questions"] = s.open_questions;
  d["outbox"] = s.outbox;
  d["turns_completed"] = s.turns_completed;
  d["replies_delivered"] = s.replies_delivered;
  d["messages_accepted"] = s.messages_accepted;
  d["edits_sent"] = s.edits_sent;
  d["edits_dropped"] = s.edits_dropped;
  return d;
}

// ---- The Router ----------------------------------------------------------------------------------------

// The Router with the adapter it calls: destroyed together, router first, never with the GIL held.
// The Router waits (up to 5 s) for its strand to tear down; past that, or on a worker, work still queued
// may reach the adapter later, so the adapter object is left alive rather than freed under it.
struct LiveRouter {
  st::Context* context = nullptr;
  std::unique_ptr<st::ChatAdapter> adapter;
  std::shared_ptr<st::ChatAdapter> native;  // a built-in adapter (chat.cpp), shared with its Python object
  std::function<void()> inbound_stop;       // its inbound side, stopped before the router goes
  std::unique_ptr<st::Router> router;
  ~LiveRouter() {
    if (inbound_stop) inbound_stop();  // off a worker (DestroyOffWorker): returns once nothing more arrives
    const auto start = std::chrono::steady_clock::now();
    const bool on_worker = context && context->InWorkerThread();
    router.reset();
    if (on_worker || std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(4900)) {
      if (context) context->Log(st::LogLevel::warning, "the router's teardown did not finish; its adapter is kept");
      (void)adapter.release();
      if (native) new std::shared_ptr<st::ChatAdapter>(std::move(native));
      return;
    }
    adapter.reset();
    native.reset();
  }
};

// A Python timeout in seconds (None: none) as a wait limit; a bad one is refused by name.
std::optional<std::chrono::milliseconds> WaitLimit(std::optional<double> timeout) {
  if (!timeout) return std::nullopt;
  return Millis(*timeout, "timeout");
}

class PyRouter {
 public:
  PyRouter(py::object backend, py::object bridge, py::object capabilities, py::object config, double adapter_timeout)
      : backend_(std::move(backend)) {
    PyBackend& b = backend_.cast<PyBackend&>();
    auto live = std::make_shared<LiveRouter>();
    live->context = &b.context();
    st::ChatAdapter* adapter = nullptr;
    if (py::isinstance<sessionturn::python::NativeAdapter>(bridge)) {
      auto& native = bridge.cast<sessionturn::python::NativeAdapter&>();
      if (&native.GetContext() != &b.context())
        throw py::value_error("the adapter and the backend must use the same sessionturn.Context");
      if (native.driven) throw py::value_error("this adapter already serves another Router: close that one first");
      live->native = native.Shared();
      live->inbound_stop = native.InboundStop();
      adapter = live->native.get();
      native_ = bridge;
    } else if (py::isinstance<ImmediateAdapterMarker>(bridge))
      live->adapter = std::make_unique<ImmediateAdapter>(b.context(), CapabilitiesFrom(capabilities));
    else
      live->adapter = std::make_unique<PyChatAdapter>(b.context(), std::move(bridge), CapabilitiesFrom(capabilities),
                                                      Millis(adapter_timeout, "adapter_timeout"));
    if (!adapter) adapter = live->adapter.get();
    st::RouterOptions options = OptionsFrom(config);
    st::Result<std::unique_ptr<st::Router>> made;
    {
      py::gil_scoped_release release;
      made = st::Router::Create(b.context(), b.get(), *adapter, std::move(options));
      if (!made) live.reset();
    }
    if (!made) Raise(made.error());
    live->router = std::move(*made);
    live_ = std::move(live);
    if (native_) native_.cast<sessionturn::python::NativeAdapter&>().driven = true;
  }
  ~PyRouter() { Close(); }

  void Start() {
    With([](st::Router& r) { r.Start(); });
  }

  // done(disposition or None, error or None), once, from a worker (with the GIL).
  void HandleMessage(py::object message, py::object done) {
    st::InboundMessage m = MessageFrom(message);
    auto held = std::make_shared<PyHeld>(std::move(done));
    With([&](st::Router& r) {
      r.HandleMessage(std::move(m), [held](st::Result<st::Disposition> d) {
        py::gil_scoped_acquire gil;
        try {
          if (d) held->get()(std::string(st::ToString(*d)), py::none());
          else held->get()(py::none(), sessionturn::python::MakeException(d.error()));
        } catch (py::error_already_set& e) {
          e.discard_as_unraisable("sessionturn: Router.handle_message callback");
        }
      });
    });
  }

  std::string HandleMessageBlocking(py::object message, std::optional<double> timeout) {
    RefuseOnWorker("handle_message", "handle_message_async");
    const auto limit = WaitLimit(timeout);  // refused before the message is handed over
    auto w = std::make_shared<Handoff<st::Result<st::Disposition>>>();
    st::InboundMessage m = MessageFrom(message);
    With([&](st::Router& r) {
      r.HandleMessage(std::move(m), [w](st::Result<st::Disposition> d) { w->Set(std::move(d)); });
    });
    auto d = w->Wait(limit);
    if (!d) Raise(st::Error(st::Errc::timeout, "the router did not take the message in time"));
    if (!*d) Raise(d->error());
    return std::string(st::ToString(**d));
  }

  void HandleAction(py::object action) {
    st::InboundAction a = ActionFrom(action);
    With([&](st::Router& r) { r.HandleAction(std::move(a)); });
  }

  void Shutdown(py::object done) {
    auto held = std::make_shared<PyHeld>(std::move(done));
    With([&](st::Router& r) {
      r.Shutdown([held] {
        py::gil_scoped_acquire gil;
        try {
          if (!held->get().is_none()) held->get()();
        } catch (py::error_already_set& e) {
          e.discard_as_unraisable("sessionturn: Router shutdown callback");
        }
      });
    });
  }

  // True when the shutdown finished within `timeout` (None: however long it takes).
  bool ShutdownAndWait(std::optional<double> timeout) {
    RefuseOnWorker("stop", "stop_async");
    const auto limit = WaitLimit(timeout);
    auto w = std::make_shared<Handoff<bool>>();
    With([&](st::Router& r) { r.Shutdown([w] { w->Set(true); }); });
    return w->Wait(limit).has_value();
  }

  py::dict Stats() {
    st::RouterStats s;
    With([&](st::Router& r) { s = r.Stats(); });
    return StatsDict(s);
  }

  // Destroys the router (its store is released) and then the adapter, once no call uses them (off the
  // Context's workers: a garbage collection there must not wait for itself).
  void Close() {
    // A built-in adapter's inbound side stops in ~LiveRouter, before the router goes (off a worker).
    if (native_ && live_) native_.cast<sessionturn::python::NativeAdapter&>().driven = false;
    auto live = std::move(live_);
    live_.reset();
    if (live) DestroyOffWorker(backend_.cast<PyBackend&>().context_object().cast<std::shared_ptr<LibContext>>(),
                               std::move(live));
  }
  bool closed() const { return !live_; }

  // chat.cpp: the router a built-in adapter delivers into (with the GIL), held by the pointer.
  std::shared_ptr<st::Router> RouterFor(sessionturn::python::NativeAdapter& adapter) {
    if (!live_) Raise(st::Error(st::Errc::unavailable, "the router was closed"));
    if (!native_ || &native_.cast<sessionturn::python::NativeAdapter&>() != &adapter)
      throw py::value_error("this Router does not drive this adapter: give the adapter to the Router first");
    auto live = live_;
    return std::shared_ptr<st::Router>(live, live->router.get());
  }

 private:
  // Runs fn on the router without the GIL. The router is kept alive by this call (a concurrent
  // Close waits for it), and a last reference is dropped without the GIL too.
  template <typename Fn>
  void With(Fn&& fn) {
    std::shared_ptr<LiveRouter> live = live_;  // under the GIL
    if (!live) Raise(st::Error(st::Errc::unavailable, "the router was closed"));
    py::gil_scoped_release release;
    fn(*live->router);
    live.reset();
  }

  // A blocking call on a Context worker (a driver's callback, the adapter's plain method) would wait for
  // the worker that has to do the work.
  void RefuseOnWorker(const char* what, const char* instead) {
    if (backend_.cast<PyBackend&>().context().InWorkerThread())
      Raise(st::Error(st::Errc::would_block, std::string("Router.") + what +
                                                 "() was called on a worker of the router's Context; use " + instead +
                                                 " or another thread"));
  }

  py::object backend_;  // outlives the router
  py::object native_;   // the built-in adapter's Python object, when the router drives one
  std::shared_ptr<LiveRouter> live_;
};

PyRouter& RouterFrom(py::handle router) {
  // The facade's Router wraps the _Router as `_impl`.
  py::object impl = py::hasattr(router, "_impl") ? py::object(router.attr("_impl")) : py::reinterpret_borrow<py::object>(router);
  if (!py::isinstance<PyRouter>(impl)) throw py::type_error("router must be a sessionturn.Router");
  return impl.cast<PyRouter&>();
}

// ---- Helpers -------------------------------------------------------------------------------------------

std::string Envelope(const std::string& platform, const std::string& author_name, const std::string& author_id,
                     const std::string& text, const std::vector<std::string>& attachments, py::object context) {
  st::PromptEnvelope e;
  e.platform = platform;
  e.author_name = author_name;
  e.author_id = author_id;
  e.text = text;
  e.attachments_text = attachments;
  if (!context.is_none())
    for (const auto& m : context) e.thread_context.push_back({Text(m, "author_name"), Text(m, "text"), Flag(m, "is_bot")});
  return st::FormatPrompt(e);
}

std::vector<std::string> Render(const std::string& markdown, const std::string& dialect, std::size_t max_length,
                                const std::string& unit, std::size_t soft_length, bool label_parts) {
  st::RenderOptions o;
  o.dialect = ParseDialect(dialect);
  o.max_length = max_length;
  o.unit = ParseUnit(unit);
  o.soft_length = soft_length;
  o.label_parts = label_parts;
  auto parts = st::RenderReply(markdown, o);
  if (!parts) Raise(parts.error());
  std::vector<std::string> out;
  for (auto& p : *parts) out.push_back(std::move(p.text));
  return out;
}

}  // namespace

std::shared_ptr<st::Router> sessionturn::python::RouterFor(py::handle router, NativeAdapter& adapter) {
  return RouterFrom(router).RouterFor(adapter);
}

sessionturn::python::LibContext::LibContext(int threads) {
  if (threads < 1) throw py::value_error("threads must be at least 1");
  st::ContextOptions o;
  o.threads = threads;
  ctx_ = std::make_unique<st::Context>(o);
}

sessionturn::python::LibContext::~LibContext() {
  if (!ctx_) return;
  if (ctx_->InWorkerThread()) {  // a worker cannot join itself
    std::thread([c = std::move(ctx_)]() mutable { c.reset(); }).detach();
    return;
  }
  if (PyGILState_Check()) {
    py::gil_scoped_release release;
    ctx_.reset();
  } else {
    ctx_.reset();  // the last holder was a thread of ours (DestroyOffWorker)
  }
}

void sessionturn::python::LibContext::Stop() {
  py::gil_scoped_release release;
  ctx_->Stop();
}

py::object sessionturn::python::ContextOrDefault(py::object context) {
  if (context.is_none()) return py::module_::import("sessionturn._router").attr("default_context")();
  if (!py::isinstance<LibContext>(context)) throw py::type_error("context must be a sessionturn.Context or None");
  return context;
}

void sessionturn::python::RegisterRouter(py::module_& m) {
  py::class_<LibContext, std::shared_ptr<LibContext>>(m, "Context",
                                                    "The event loop the library's work runs on (worker threads).")
      .def(py::init<int>(), py::arg("threads") = 1)
      .def_property_readonly("threads", &LibContext::threads)
      .def("stop", &LibContext::Stop,
           "Stops the workers: operations in flight never report, new ones fail (done at interpreter exit).");

  py::class_<PyBackend>(m, "_Backend")
      .def("describe", &PyBackend::Describe)
      .def_property_readonly("context", &PyBackend::context_object);
  m.def("_local_backend", &MakeLocal, py::arg("context"), py::arg("state_dir"), py::arg("provider"),
        py::arg("agent_bin"), py::arg("idle_suspend"), py::arg("delete_after"), py::arg("owner"),
        py::arg("in_process"), py::arg("allow_shell"), py::arg("runtime_program"));
  m.def("_kubernetes_backend", &MakeKubernetes, py::arg("context"), py::arg("namespace"), py::arg("spawner"),
        py::arg("template_file"), py::arg("owner"), py::arg("kubeconfig"), py::arg("kube_context"));

  py::class_<AdapterDone>(m, "_Done", "Reports an adapter call's outcome to the router: done(result, error), once.")
      .def("__call__", &AdapterDone::Call, py::arg("result"), py::arg("error"));
  py::class_<CallQueue, std::shared_ptr<CallQueue>>(m, "_CallQueue", "The router's calls waiting for the adapter's loop.")
      .def("take", &CallQueue::Take, "Every call queued now: [(method, args, done)], on the loop.");

  py::class_<ImmediateAdapterMarker>(m, "_ImmediateAdapter",
                                     "A C++ adapter completing every call at once (bench/py_router.py)")
      .def(py::init<>());

  py::class_<PyRouter>(m, "_Router")
      .def(py::init<py::object, py::object, py::object, py::object, double>(), py::arg("backend"), py::arg("bridge"),
           py::arg("capabilities"), py::arg("config"), py::arg("adapter_timeout"))
      .def("start", &PyRouter::Start)
      .def("handle_message", &PyRouter::HandleMessage, py::arg("message"), py::arg("done"))
      .def("handle_message_blocking", &PyRouter::HandleMessageBlocking, py::arg("message"),
           py::arg("timeout") = py::none())
      .def("handle_action", &PyRouter::HandleAction, py::arg("action"))
      .def("shutdown", &PyRouter::Shutdown, py::arg("done"))
      .def("shutdown_and_wait", &PyRouter::ShutdownAndWait, py::arg("timeout") = py::none())
      .def("stats", &PyRouter::Stats)
      .def("close", &PyRouter::Close)
      .def_property_readonly("closed", &PyRouter::closed);

  m.def("session_name", &st::SessionName, py::arg("prefix"), py::arg("platform"), py::arg("owner_uid"),
        py::arg("chat"), py::arg("thread") = "",
        "The Session name of a chat thread: <prefix>-<platform>-<12 hex of SHA-256> (docs/routing-rules.md).");
  m.def("envelope", &Envelope, py::arg("platform"), py::arg("author_name"), py::arg("author_id"), py::arg("text"),
        py::arg("attachments") = std::vector<std::string>{}, py::arg("thread_context") = py::none(),
        "The prompt the router submits for a chat message (docs/routing-rules.md).");
  m.def("render", &Render, py::arg("markdown"), py::arg("dialect") = "plain", py::arg("max_length") = 4096,
        py::arg("unit") = "utf16", py::arg("soft_length") = 0, py::arg("label_parts") = true,
        "Markdown rendered in a chat dialect and split into parts within max_length (docs/rendering.md).");
  m.def(
      "split",
      [](const std::string& text, std::size_t limit, const std::string& unit, bool label_parts) {
        auto parts = st::SplitText(text, limit, ParseUnit(unit), label_parts);
        if (!parts) Raise(parts.error());
        return *parts;
      },
      py::arg("text"), py::arg("limit") = 4096, py::arg("unit") = "utf16", py::arg("label_parts") = true,
      "Plain text (no Markdown) split into parts of at most limit units, at paragraph, line, then word boundaries.");
  m.def(
      "measure", [](const std::string& text, const std::string& unit) { return st::MeasureLength(text, ParseUnit(unit)); },
      py::arg("text"), py::arg("unit") = "utf16", "The length of text in a platform's unit.");
  m.def("escape_markdown", &st::EscapeMarkdown, py::arg("text"), "Text quoted so Markdown shows it literally.");
}
