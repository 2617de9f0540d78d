// The Telegram adapter: creation, the Bot API call layer, pacing and the outbound side
// (chat/telegram.hpp). Inbound is in telegram_inbound.cpp.
#include <future>

#include "blocking.hpp"
#include "chat/retry.hpp"
#include "chat/telegram_impl.hpp"
#include "chat/telegram_wire.hpp"
#include "json_fields.hpp"

namespace sessionturn {

using nlohmann::json;
namespace tg = telegram;

namespace {

// Methods that change nothing when repeated: a 5xx or a lost connection is retried for these only
// (a sendMessage the server may have seen is not sent twice).
bool Repeatable(std::string_view method) {
  return method != "sendMessage";
}

bool TokenUsable(std::string_view token) {
  if (token.empty()) return false;
  for (char c : token) {
    const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == ':' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::vector<TelegramCommand> DefaultTelegramCommands() {
  return {{"sessions", "List this chat's Sessions and switch between them"},
          {"new", "Start a new Session: /new [name]"},
          {"use", "Switch to a Session: /use name"},
          {"status", "Show the current Session and its turn"},
          {"stop", "Stop the running turn"},
          {"suspend", "Suspend the current Session"},
          {"resume", "Resume the current Session"},
          {"delete", "Delete a Session (admins): /delete name"},
          {"help", "What the bot understands"}};
}

TelegramAdapter::Impl::Impl(Context& c, TelegramOptions o)
    : context(c),
      options(std::move(o)),
      strand(asio::make_strand(c.io())),
      http(std::make_shared<HttpClient>(c)),
      pacer(c.io(), strand,
            chat::Pacer::Options{options.chat_interval,
                                 static_cast<std::size_t>(std::max(1, options.group_messages_per_minute)),
                                 // Groups, supergroups and channels have negative ids.
                                 [](const std::string& chat) { return !chat.empty() && chat[0] == '-'; }}) {}

void TelegramAdapter::Impl::Log(LogLevel level, const std::string& text) const {
  if (context.ShouldLog(level)) context.Log(level, "telegram: " + Redacted(text));
}

std::string TelegramAdapter::Impl::Redacted(std::string text) const {
  return tg::Redact(std::move(text), options.token);
}

void TelegramAdapter::Impl::Bump(std::uint64_t TelegramStats::*counter) {
  std::lock_guard lock(mu);
  ++(stats.*counter);
}

HttpCall TelegramAdapter::Impl::Call(std::string method, json params, JsonHandler done,
                                     std::chrono::milliseconds timeout, int attempt) {
  std::shared_ptr<HttpClient> client;
  {
    std::lock_guard lock(mu);
    if (!closed) client = http;
    ++stats.calls;
  }
  if (!client) {
    asio::post(context.io(), [done = std::move(done), method] {
      done(Fail(Errc::cancelled, "Telegram " + method + ": the adapter is closed"));
    });
    return {};
  }
  HttpRequest request;
  request.method = "POST";
  request.url = options.api_url + "/bot" + options.token + "/" + method;
  request.headers = {{"Content-Type", "application/json"}};
  request.body = params.dump(-1, ' ', false, json::error_handler_t::replace);
  request.timeout = timeout.count() > 0 ? timeout : options.request_timeout;
  request.tls = options.tls;
  request.proxy = options.proxy;
  return client->AsyncRequest(std::move(request), [self = shared_from_this(), method = std::move(method),
                                            params = std::move(params), done = std::move(done), timeout,
                                            attempt](Result<HttpResponse> response) mutable {
    Result<json> result = response ? tg::ReadResponse(method, response->status, response->body,
                                                      response->Header("Retry-After"))
                                   : Result<json>(Fail(response.error()));
    if (!result) {
      Error& e = result.error();
      e.message = self->Redacted(std::move(e.message));
      if (attempt < self->options.max_attempts && chat::WorthRetrying(e, Repeatable(method))) {
        auto timer = std::make_shared<asio::steady_timer>(self->context.io(), std::chrono::milliseconds(250 * attempt));
        timer->async_wait([self, timer, method = std::move(method), params = std::move(params),
                           done = std::move(done), timeout, attempt](const asio::error_code&) mutable {
          self->Call(std::move(method), std::move(params), std::move(done), timeout, attempt + 1);
        });
        return;
      }
      {
        std::lock_guard lock(self->mu);
        ++self->stats.call_errors;
        ++self->stats.errors_by_code[e.http_status > 0 ? std::to_string(e.http_status) : std::string(ToString(e.code))];
        if (e.http_status == 429) ++self->stats.rate_limited;
      }
      if (e.http_status == 404 && e.code == Errc::not_found) {
        bool first = false;
        {
          std::lock_guard lock(self->mu);
          first = self->unsupported_logged.insert(method).second;
        }
        if (first) self->Log(LogLevel::warning, "the Bot API server does not support " + method + " (" + e.message + ")");
      }
    }
    done(std::move(result));
  });
}

void TelegramAdapter::Impl::Paced(const std::string& chat, std::function<void()> send) {
  pacer.Paced(chat, std::move(send), [self = shared_from_this()] { self->Bump(&TelegramStats::pacing_waits); });
}

void TelegramAdapter::Impl::Penalize(const std::string& chat, std::chrono::milliseconds retry_after) {
  pacer.Penalize(chat, retry_after);
}

void TelegramAdapter::Impl::Close() {
  std::shared_ptr<HttpClient> client;
  {
    std::lock_guard lock(mu);
    closed = true;
    client.swap(http);
  }
  asio::post(strand, [self = shared_from_this()] {
    self->polling = false;
    self->poll_call.Cancel();
    if (self->poll_timer) self->poll_timer->cancel();
  });
  // Off a worker the client's destructor waits for its handlers, so none runs after this returns.
  client.reset();
}

// ---- TelegramAdapter ------------------------------------------------------------------------------

Result<std::unique_ptr<TelegramAdapter>> TelegramAdapter::Create(Context& context, TelegramOptions options) {
  if (!TokenUsable(options.token)) {
    return Fail(Errc::invalid_argument, options.token.empty()
                                            ? "the Telegram bot token is empty"
                                            : "the Telegram bot token has characters a bot token cannot have");
  }
  if (options.api_url.rfind("https://", 0) != 0 && options.api_url.rfind("http://", 0) != 0) {
    return Fail(Errc::invalid_argument, "the Telegram API URL \"" + options.api_url + "\" is not http:// or https://");
  }
  while (!options.api_url.empty() && options.api_url.back() == '/') options.api_url.pop_back();
  if (options.poll_timeout.count() < 0 || options.max_attempts < 1) {
    return Fail(Errc::invalid_argument, "TelegramOptions: poll_timeout must be >= 0 and max_attempts >= 1");
  }
  return std::unique_ptr<TelegramAdapter>(new TelegramAdapter(std::make_shared<Impl>(context, std::move(options))));
}

TelegramAdapter::TelegramAdapter(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

TelegramAdapter::~TelegramAdapter() {
  impl_->Close();
}

void TelegramAdapter::AsyncConnect(std::function<void(Result<TelegramBotInfo>)> done) {
  impl_->Call("getMe", json::object(), [self = impl_, done = std::move(done)](Result<json> r) {
    if (!r) return done(Fail(r.error()));
    TelegramBotInfo info;
    info.id = json_fields::Int(*r, "id").value_or(0);
    info.username = json_fields::String(*r, "username");
    info.first_name = json_fields::String(*r, "first_name");
    info.can_read_all_group_messages = json_fields::Bool(*r, "can_read_all_group_messages").value_or(false);
    if (info.id == 0 || info.username.empty()) {
      return done(Fail(Errc::protocol_error, "Telegram getMe: the answer has no bot id or username"));
    }
    {
      std::lock_guard lock(self->mu);
      self->bot = info;
    }
    done(std::move(info));
  });
}

Result<TelegramBotInfo> TelegramAdapter::Connect() {
  return blocking::Call<TelegramBotInfo>(impl_->context, impl_->options.request_timeout * impl_->options.max_attempts,
                                         "TelegramAdapter::Connect", [this](auto done) { AsyncConnect(std::move(done)); });
}

void TelegramAdapter::AsyncSetCommands(std::vector<TelegramCommand> commands, std::function<void(Status)> done) {
  json list = json::array();
  for (const auto& c : commands) list.push_back({{"command", c.command}, {"description", c.description}});
  impl_->Call("setMyCommands", {{"commands", std::move(list)}},
              [done = std::move(done)](Result<json> r) { done(r ? Status() : Status(Fail(r.error()))); });
}

void TelegramAdapter::AsyncSetWebhook(std::string url, std::string secret, std::function<void(Status)> done) {
  auto finish = [done = std::move(done)](Result<json> r) { done(r ? Status() : Status(Fail(r.error()))); };
  if (url.empty()) {
    impl_->Call("deleteWebhook", json::object(), std::move(finish));
    return;
  }
  json params = {{"url", std::move(url)},
                 {"allowed_updates", {"message", "edited_message", "callback_query"}}};
  if (!secret.empty()) params["secret_token"] = std::move(secret);
  impl_->Call("setWebhook", std::move(params), std::move(finish));
}

void TelegramAdapter::SetWebhookSecret(std::string secret) {
  std::lock_guard lock(impl_->mu);
  impl_->webhook_secret = std::move(secret);
}

ChatCapabilities TelegramAdapter::Capabilities() const {
  ChatCapabilities caps;
  caps.max_length = 4096;
  caps.unit = LengthUnit::utf16;
  caps.dialect = MarkupDialect::telegram_html;
  caps.edits_per_interval = 1;
  caps.edit_interval = impl_->options.chat_interval;
  caps.buttons = true;
  caps.button_data_limit = 64;
  caps.threads = true;
  caps.typing = true;
  caps.fetch_thread = false;  // the Bot API cannot read a chat's history
  caps.command_prefix = "/";
  return caps;
}

void TelegramAdapter::Impl::CallWithPlainFallback(std::string method, json html, json plain, JsonHandler done) {
  Call(method, std::move(html), [self = shared_from_this(), method, plain = std::move(plain),
                                 done = std::move(done)](Result<json> r) mutable {
    if (r || !tg::IsEntityParseError(r.error())) return done(std::move(r));
    self->Bump(&TelegramStats::plain_text_retries);
    self->Log(LogLevel::warning, method + " again as plain text: " + r.error().message);
    self->Call(std::move(method), std::move(plain), std::move(done));
  });
}

void TelegramAdapter::AsyncPost(const ThreadRef& where, OutboundMessage message, ChatHandler<std::string> handler) {
  auto self = impl_;
  self->Paced(where.chat, [self, where, message = std::move(message), handler = std::move(handler)]() mutable {
    auto html = tg::SendParams(where, message, true);
    message.text = tg::HtmlToPlain(message.text);
    self->CallWithPlainFallback("sendMessage", std::move(html), tg::SendParams(where, message, false),
                                [self, where, handler](Result<json> r) {
                                  if (!r) {
                                    if (r.error().retry_after.count() > 0) self->Penalize(where.chat, r.error().retry_after);
                                    return handler(Fail(r.error()));
                                  }
                                  const auto id = json_fields::Int(*r, "message_id").value_or(0);
                                  if (id == 0) {
                                    return handler(Fail(Errc::protocol_error, "Telegram sendMessage: the answer has no message_id"));
                                  }
                                  handler(std::to_string(id));
                                });
  });
}

void TelegramAdapter::AsyncEdit(const ThreadRef& where, const std::string& message_id, OutboundMessage message,
                                ChatStatusHandler handler) {
  auto self = impl_;
  self->Paced(where.chat, [self, where, message_id, message = std::move(message), handler = std::move(handler)]() mutable {
    auto html = tg::EditParams(where, message_id, message, true);
    message.text = tg::HtmlToPlain(message.text);
    self->CallWithPlainFallback("editMessageText", std::move(html), tg::EditParams(where, message_id, message, false),
                                [self, where, handler](Result<json> r) {
                                  if (!r && tg::IsNotModified(r.error())) return handler(Status());
                                  if (!r && r.error().retry_after.count() > 0) self->Penalize(where.chat, r.error().retry_after);
                                  handler(r ? Status() : Status(Fail(r.error())));
                                });
  });
}

void TelegramAdapter::AsyncTyping(const ThreadRef& where, ChatStatusHandler handler) {
  json params = {{"chat_id", tg::SendParams(where, {}, false)["chat_id"]}, {"action", "typing"}};
  if (auto thread = tg::ThreadIdForSend(where.thread)) params["message_thread_id"] = *thread;
  impl_->Call("sendChatAction", std::move(params),
              [handler = std::move(handler)](Result<json> r) { handler(r ? Status() : Status(Fail(r.error()))); });
}

TelegramStats TelegramAdapter::Stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

const TelegramBotInfo& TelegramAdapter::bot() const noexcept {
  return impl_->bot;
}

}  // namespace sessionturn
