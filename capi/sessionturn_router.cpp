// The C ABI's Router (st_router_*) driving a chat adapter written in C (st_adapter, st_completion).
// The firewall and the conventions are sessionturn_c.cpp's.
//
// An adapter call is a ForeignCall (src/foreign_call.hpp): the C side finishes its st_completion from
// any thread, once; the router's handler runs on the Context; a call never finished fails after the
// adapter timeout. The C callbacks run behind a gate that st_router_free closes, so none runs (or is
// running on another thread) once it returned, and userdata may go.
#include "sessionturn.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "capi_internal.hpp"
#include "capi_router.hpp"
#include "foreign_call.hpp"
#include "sessionturn/router.hpp"
#include "sessionturn/routing.hpp"

using namespace sessionturn::capi;  // NOLINT: the firewall helpers

namespace {

using PostCall = st::detail::ForeignCall<std::string>;

// Lets st_router_free guarantee that no adapter callback runs once it returned: callbacks run under
// the lock, Close() takes it (a callback that frees its own router already holds it on this thread).
class AdapterGate {
 public:
  template <typename Fn>
  bool Run(Fn&& fn) {
    std::lock_guard lock(mu_);
    if (!open_) return false;
    inside_ = std::this_thread::get_id();
    fn();
    inside_ = std::thread::id{};
    return true;
  }
  void Close() {
    if (inside_.load() == std::this_thread::get_id()) {
      open_ = false;
      return;
    }
    std::lock_guard lock(mu_);
    open_ = false;
  }

 private:
  std::mutex mu_;
  bool open_ = true;
  std::atomic<std::thread::id> inside_{};
};

}  // namespace

// One adapter call's completion, owned by the C adapter until it finishes it.
struct st_completion {
  std::shared_ptr<PostCall> call;
  bool needs_id = false;  // a post: the new message's id is the result
  std::string what;       // "post", "edit", "typing"
};

namespace {

// The views of one call: a thread ref and an outbound message pointing into C++ strings.
struct ThreadView {
  st_thread_ref view{};
  explicit ThreadView(const st::ThreadRef& w) {
    view.platform = w.platform.c_str();
    view.workspace = w.workspace.c_str();
    view.chat = w.chat.c_str();
    view.thread = w.thread.c_str();
  }
};

struct MessageView {
  std::vector<st_button> buttons;
  st_outbound_message view{};
  explicit MessageView(const st::OutboundMessage& m) {
    for (std::size_t row = 0; row < m.buttons.size(); ++row)
      for (const auto& b : m.buttons[row]) buttons.push_back(st_button{b.label.c_str(), b.data.c_str(), row});
    view.version = ST_OUTBOUND_MESSAGE_VERSION;
    view.text = m.text.c_str();
    view.buttons = buttons.empty() ? nullptr : buttons.data();
    view.button_count = buttons.size();
    view.reply_to = m.reply_to.c_str();
  }
};

class CAdapter final : public st::ChatAdapter {
 public:
  CAdapter(st::Context& ctx, const st_adapter& c, st::ChatCapabilities caps, std::chrono::milliseconds timeout)
      : ctx_(ctx), c_(c), caps_(std::move(caps)), timeout_(timeout) {}

  st::ChatCapabilities Capabilities() const override { return caps_; }

  void AsyncPost(const st::ThreadRef& where, st::OutboundMessage message, st::ChatHandler<std::string> handler) override {
    Call("post", true, std::move(handler), [&](st_completion* done) {
      ThreadView w(where);
      MessageView m(message);
      c_.post(&w.view, &m.view, done, c_.userdata);
    });
  }

  void AsyncEdit(const st::ThreadRef& where, const std::string& message_id, st::OutboundMessage message,
                 st::ChatStatusHandler handler) override {
    Call("edit", false, StatusOnly(std::move(handler)), [&](st_completion* done) {
      ThreadView w(where);
      MessageView m(message);
      c_.edit(&w.view, message_id.c_str(), &m.view, done, c_.userdata);
    });
  }

  void AsyncTyping(const st::ThreadRef& where, st::ChatStatusHandler handler) override {
    if (!c_.typing) return ctx_.Post([handler = std::move(handler)] { handler({}); });
    Call("typing", false, StatusOnly(std::move(handler)), [&](st_completion* done) {
      ThreadView w(where);
      c_.typing(&w.view, done, c_.userdata);
    });
  }

  // No adapter callback starts after this returns (one running on another thread is waited for).
  void Close() { gate_.Close(); }

 private:
  static st::ChatHandler<std::string> StatusOnly(st::ChatStatusHandler handler) {
    return [handler = std::move(handler)](st::Result<std::string> r) {
      if (r) handler({});
      else handler(st::Fail(r.error()));
    };
  }

  template <typename Invoke>
  void Call(const char* what, bool needs_id, st::ChatHandler<std::string> handler, Invoke&& invoke) {
    auto call = PostCall::Start(ctx_, std::string("the adapter's ") + what, timeout_, std::move(handler),
                                "st_completion_ok or st_completion_fail was not called");
    auto* done = new st_completion{call, needs_id, what};
    const bool ran = gate_.Run([&] {
      try {
        invoke(done);
      } catch (...) {  // a C++ caller's callback threw: whether it kept `done` is unknown, so leave it
        ctx_.Log(st::LogLevel::error, std::string("the adapter's ") + what + " callback threw; ignored");
        call->Complete(st::Fail(st::Errc::failed, std::string("the adapter's ") + what + " threw"));
      }
    });
    if (!ran) {
      delete done;
      call->Complete(st::Fail(st::Errc::cancelled, "the router is being freed"));
    }
  }

  st::Context& ctx_;
  st_adapter c_;
  st::ChatCapabilities caps_;
  std::chrono::milliseconds timeout_;
  AdapterGate gate_;
};

}  // namespace

struct st_router {
  st::Context* context = nullptr;
  std::chrono::milliseconds shutdown_budget{10'000};
  std::unique_ptr<CAdapter> adapter;
  std::unique_ptr<st::Router> router;
};

// ---- Completions ----------------------------------------------------------------------------------------

ST_API st_status st_completion_ok(st_completion* completion, const char* message_id) {
  return GuardStatus("st_completion_ok", [&]() -> st::Status {
    if (!completion) return st::Fail(InvalidArgument("completion is NULL"));
    std::unique_ptr<st_completion> own(completion);
    if (own->needs_id && (!message_id || !*message_id)) {
      own->call->Complete(st::Fail(st::Errc::failed, "the adapter's post completed without a message id"));
      return st::Fail(InvalidArgument("a post's completion needs the new message's id (message_id is NULL or empty)"));
    }
    own->call->Complete(own->needs_id ? std::string(message_id) : std::string());
    return {};
  });
}

ST_API st_status st_completion_fail(st_completion* completion, st_status status, const char* message,
                                    int64_t retry_after_ms) {
  return GuardStatus("st_completion_fail", [&]() -> st::Status {
    if (!completion) return st::Fail(InvalidArgument("completion is NULL"));
    std::unique_ptr<st_completion> own(completion);
    st::Errc code = st::Errc::failed;
    if (status < 0 && status >= ST_E_INTERNAL) code = static_cast<st::Errc>(-status);
    std::string text = "the adapter's " + own->what + " failed";
    if (message && *message) text += ": " + std::string(message);
    st::Error error(code, std::move(text));
    if (retry_after_ms > 0) error.retry_after = std::chrono::milliseconds(retry_after_ms);
    own->call->Complete(st::Fail(std::move(error)));
    if (status >= 0 || status < ST_E_INTERNAL)
      return st::Fail(InvalidArgument("status " + std::to_string(status) +
                                      " is not an ST_E_* error (the call was failed with ST_E_FAILED)"));
    return {};
  });
}

// ---- Options --------------------------------------------------------------------------------------------

namespace {

st::Result<std::vector<std::string>> Strings(const char* const* items, size_t count, const std::string& what) {
  std::vector<std::string> out;
  if (count == 0) return out;
  if (!items) return st::Fail(InvalidArgument(what + " is NULL but its count is " + std::to_string(count)));
  for (size_t i = 0; i < count; ++i) {
    if (!items[i]) return st::Fail(InvalidArgument(what + "[" + std::to_string(i) + "] is NULL"));
    out.emplace_back(items[i]);
  }
  return out;
}

st::Result<std::map<std::string, std::string>> Pairs(const char* const* items, size_t count, const std::string& what) {
  auto list = Strings(items, count, what);
  if (!list) return st::Fail(list.error());
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string& kv = (*list)[i];
    const auto eq = kv.find('=');
    if (eq == 0 || eq == std::string::npos)
      return st::Fail(InvalidArgument(what + "[" + std::to_string(i) + "] \"" + kv + "\" is not key=value"));
    out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return out;
}

st::Result<st::RouteConfig> RouteFrom(const st_route& in, size_t index) {
  const std::string at = "st_router_options.routes[" + std::to_string(index) + "]";
  if (auto ok = CheckVersion(in.version, ST_ROUTE_VERSION, at.c_str()); !ok) return st::Fail(ok.error());
  st::RouteConfig r;
  r.name = in.name && *in.name ? in.name : "route-" + std::to_string(index);
  r.platform = Str(in.platform);
  if (in.require_mention < -1 || in.require_mention > 1)
    return st::Fail(InvalidArgument(at + ".require_mention must be -1, 0 or 1, not " +
                                    std::to_string(in.require_mention)));
  if (in.require_mention >= 0) r.require_mention = in.require_mention == 1;
  r.allow_bots = in.allow_bots != 0;
  struct List {
    std::vector<std::string>* into;
    const char* const* items;
    size_t count;
    const char* name;
  };
  for (const List& l : {List{&r.chats, in.chats, in.chat_count, ".chats"}, List{&r.users, in.users, in.user_count, ".users"},
                        List{&r.triggers, in.triggers, in.trigger_count, ".triggers"},
                        List{&r.excludes, in.excludes, in.exclude_count, ".excludes"},
                        List{&r.allowed_bots, in.allowed_bots, in.allowed_bot_count, ".allowed_bots"},
                        List{&r.admins, in.admins, in.admin_count, ".admins"}}) {
    auto v = Strings(l.items, l.count, at + l.name);
    if (!v) return st::Fail(v.error());
    *l.into = std::move(*v);
  }
  auto labels = Pairs(in.session_labels, in.session_label_count, at + ".session_labels");
  if (!labels) return st::Fail(labels.error());
  auto annotations = Pairs(in.session_annotations, in.session_annotation_count, at + ".session_annotations");
  if (!annotations) return st::Fail(annotations.error());
  auto parameters = Pairs(in.session_parameters, in.session_parameter_count, at + ".session_parameters");
  if (!parameters) return st::Fail(parameters.error());
  r.session.labels = std::move(*labels);
  r.session.annotations = std::move(*annotations);
  r.session.parameters = std::move(*parameters);
  return r;
}

st::Result<st::RouterOptions> OptionsFrom(const st_router_options& in) {
  if (auto ok = CheckVersion(in.version, ST_ROUTER_OPTIONS_VERSION, "st_router_options"); !ok)
    return st::Fail(ok.error());
  st::RouterOptions o;
  if (in.session_prefix && *in.session_prefix) o.session_prefix = in.session_prefix;
  o.owner_uid = Str(in.owner_uid);
  if (in.route_count > 0 && !in.routes)
    return st::Fail(InvalidArgument("st_router_options.routes is NULL but route_count is " +
                                    std::to_string(in.route_count)));
  for (size_t i = 0; i < in.route_count; ++i) {
    auto r = RouteFrom(in.routes[i], i);
    if (!r) return st::Fail(r.error());
    o.routes.push_back(std::move(*r));
  }
  o.store_path = Str(in.store_path);
  o.max_queued = in.max_queued;
  o.max_in_flight = in.max_in_flight;
  o.progress_interval = OrDefault(in.progress_interval_ms, o.progress_interval);
  o.turn_timeout = OrDefault(in.turn_timeout_ms, o.turn_timeout);
  o.wait_ready_timeout = OrDefault(in.wait_ready_timeout_ms, o.wait_ready_timeout);
  o.answer_timeout = OrDefault(in.answer_timeout_ms, o.answer_timeout);
  if (in.answerers == ST_ANSWERERS_TURN_AUTHOR) o.answerers = st::AnswerPolicy::turn_author;
  else if (in.answerers == ST_ANSWERERS_ALLOWED_USERS) o.answerers = st::AnswerPolicy::allowed_users;
  else
    return st::Fail(InvalidArgument("st_router_options.answerers is " + std::to_string(in.answerers) +
                                    ", not one of ST_ANSWERERS_*"));
  o.decline_questions = in.decline_questions != 0;
  o.thread_context_messages = in.thread_context_messages;
  o.show_usage = in.show_usage != 0;
  o.bot_username = Str(in.bot_username);
  o.shutdown_budget = OrDefault(in.shutdown_budget_ms, o.shutdown_budget);
  o.delivery_attempts = in.delivery_attempts;
  return o;
}

st::Result<st::ChatCapabilities> CapabilitiesFrom(const st_adapter& adapter) {
  st_capabilities c = ST_CAPABILITIES_INIT;
  if (adapter.capabilities) adapter.capabilities(&c, adapter.userdata);
  if (c.version != ST_CAPABILITIES_VERSION)
    return st::Fail(InvalidArgument("the adapter's capabilities callback changed st_capabilities.version"));
  st::ChatCapabilities caps;
  auto unit = LengthUnitFrom(c.unit, "st_capabilities.unit");
  if (!unit) return st::Fail(unit.error());
  auto dialect = MarkupDialectFrom(c.dialect, "st_capabilities.dialect");
  if (!dialect) return st::Fail(dialect.error());
  if (c.soft_length != 0 && c.soft_length < st::kMinPartLength)
    return st::Fail(InvalidArgument("st_capabilities.soft_length is " + std::to_string(c.soft_length) +
                                    "; 0 (none) or at least " + std::to_string(st::kMinPartLength)));
  if (c.max_length < st::kMinPartLength)
    return st::Fail(InvalidArgument("st_capabilities.max_length is " + std::to_string(c.max_length) +
                                    "; a part needs at least " + std::to_string(st::kMinPartLength)));
  if (c.edits_per_interval < 1)
    return st::Fail(InvalidArgument("st_capabilities.edits_per_interval must be at least 1, not " +
                                    std::to_string(c.edits_per_interval)));
  caps.max_length = c.max_length;
  caps.unit = *unit;
  caps.soft_length = c.soft_length;
  caps.dialect = *dialect;
  caps.edits_per_interval = c.edits_per_interval;
  if (c.edit_interval_ms < 0)
    return st::Fail(InvalidArgument("st_capabilities.edit_interval_ms must not be negative, got " +
                                    std::to_string(c.edit_interval_ms)));
  caps.edit_interval = std::chrono::milliseconds(c.edit_interval_ms);  // 0: no pacing
  caps.buttons = c.buttons != 0;
  caps.button_data_limit = c.button_data_limit;
  caps.threads = c.threads != 0;
  caps.typing = c.typing != 0 && adapter.typing != nullptr;
  caps.fetch_thread = false;  // C adapters cannot fetch history (yet)
  caps.command_prefix = Str(c.command_prefix);
  return caps;
}

st::Result<st::InboundMessage> MessageFrom(const st_inbound_message* in) {
  if (!in) return st::Fail(InvalidArgument("message is NULL"));
  if (auto ok = CheckVersion(in->version, ST_INBOUND_MESSAGE_VERSION, "st_inbound_message"); !ok)
    return st::Fail(ok.error());
  st::InboundMessage m;
  m.platform = Str(in->platform);
  m.workspace = Str(in->workspace);
  m.chat = Str(in->chat);
  m.thread = Str(in->thread);
  m.message_id = Str(in->message_id);
  m.reply_to_message_id = Str(in->reply_to_message_id);
  m.author_id = Str(in->author_id);
  m.author_name = Str(in->author_name);
  m.text = Str(in->text);
  auto attachments = Strings(in->attachments_text, in->attachment_count, "st_inbound_message.attachments_text");
  if (!attachments) return st::Fail(attachments.error());
  m.attachments_text = std::move(*attachments);
  m.is_bot = in->is_bot != 0;
  m.is_self = in->is_self != 0;
  m.mentions_bot = in->mentions_bot != 0;
  m.is_private_chat = in->is_private_chat != 0;
  m.event_id = Str(in->event_id);
  m.received = std::chrono::system_clock::now();
  switch (in->kind) {
    case ST_MESSAGE_NEW: m.kind = st::MessageKind::new_message; break;
    case ST_MESSAGE_EDITED: m.kind = st::MessageKind::edited; break;
    case ST_MESSAGE_DELETED: m.kind = st::MessageKind::deleted; break;
    default:
      return st::Fail(InvalidArgument("st_inbound_message.kind is " + std::to_string(in->kind) +
                                      ", not one of ST_MESSAGE_*"));
  }
  return m;
}

int ToCDisposition(st::Disposition d) {
  switch (d) {
    case st::Disposition::accepted: return ST_DISPOSITION_ACCEPTED;
    case st::Disposition::duplicate: return ST_DISPOSITION_DUPLICATE;
    case st::Disposition::ignored: return ST_DISPOSITION_IGNORED;
    case st::Disposition::refused: return ST_DISPOSITION_REFUSED;
  }
  return ST_DISPOSITION_IGNORED;
}

st::Status CheckRouter(const st_router* router) {
  if (!router || !router->router) return st::Fail(InvalidArgument("router is NULL"));
  return {};
}

st::Status RefuseOnWorker(const st_router* router, const char* what) {
  if (router->context->InWorkerThread())
    return st::Fail(st::Errc::would_block,
                    std::string(what) + " was called from a callback (a Context worker thread); use the async form");
  return {};
}

// Waits up to `timeout` for a worker's report; nullopt when it did not come in time.
template <typename T>
std::optional<T> WaitFor(std::future<T>& future, std::chrono::milliseconds timeout) {
  if (future.wait_for(timeout) != std::future_status::ready) return std::nullopt;
  return future.get();
}

}  // namespace

// ---- Router ---------------------------------------------------------------------------------------------

ST_API const char* st_disposition_name(int disposition) {
  return Guard("st_disposition_name", static_cast<const char*>("unknown"), [&]() -> const char* {
    switch (disposition) {
      case ST_DISPOSITION_ACCEPTED: return "accepted";
      case ST_DISPOSITION_DUPLICATE: return "duplicate";
      case ST_DISPOSITION_IGNORED: return "ignored";
      case ST_DISPOSITION_REFUSED: return "refused";
    }
    return "unknown";
  });
}

ST_API st_status st_router_new(st_router** out, st_backend* backend, const st_adapter* adapter,
                               const st_router_options* options) {
  return GuardStatus("st_router_new", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (!backend || !backend->backend) return st::Fail(InvalidArgument("backend is NULL"));
    if (!adapter) return st::Fail(InvalidArgument("adapter is NULL"));
    if (auto ok = CheckVersion(adapter->version, ST_ADAPTER_VERSION, "st_adapter"); !ok) return ok;
    if (!adapter->post || !adapter->edit) return st::Fail(InvalidArgument("st_adapter.post and .edit are required"));
    if (!options) return st::Fail(InvalidArgument("options is NULL (at least one route is required)"));
    auto opts = OptionsFrom(*options);
    if (!opts) return st::Fail(opts.error());
    auto caps = CapabilitiesFrom(*adapter);
    if (!caps) return st::Fail(caps.error());
    auto handle = std::make_unique<st_router>();
    handle->context = backend->context;
    handle->shutdown_budget = opts->shutdown_budget;
    handle->adapter = std::make_unique<CAdapter>(*backend->context, *adapter, std::move(*caps),
                                                 OrDefault(options->adapter_timeout_ms, std::chrono::seconds(60)));
    auto made = st::Router::Create(*backend->context, *backend->backend, *handle->adapter, std::move(*opts));
    if (!made) return st::Fail(made.error());
    handle->router = std::move(*made);
    *out = handle.release();
    return {};
  });
}

ST_API st_status st_router_start(st_router* router) {
  return GuardStatus("st_router_start", [&]() -> st::Status {
    if (auto ok = CheckRouter(router); !ok) return ok;
    router->router->Start();
    return {};
  });
}

ST_API st_status st_router_handle_message(st_router* router, const st_inbound_message* message,
                                          st_disposition_fn done, void* payload) {
  return GuardStatus("st_router_handle_message", [&]() -> st::Status {
    if (auto ok = CheckRouter(router); !ok) return ok;
    auto m = MessageFrom(message);
    if (!m) return st::Fail(m.error());
    std::function<void(st::Result<st::Disposition>)> handler;
    if (done) {
      st::Context* context = router->context;
      handler = [done, payload, context](st::Result<st::Disposition> d) {
        CallUser(context, "handle_message done", [&] {
          if (d) return done(ST_OK, ToCDisposition(*d), "", payload);
          const st_status code = ToStatus(d.error().code);
          done(code == ST_OK ? ST_E_INTERNAL : code, -1, d.error().message.c_str(), payload);
        });
      };
    }
    router->router->HandleMessage(std::move(*m), std::move(handler));
    return {};
  });
}

ST_API st_status st_router_handle_message_wait(int* disposition, st_router* router, const st_inbound_message* message,
                                               int64_t timeout_ms) {
  return GuardStatus("st_router_handle_message_wait", [&]() -> st::Status {
    if (disposition) *disposition = -1;
    if (auto ok = CheckRouter(router); !ok) return ok;
    if (auto ok = RefuseOnWorker(router, "st_router_handle_message_wait"); !ok) return ok;
    auto m = MessageFrom(message);
    if (!m) return st::Fail(m.error());
    auto taken = std::make_shared<std::promise<st::Result<st::Disposition>>>();
    auto future = taken->get_future();
    router->router->HandleMessage(std::move(*m), [taken](st::Result<st::Disposition> d) { taken->set_value(std::move(d)); });
    auto got = WaitFor(future, OrDefault(timeout_ms, std::chrono::seconds(60)));
    if (!got) return st::Fail(st::Errc::timeout, "the router did not take the message in time (it may still take it)");
    if (!*got) return st::Fail(got->error());
    if (disposition) *disposition = ToCDisposition(**got);
    return {};
  });
}

ST_API st_status st_router_handle_action(st_router* router, const st_inbound_action* action) {
  return GuardStatus("st_router_handle_action", [&]() -> st::Status {
    if (auto ok = CheckRouter(router); !ok) return ok;
    if (!action) return st::Fail(InvalidArgument("action is NULL"));
    if (auto ok = CheckVersion(action->version, ST_INBOUND_ACTION_VERSION, "st_inbound_action"); !ok) return ok;
    st::InboundAction a;
    a.platform = Str(action->platform);
    a.workspace = Str(action->workspace);
    a.chat = Str(action->chat);
    a.thread = Str(action->thread);
    a.message_id = Str(action->message_id);
    a.author_id = Str(action->author_id);
    a.author_name = Str(action->author_name);
    a.data = Str(action->data);
    a.event_id = Str(action->event_id);
    if (action->ack) {
      st_ack_fn ack = action->ack;
      void* payload = action->ack_payload;
      st::Context* context = router->context;
      a.ack = [ack, payload, context](std::string_view text) {
        CallUser(context, "ack", [&] { ack(std::string(text).c_str(), payload); });
      };
    } else {
      a.ack = [](std::string_view) {};
    }
    router->router->HandleAction(std::move(a));
    return {};
  });
}

ST_API st_status st_router_stop(st_router* router, int64_t timeout_ms) {
  return GuardStatus("st_router_stop", [&]() -> st::Status {
    if (auto ok = CheckRouter(router); !ok) return ok;
    if (auto ok = RefuseOnWorker(router, "st_router_stop"); !ok) return ok;
    auto done = std::make_shared<std::promise<void>>();
    auto future = done->get_future();
    router->router->Shutdown([done] { done->set_value(); });
    const auto limit = OrDefault(timeout_ms, router->shutdown_budget + std::chrono::seconds(5));
    if (future.wait_for(limit) != std::future_status::ready)
      return st::Fail(st::Errc::timeout, "the router's shutdown notices did not go out within " +
                                             std::to_string(limit.count()) + " ms");
    return {};
  });
}

ST_API st_status st_router_stats_get(const st_router* router, st_router_stats* stats) {
  return GuardStatus("st_router_stats_get", [&]() -> st::Status {
    if (auto ok = CheckRouter(router); !ok) return ok;
    if (!stats) return st::Fail(InvalidArgument("stats is NULL"));
    if (auto ok = CheckVersion(stats->version, ST_ROUTER_STATS_VERSION, "st_router_stats"); !ok) return ok;
    const st::RouterStats s = router->router->Stats();
    stats->sessions = s.sessions;
    stats->turns_in_flight = s.turns_in_flight;
    stats->turns_waiting = s.turns_waiting;
    stats->open_questions = s.open_questions;
    stats->outbox = s.outbox;
    stats->turns_completed = s.turns_completed;
    stats->replies_delivered = s.replies_delivered;
    stats->messages_accepted = s.messages_accepted;
    stats->edits_sent = s.edits_sent;
    stats->edits_dropped = s.edits_dropped;
    return {};
  });
}

ST_API void st_router_free(st_router* router) {
  Guard("st_router_free", 0, [&] {
    if (!router) return 0;
    std::unique_ptr<st_router> own(router);
    st::Context* context = own->context;
    // The Router waits (up to 5 s) for its strand to tear down; past that, or on a worker, work still
    // queued may reach the adapter later, so the adapter object is left alive (its callbacks closed).
    const auto start = std::chrono::steady_clock::now();
    const bool on_worker = context->InWorkerThread();
    // Closed first: a callback running now finishes before the router goes, and later calls fail at once.
    own->adapter->Close();
    own->router.reset();
    if (on_worker || std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(4900)) {
      context->Log(st::LogLevel::warning, "st_router_free: the router's teardown did not finish; its adapter object is "
                                          "kept (callbacks closed) so late work cannot reach freed memory");
      (void)own->adapter.release();
    }
    return 0;
  });
}
