// The Slack adapter: creation, the Web API call layer, pacing and the outbound side (chat/slack.hpp).
// Inbound is in slack_inbound.cpp (both modes) and slack_socket.cpp (Socket Mode).
#include <map>
#include <set>

#include "blocking.hpp"
#include "chat/retry.hpp"
#include "chat/slack_impl.hpp"
#include "chat/slack_wire.hpp"

namespace sessionturn {

using nlohmann::json;

namespace {

// Methods that post something new: a 5xx or a lost connection may have posted it already, so they
// are not repeated (the router decides what to do). Everything else changes nothing when repeated.
bool Repeatable(std::string_view method) {
  return method != "chat.postMessage" && method != "chat.postEphemeral";
}

// Methods Slack reads only from a form (JSON bodies are refused with invalid_arguments or ignored).
bool FormOnly(std::string_view method) {
  return method == "users.info" || method == "conversations.replies" || method == "auth.test" ||
         method == "apps.connections.open";
}

bool TokenUsable(std::string_view token) {
  if (token.empty()) return false;
  for (unsigned char c : token) {
    if (c <= 0x20 || c >= 0x7f) return false;  // a header value cannot carry it
  }
  return true;
}

std::string FormValue(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

}  // namespace

SlackAdapter::Impl::Impl(Context& c, SlackOptions o)
    : context(c),
      options(std::move(o)),
      strand(asio::make_strand(c.io())),
      http(std::make_shared<HttpClient>(c)),
      pacer(c.io(), strand, chat::Pacer::Options{options.channel_interval, 0, {}}) {}

void SlackAdapter::Impl::Log(LogLevel level, const std::string& text) const {
  if (context.ShouldLog(level)) context.Log(level, "slack: " + Redacted(text));
}

std::string SlackAdapter::Impl::Redacted(std::string text) const {
  // Tokens travel in headers, never in URLs, so no message should hold one; this is the last guard.
  for (const std::string* secret : {&options.bot_token, &options.app_token, &options.signing_secret}) {
    if (secret->empty()) continue;
    for (auto at = text.find(*secret); at != std::string::npos; at = text.find(*secret, at)) {
      text.replace(at, secret->size(), "<redacted>");
    }
  }
  return text;
}

void SlackAdapter::Impl::Bump(std::uint64_t SlackStats::*counter) {
  std::lock_guard lock(mu);
  ++(stats.*counter);
}

SlackBotInfo SlackAdapter::Impl::Bot() const {
  std::lock_guard lock(mu);
  return bot;
}

void SlackAdapter::Impl::RememberThread(const ThreadRef& where) {
  if (where.thread.empty()) return;
  std::string key = where.chat + "/" + where.thread;
  std::lock_guard lock(mu);
  if (!bot_threads.insert(key).second) return;
  bot_threads_order.push_back(std::move(key));
  if (bot_threads_order.size() > kMaxBotThreads) {
    bot_threads.erase(bot_threads_order.front());
    bot_threads_order.pop_front();
  }
}

bool SlackAdapter::Impl::BotInThread(const std::string& chat, const std::string& thread) const {
  if (thread.empty()) return false;
  std::lock_guard lock(mu);
  return bot_threads.count(chat + "/" + thread) > 0;
}

HttpCall SlackAdapter::Impl::Call(std::string method, json params, JsonHandler done, std::chrono::milliseconds timeout,
                                  bool app_token, int attempt) {
  std::shared_ptr<HttpClient> client;
  {
    std::lock_guard lock(mu);
    if (!closed) client = http;
    ++stats.calls;
  }
  if (!client) {
    asio::post(context.io(), [done = std::move(done), method] {
      done(Fail(Errc::cancelled, "Slack " + method + ": the adapter is closed"));
    });
    return {};
  }
  HttpRequest request;
  request.method = "POST";
  request.url = options.api_url + "/" + method;
  const std::string& token = app_token ? options.app_token : options.bot_token;
  request.headers = {{"Authorization", "Bearer " + token}};
  if (FormOnly(method)) {
    std::map<std::string, std::string> form;
    for (auto& [k, v] : params.items()) form[k] = FormValue(v);
    request.headers.emplace_back("Content-Type", "application/x-www-form-urlencoded");
    request.body = slack::FormEncode(form);
  } else {
    request.headers.emplace_back("Content-Type", "application/json; charset=utf-8");
    request.body = params.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  request.timeout = timeout.count() > 0 ? timeout : options.request_timeout;
  request.tls = options.tls;
  request.proxy = options.proxy;
  return client->AsyncRequest(std::move(request), [self = shared_from_this(), method = std::move(method),
                                                   params = std::move(params), done = std::move(done), timeout,
                                                   app_token, attempt](Result<HttpResponse> response) mutable {
    Result<json> result = response ? slack::ReadResponse(method, response->status, response->body,
                                                         response->Header("Retry-After"))
                                   : Result<json>(Fail(response.error()));
    std::string code;  // for the errors-by-code metric
    if (!result) {
      if (!response) {
        code = ToString(response.error().code);
      } else {
        const json answer = json::parse(response->body, nullptr, false);
        code = answer.is_object() && answer.contains("error") && answer["error"].is_string()
                   ? answer["error"].get<std::string>()
                   : "http_" + std::to_string(response->status);
      }
    }
    if (!result) {
      Error& e = result.error();
      e.message = self->Redacted(std::move(e.message));
      if (attempt < self->options.max_attempts && chat::WorthRetrying(e, Repeatable(method))) {
        auto timer = std::make_shared<asio::steady_timer>(self->context.io(), std::chrono::milliseconds(250 * attempt));
        timer->async_wait([self, timer, method = std::move(method), params = std::move(params),
                           done = std::move(done), timeout, app_token, attempt](const asio::error_code&) mutable {
          self->Call(std::move(method), std::move(params), std::move(done), timeout, app_token, attempt + 1);
        });
        return;
      }
      bool first_unknown = false;
      {
        std::lock_guard lock(self->mu);
        ++self->stats.call_errors;
        // Bounded: Slack's codes are a few dozen words; anything odd shares one series.
        if (self->stats.errors_by_code.size() >= 64 && !self->stats.errors_by_code.count(code)) code = "other";
        ++self->stats.errors_by_code[code];
        if (e.code == Errc::unavailable && e.retry_after.count() > 0) ++self->stats.rate_limited;
        if (e.message.find("unknown_method") != std::string::npos) {
          first_unknown = self->unsupported_logged.insert(method).second;
        }
      }
      if (first_unknown) self->Log(LogLevel::warning, "the Web API server does not know " + method);
    }
    done(std::move(result));
  });
}

void SlackAdapter::Impl::Close() {
  std::shared_ptr<HttpClient> client;
  {
    std::lock_guard lock(mu);
    closed = true;
    client.swap(http);
  }
  asio::post(strand, [self = shared_from_this()] {
    self->socket_running = false;
    self->router = nullptr;
    self->CloseConnections();
  });
  // Off a worker the client's destructor waits for its handlers, so none runs after this returns.
  client.reset();
}

// ---- SlackAdapter ---------------------------------------------------------------------------------

Result<std::unique_ptr<SlackAdapter>> SlackAdapter::Create(Context& context, SlackOptions options) {
  if (!TokenUsable(options.bot_token)) {
    return Fail(Errc::invalid_argument, options.bot_token.empty()
                                            ? "the Slack bot token is empty"
                                            : "the Slack bot token has characters a token cannot have");
  }
  if (!options.app_token.empty() && !TokenUsable(options.app_token)) {
    return Fail(Errc::invalid_argument, "the Slack app token has characters a token cannot have");
  }
  if (options.api_url.rfind("https://", 0) != 0 && options.api_url.rfind("http://", 0) != 0) {
    return Fail(Errc::invalid_argument, "the Slack API URL \"" + options.api_url + "\" is not http:// or https://");
  }
  while (!options.api_url.empty() && options.api_url.back() == '/') options.api_url.pop_back();
  if (options.max_attempts < 1 || options.ping_interval.count() < 0 || options.hello_timeout.count() <= 0) {
    return Fail(Errc::invalid_argument, "SlackOptions: max_attempts must be >= 1, ping_interval >= 0 and "
                                        "hello_timeout > 0");
  }
  return std::unique_ptr<SlackAdapter>(new SlackAdapter(std::make_shared<Impl>(context, std::move(options))));
}

SlackAdapter::SlackAdapter(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

SlackAdapter::~SlackAdapter() {
  impl_->Close();
}

void SlackAdapter::AsyncConnect(std::function<void(Result<SlackBotInfo>)> done) {
  impl_->Call("auth.test", json::object(), [self = impl_, done = std::move(done)](Result<json> r) {
    if (!r) return done(Fail(r.error()));
    SlackBotInfo info;
    info.team_id = json_fields::String(*r, "team_id");
    info.team = json_fields::String(*r, "team");
    info.user_id = json_fields::String(*r, "user_id");
    info.bot_id = json_fields::String(*r, "bot_id");
    info.user = json_fields::String(*r, "user");
    info.url = json_fields::String(*r, "url");
    if (info.user_id.empty()) {
      return done(Fail(Errc::protocol_error, "Slack auth.test: the answer has no user_id (is this a bot token?)"));
    }
    {
      std::lock_guard lock(self->mu);
      self->bot = info;
    }
    done(std::move(info));
  });
}

Result<SlackBotInfo> SlackAdapter::Connect() {
  return blocking::Call<SlackBotInfo>(impl_->context, impl_->options.request_timeout * impl_->options.max_attempts,
                                      "SlackAdapter::Connect", [this](auto done) { AsyncConnect(std::move(done)); });
}

ChatCapabilities SlackAdapter::Capabilities() const {
  ChatCapabilities caps;
  // One part is one section block (3,000 characters), so a code block cut by the router's splitter is
  // closed and reopened within a part rather than across two sections Slack renders apart.
  caps.max_length = slack::kMaxSectionChars;
  caps.unit = LengthUnit::code_points;
  caps.dialect = MarkupDialect::slack_mrkdwn;
  caps.edits_per_interval = 1;
  caps.edit_interval = impl_->options.channel_interval;
  caps.buttons = true;
  caps.button_data_limit = 255;
  caps.threads = true;
  caps.typing = true;
  caps.fetch_thread = true;
  caps.command_prefix = "";
  return caps;
}

void SlackAdapter::Impl::CallWithTextFallback(std::string method, json with_blocks, json text_only,
                                              JsonHandler done) {
  Call(method, std::move(with_blocks), [self = shared_from_this(), method, text_only = std::move(text_only),
                                        done = std::move(done)](Result<json> r) mutable {
    if (r || !slack::IsBlocksError(r.error())) return done(std::move(r));
    self->Bump(&SlackStats::plain_text_retries);
    self->Log(LogLevel::warning, method + " again as text only: " + r.error().message);
    self->Call(std::move(method), std::move(text_only), std::move(done));
  });
}

void SlackAdapter::AsyncPost(const ThreadRef& where, OutboundMessage message, ChatHandler<std::string> handler) {
  auto self = impl_;
  auto send = [self, where, message = std::move(message), handler = std::move(handler)]() mutable {
    self->CallWithTextFallback("chat.postMessage", slack::PostParams(where, message, true),
                               slack::PostParams(where, message, false), [self, where, handler](Result<json> r) {
                                 if (!r) {
                                   if (r.error().retry_after.count() > 0) self->pacer.Penalize(where.chat, r.error().retry_after);
                                   return handler(Fail(r.error()));
                                 }
                                 const std::string ts = json_fields::String(*r, "ts");
                                 if (ts.empty()) return handler(Fail(Errc::protocol_error, "Slack chat.postMessage: no ts"));
                                 self->RememberThread(where);
                                 handler(ts);
                               });
  };
  self->pacer.Paced(where.chat, std::move(send), [self] { self->Bump(&SlackStats::pacing_waits); });
}

void SlackAdapter::AsyncEdit(const ThreadRef& where, const std::string& message_id, OutboundMessage message,
                             ChatStatusHandler handler) {
  auto self = impl_;
  auto send = [self, where, message_id, message = std::move(message), handler = std::move(handler)]() mutable {
    self->CallWithTextFallback("chat.update", slack::UpdateParams(where, message_id, message, true),
                               slack::UpdateParams(where, message_id, message, false),
                               [self, where, handler](Result<json> r) {
                                 if (!r && r.error().retry_after.count() > 0) self->pacer.Penalize(where.chat, r.error().retry_after);
                                 handler(r ? Status() : Status(Fail(r.error())));
                               });
  };
  self->pacer.Paced(where.chat, std::move(send), [self] { self->Bump(&SlackStats::pacing_waits); });
}

void SlackAdapter::AsyncTyping(const ThreadRef& where, ChatStatusHandler handler) {
  asio::post(impl_->strand, [self = impl_, where, handler = std::move(handler)]() mutable {
    if (where.thread.empty() || self->status_disabled) return handler(Status());
    const std::string key = where.chat + "/" + where.thread;
    const auto now = Impl::Clock::now();
    auto it = self->status_sent.find(key);
    if (it != self->status_sent.end() && now - it->second < self->options.status_refresh) return handler(Status());
    if (self->status_sent.size() > Impl::kMaxBotThreads) {
      std::erase_if(self->status_sent, [&](const auto& kv) { return now - kv.second > self->options.status_refresh; });
    }
    self->status_sent[key] = now;
    json params = {{"channel_id", where.chat}, {"thread_ts", where.thread}, {"status", self->options.status_text}};
    self->Call("assistant.threads.setStatus", std::move(params), [self, handler, key](Result<json> r) {
      if (r) return handler(Status());
      // Only Slack saying the app may not set statuses turns them off; anything else (a 429, a timeout)
      // lets the next call try again.
      const Errc code = r.error().code;
      const bool refused = code == Errc::forbidden || code == Errc::unauthorized || code == Errc::not_found ||
                           code == Errc::invalid_argument;
      asio::post(self->strand, [self, key, refused, e = r.error()] {
        if (!refused) {
          self->status_sent.erase(key);
          return;
        }
        if (self->status_disabled) return;
        self->status_disabled = true;
        self->Log(LogLevel::info, "thread status turned off (" + e.message +
                                      "): it needs an app with the Agents & AI Apps feature and assistant:write");
      });
      handler(refused ? Status() : Status(Fail(r.error())));  // best effort: the turn goes on either way
    });
  });
}

void SlackAdapter::AsyncFetchThread(const ThreadRef& where, const std::string& before_message_id,
                                    std::size_t max_messages, ChatHandler<std::vector<ThreadHistoryMessage>> handler) {
  if (where.thread.empty() || max_messages == 0) {
    return asio::post(impl_->context.io(), [handler = std::move(handler)] { handler(std::vector<ThreadHistoryMessage>{}); });
  }
  // The thread's first page: the parent and up to 200 replies, oldest first; a longer thread's
  // earliest messages are the context that matters most for a first turn.
  json params = {{"channel", where.chat}, {"ts", where.thread}, {"limit", 200}, {"inclusive", true}};
  impl_->Call("conversations.replies", std::move(params),
              [self = impl_, before = before_message_id, max_messages, handler = std::move(handler)](Result<json> r) {
                if (!r) return handler(Fail(r.error()));
                auto history = std::make_shared<std::vector<ThreadHistoryMessage>>(slack::HistoryBefore(
                    r->contains("messages") ? (*r)["messages"] : json::array(), before, max_messages, self->Bot()));
                // Authors are user ids: their names (cached, else users.info, else the id) go in first.
                std::set<std::string> ids;
                for (const auto& h : *history) {
                  if (!h.is_bot && !h.author_name.empty()) ids.insert(h.author_name);
                }
                if (ids.empty()) return handler(std::move(*history));
                auto names = std::make_shared<std::map<std::string, std::string>>();
                auto pending = std::make_shared<std::size_t>(ids.size());
                for (const std::string& id : ids) {
                  // NameOf calls back on the strand, so the counter and the map need no lock.
                  self->NameOf(id, [history, names, pending, id, handler](std::string name) {
                    (*names)[id] = std::move(name);
                    if (--*pending > 0) return;
                    for (auto& h : *history) {
                      if (auto it = names->find(h.author_name); !h.is_bot && it != names->end()) h.author_name = it->second;
                    }
                    handler(std::move(*history));
                  });
                }
              });
}

SlackStats SlackAdapter::Stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

SlackBotInfo SlackAdapter::bot() const {
  return impl_->Bot();
}

}  // namespace sessionturn
