// The chat part of _sessionturn: the built-in TelegramAdapter and SlackAdapter (C++) usable from Python
// (given to a sessionturn.Router like an adapter written in Python, with their inbound sides: Telegram
// polling and webhooks, Slack Socket Mode and the Events API), and the two bridge programs as
// functions (`python -m sessionturn.telegram`, `python -m sessionturn.slack`: the same code, flags and
// exit statuses as sessionturn-telegram and sessionturn-slack).
//
// Rules as in router.cpp: the GIL is released around every call that may wait; a callback into Python
// from a worker takes it; a C++ adapter is destroyed off the Context's workers, without the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common.hpp"
#include "sessionturn/chat/slack.hpp"
#include "sessionturn/chat/telegram.hpp"

#if SESSIONTURN_PY_BRIDGES
#include "slack_bridge.hpp"
#include "telegram_bridge.hpp"
#endif

namespace py = pybind11;
namespace st = sessionturn;
using sessionturn::python::Handoff;
using sessionturn::python::LibContext;
using sessionturn::python::NativeAdapter;
using sessionturn::python::Raise;

namespace {

std::chrono::milliseconds Seconds(double s, const char* what) {
  if (!(s >= 0) || s > 365.0 * 24 * 3600) throw py::value_error(std::string(what) + " must be 0 to a year of seconds");
  return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000.0));
}

// Deletes a C++ adapter where that cannot deadlock: never on one of its Context's workers (a thread of
// its own then), never holding the GIL (its destructor may wait for work that needs it).
template <typename A>
std::shared_ptr<A> OwnedOffWorker(std::unique_ptr<A> adapter, std::shared_ptr<LibContext> context) {
  return std::shared_ptr<A>(adapter.release(), [context = std::move(context)](A* a) mutable {
    std::unique_ptr<A> owned(a);
    if (context->get().InWorkerThread()) {
      std::thread([owned = std::move(owned), context = std::move(context)]() mutable {
        owned.reset();
        context.reset();
      }).detach();
      return;
    }
    if (sessionturn::python::PythonAlive() && PyGILState_Check()) {
      py::gil_scoped_release release;
      owned.reset();
    } else {
      owned.reset();
    }
  });
}

// A Python callable run on a worker with the GIL, its exceptions reported as unraisable; the callable
// is released with the GIL wherever the adapter drops it (PyHeld).
std::function<void(st::Error)> FatalHandler(py::object on_fatal, const char* what) {
  if (on_fatal.is_none()) return [](st::Error) {};
  auto held = std::make_shared<sessionturn::python::PyHeld>(std::move(on_fatal));
  return [held, what](st::Error e) {
    if (!sessionturn::python::PythonAlive()) return;
    py::gil_scoped_acquire gil;
    try {
      held->get()(sessionturn::python::MakeException(e));
    } catch (py::error_already_set& err) {
      err.discard_as_unraisable(what);
    }
  };
}

// Drops a router held for one request without the GIL: the last holder runs the adapter's inbound stop,
// which waits for the adapter's strand.
void DropWithoutGil(std::shared_ptr<st::Router>& router) {
  py::gil_scoped_release release;
  router.reset();
}

template <typename A>
class PyPlatformAdapter : public NativeAdapter {
 public:
  std::shared_ptr<st::ChatAdapter> Shared() override { return adapter_; }
  st::Context& GetContext() override { return context_.cast<LibContext&>().get(); }
  const py::object& context_object() const { return context_; }

 protected:
  void RefuseOnWorker(const char* what) {
    if (GetContext().InWorkerThread())
      Raise(st::Error(st::Errc::would_block, std::string(what) + " was called on a worker of the adapter's Context"));
  }

  py::object context_;
  std::shared_ptr<A> adapter_;
};

// ---- Telegram ------------------------------------------------------------------------------------------

py::dict BotInfo(const st::TelegramBotInfo& b) {
  py::dict d;
  d["id"] = b.id;
  d["username"] = b.username;
  d["first_name"] = b.first_name;
  d["can_read_all_group_messages"] = b.can_read_all_group_messages;
  return d;
}

class PyTelegram final : public PyPlatformAdapter<st::TelegramAdapter> {
 public:
  PyTelegram(const std::string& token, const std::string& api_url, py::object context, const std::string& ca_pem,
             const std::string& proxy, double poll_timeout, double request_timeout, double chat_interval,
             int group_messages_per_minute, int max_attempts) {
    context_ = sessionturn::python::ContextOrDefault(std::move(context));
    st::TelegramOptions o;
    o.token = token;
    if (!api_url.empty()) o.api_url = api_url;
    o.tls.ca_pem = ca_pem;
    o.proxy = proxy;
    o.poll_timeout = std::chrono::duration_cast<std::chrono::seconds>(Seconds(poll_timeout, "poll_timeout"));
    o.request_timeout = Seconds(request_timeout, "request_timeout");
    o.chat_interval = Seconds(chat_interval, "chat_interval");
    o.group_messages_per_minute = group_messages_per_minute;
    o.max_attempts = max_attempts;
    auto made = st::TelegramAdapter::Create(GetContext(), std::move(o));
    if (!made) Raise(made.error());
    adapter_ = OwnedOffWorker(std::move(*made), context_.cast<std::shared_ptr<LibContext>>());
  }

  py::dict Connect() {
    RefuseOnWorker("TelegramAdapter.connect()");
    st::Result<st::TelegramBotInfo> info = st::Fail(st::Errc::internal, "unset");
    {
      py::gil_scoped_release release;
      info = adapter_->Connect();
    }
    if (!info) Raise(info.error());
    return BotInfo(*info);
  }

  void SetCommands() {
    RefuseOnWorker("TelegramAdapter.set_commands()");
    auto w = std::make_shared<Handoff<st::Status>>();
    adapter_->AsyncSetCommands(st::DefaultTelegramCommands(), [w](st::Status s) { w->Set(std::move(s)); });
    if (auto s = *w->Wait(); !s) Raise(s.error());
  }

  void SetWebhook(const std::string& url, const std::string& secret) {
    RefuseOnWorker("TelegramAdapter.set_webhook()");
    auto w = std::make_shared<Handoff<st::Status>>();
    adapter_->AsyncSetWebhook(url, secret, [w](st::Status s) { w->Set(std::move(s)); });
    if (auto s = *w->Wait(); !s) Raise(s.error());
  }

  void SetWebhookSecret(const std::string& secret) { adapter_->SetWebhookSecret(secret); }

  std::function<void()> InboundStop() override {
    std::weak_ptr<st::TelegramAdapter> weak = adapter_;
    return [weak] {
      if (auto a = weak.lock()) a->StopPolling();
    };
  }

  void StartPolling(py::object router, py::object on_fatal) {
    auto fatal = FatalHandler(std::move(on_fatal), "sessionturn: TelegramAdapter on_fatal");
    auto r = sessionturn::python::RouterFor(router, *this);
    // Posted with the GIL held, so no close of the router comes between the check above and the start:
    // a close's inbound stop is posted after it, to the same strand.
    adapter_->StartPolling(*r, std::move(fatal));
    DropWithoutGil(r);
  }

  void StopPolling() {
    py::gil_scoped_release release;
    adapter_->StopPolling();
  }

  bool Polling() const { return adapter_->Polling(); }

  py::tuple HandleWebhook(std::optional<std::string> secret, const py::bytes& body, py::object router) {
    RefuseOnWorker("TelegramAdapter.handle_webhook()");
    auto r = sessionturn::python::RouterFor(router, *this);  // held until the answer: a close waits for it
    auto w = std::make_shared<Handoff<std::pair<int, std::string>>>();
    std::string text = body;
    {
      py::gil_scoped_release release;
      adapter_->HandleWebhook(secret ? std::optional<std::string_view>(*secret) : std::nullopt, text, *r,
                              [w](int status, std::string b) { w->Set({status, std::move(b)}); });
    }
    std::pair<int, std::string> answer;
    try {
      answer = *w->Wait();
    } catch (...) {
      DropWithoutGil(r);
      throw;
    }
    DropWithoutGil(r);
    return py::make_tuple(answer.first, answer.second);
  }

  py::dict Stats() const {
    const st::TelegramStats s = adapter_->Stats();
    py::dict d;
    d["updates_received"] = s.updates_received;
    d["updates_ignored"] = s.updates_ignored;
    d["calls"] = s.calls;
    d["call_errors"] = s.call_errors;
    d["errors_by_code"] = s.errors_by_code;
    d["rate_limited"] = s.rate_limited;
    d["plain_text_retries"] = s.plain_text_retries;
    d["pacing_waits"] = s.pacing_waits;
    d["webhook_refused"] = s.webhook_refused;
    return d;
  }
};

// ---- Slack ---------------------------------------------------------------------------------------------

class PySlack final : public PyPlatformAdapter<st::SlackAdapter> {
 public:
  PySlack(const std::string& bot_token, const std::string& app_token, const std::string& signing_secret,
          const std::string& api_url, py::object context, const std::string& ca_pem, const std::string& proxy,
          double request_timeout, double channel_interval, int max_attempts) {
    context_ = sessionturn::python::ContextOrDefault(std::move(context));
    st::SlackOptions o;
    o.bot_token = bot_token;
    o.app_token = app_token;
    o.signing_secret = signing_secret;
    if (!api_url.empty()) o.api_url = api_url;
    o.tls.ca_pem = ca_pem;
    o.proxy = proxy;
    o.request_timeout = Seconds(request_timeout, "request_timeout");
    o.channel_interval = Seconds(channel_interval, "channel_interval");
    o.max_attempts = max_attempts;
    auto made = st::SlackAdapter::Create(GetContext(), std::move(o));
    if (!made) Raise(made.error());
    adapter_ = OwnedOffWorker(std::move(*made), context_.cast<std::shared_ptr<LibContext>>());
  }

  py::dict Connect() {
    RefuseOnWorker("SlackAdapter.connect()");
    st::Result<st::SlackBotInfo> info = st::Fail(st::Errc::internal, "unset");
    {
      py::gil_scoped_release release;
      info = adapter_->Connect();
    }
    if (!info) Raise(info.error());
    py::dict d;
    d["team_id"] = info->team_id;
    d["team"] = info->team;
    d["user_id"] = info->user_id;
    d["bot_id"] = info->bot_id;
    d["user"] = info->user;
    d["url"] = info->url;
    return d;
  }

  std::function<void()> InboundStop() override {
    std::weak_ptr<st::SlackAdapter> weak = adapter_;
    return [weak] {
      if (auto a = weak.lock()) a->StopInbound();
    };
  }

  void StartSocketMode(py::object router, py::object on_fatal) {
    auto fatal = FatalHandler(std::move(on_fatal), "sessionturn: SlackAdapter on_fatal");
    auto r = sessionturn::python::RouterFor(router, *this);
    adapter_->StartSocketMode(*r, std::move(fatal));  // posted with the GIL held, as StartPolling
    DropWithoutGil(r);
  }

  void StopInbound() {
    py::gil_scoped_release release;
    adapter_->StopInbound();
  }

  bool SocketConnected() const { return adapter_->SocketConnected(); }

  py::tuple HandleEvents(const py::bytes& body, py::object router, const std::string& content_type,
                         const std::string& signature, const std::string& timestamp, const std::string& retry_num,
                         const std::string& retry_reason) {
    RefuseOnWorker("SlackAdapter.handle_events()");
    auto r = sessionturn::python::RouterFor(router, *this);  // held until the answer; later deliveries are
                                                              // stopped by the router's close (InboundStop)
    st::SlackEventsRequest req;
    req.content_type = content_type;
    req.signature = signature;
    req.timestamp = timestamp;
    req.retry_num = retry_num;
    req.retry_reason = retry_reason;
    req.body = body;
    struct Answer {
      int status;
      std::string content_type, body;
    };
    auto w = std::make_shared<Handoff<Answer>>();
    {
      py::gil_scoped_release release;
      adapter_->HandleEvents(req, *r, [w](int status, std::string type, std::string b) {
        w->Set({status, std::move(type), std::move(b)});
      });
    }
    Answer a;
    try {
      a = *w->Wait();
    } catch (...) {
      DropWithoutGil(r);
      throw;
    }
    DropWithoutGil(r);
    return py::make_tuple(a.status, a.content_type, a.body);
  }

  py::dict Stats() const {
    const st::SlackStats s = adapter_->Stats();
    py::dict d;
    d["events_received"] = s.events_received;
    d["events_ignored"] = s.events_ignored;
    d["redeliveries"] = s.redeliveries;
    d["calls"] = s.calls;
    d["call_errors"] = s.call_errors;
    d["errors_by_code"] = s.errors_by_code;
    d["rate_limited"] = s.rate_limited;
    d["pacing_waits"] = s.pacing_waits;
    d["plain_text_retries"] = s.plain_text_retries;
    d["socket_connections"] = s.socket_connections;
    d["socket_disconnects"] = s.socket_disconnects;
    d["requests_refused"] = s.requests_refused;
    return d;
  }
};

// ---- The bridge programs -------------------------------------------------------------------------------

// Runs a bridge's main with `argv` (argv[0] is the program's name) on this thread, without the GIL: it
// blocks SIGINT and SIGTERM here and waits for them itself, so Ctrl-C stops the bridge gracefully.
// The thread's signal mask is restored afterwards and the C++ streams flushed, so what the bridge wrote
// comes before what Python writes next.
int RunBridge(int (*main_fn)(int, char**), const std::vector<std::string>& args) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  sigset_t saved;
  pthread_sigmask(SIG_SETMASK, nullptr, &saved);
  int status = 0;
  {
    py::gil_scoped_release release;
    status = main_fn(static_cast<int>(copy.size()), argv.data());
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
  }
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  return status;
}

}  // namespace

void sessionturn::python::RegisterChat(py::module_& m) {
  py::class_<NativeAdapter>(m, "_NativeAdapter");

  py::class_<PyTelegram, NativeAdapter>(m, "TelegramAdapter",
                                        "The built-in Telegram adapter (Bot API): hand it to a Router, then "
                                        "start_polling(router) or feed handle_webhook().")
      .def(py::init<const std::string&, const std::string&, py::object, const std::string&, const std::string&,
                    double, double, double, int, int>(),
           py::arg("token"), py::kw_only(), py::arg("api_url") = "", py::arg("context") = py::none(),
           py::arg("ca_pem") = "", py::arg("proxy") = "", py::arg("poll_timeout") = 50.0,
           py::arg("request_timeout") = 30.0, py::arg("chat_interval") = 1.0,
           py::arg("group_messages_per_minute") = 20, py::arg("max_attempts") = 3)
      .def("connect", &PyTelegram::Connect, "getMe: the bot's id, username, first_name. Call it first.")
      .def("set_commands", &PyTelegram::SetCommands, "setMyCommands with the router's chat commands.")
      .def("set_webhook", &PyTelegram::SetWebhook, py::arg("url"), py::arg("secret"),
           "setWebhook (deleteWebhook when url is empty).")
      .def("set_webhook_secret", &PyTelegram::SetWebhookSecret, py::arg("secret"))
      .def("start_polling", &PyTelegram::StartPolling, py::arg("router"), py::arg("on_fatal") = py::none(),
           "Long polling into the router; on_fatal(error) runs once, on a worker, when polling cannot go on.")
      .def("stop_polling", &PyTelegram::StopPolling)
      .def_property_readonly("polling", &PyTelegram::Polling)
      .def("handle_webhook", &PyTelegram::HandleWebhook, py::arg("secret_header"), py::arg("body"), py::arg("router"),
           "One webhook request: (HTTP status, body) to answer Telegram with.")
      .def("stats", &PyTelegram::Stats)
      .def_property_readonly("context", &PyTelegram::context_object);

  py::class_<PySlack, NativeAdapter>(m, "SlackAdapter",
                                     "The built-in Slack adapter (Web API): hand it to a Router, then "
                                     "start_socket_mode(router) or feed handle_events().")
      .def(py::init<const std::string&, const std::string&, const std::string&, const std::string&, py::object,
                    const std::string&, const std::string&, double, double, int>(),
           py::arg("bot_token"), py::kw_only(), py::arg("app_token") = "", py::arg("signing_secret") = "",
           py::arg("api_url") = "", py::arg("context") = py::none(), py::arg("ca_pem") = "", py::arg("proxy") = "",
           py::arg("request_timeout") = 30.0, py::arg("channel_interval") = 1.0, py::arg("max_attempts") = 3)
      .def("connect", &PySlack::Connect, "auth.test: team_id, team, user_id, bot_id, user, url. Call it first.")
      .def("start_socket_mode", &PySlack::StartSocketMode, py::arg("router"), py::arg("on_fatal") = py::none())
      .def("stop_inbound", &PySlack::StopInbound)
      .def_property_readonly("socket_connected", &PySlack::SocketConnected)
      .def("handle_events", &PySlack::HandleEvents, py::arg("body"), py::arg("router"), py::kw_only(),
           py::arg("content_type"), py::arg("signature"), py::arg("timestamp"), py::arg("retry_num") = "",
           py::arg("retry_reason") = "",
           "One Events API request: (HTTP status, content type, body) to answer Slack with.")
      .def("stats", &PySlack::Stats)
      .def_property_readonly("context", &PySlack::context_object);

#if SESSIONTURN_PY_BRIDGES
  m.def("_run_telegram", [](const std::vector<std::string>& argv) { return RunBridge(&sessionturn_bridge::TelegramMain, argv); },
        py::arg("argv"));
  m.def("_run_slack", [](const std::vector<std::string>& argv) { return RunBridge(&sessionturn_bridge::SlackMain, argv); },
        py::arg("argv"));
  m.attr("_has_bridges") = true;
#else
  m.attr("_has_bridges") = false;
#endif
}
