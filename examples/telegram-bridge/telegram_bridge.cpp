// sessionturn-telegram: a Telegram bot whose chats are persistent conversations with Sessions.
// The Telegram adapter, the Router and a backend, wired from flags (docs/bridges.md). Secrets come
// from the environment or files only: $TELEGRAM_BOT_TOKEN / --token-file, $TELEGRAM_WEBHOOK_SECRET /
// --webhook-secret-file.
#include <iostream>
#include <cstring>
#include <future>

#include <sessionturn/chat/telegram.hpp>
#include <sessionturn/http_server.hpp>
#include <sessionturn/router.hpp>

#include "bridge.hpp"
#include "telegram_bridge.hpp"
#include "bridge_server.hpp"

namespace st = sessionturn;
namespace br = sessionturn_bridge;

namespace {

constexpr const char* kProgram = "sessionturn-telegram";

struct TelegramFlags {
  br::CommonFlags common;
  std::string token_file, webhook_secret_file, public_url;
  std::string mode = "poll";
};

struct Secrets {
  std::string token, webhook_secret;
};

Secrets ReadSecrets(const TelegramFlags& f) {
  Secrets s;
  auto token = br::ReadSecret("TELEGRAM_BOT_TOKEN", f.token_file, "--token-file");
  if (!token) throw br::ExitWith{br::kExitConfig, "no bot token: set TELEGRAM_BOT_TOKEN or pass --token-file FILE"};
  s.token = *token;
  s.webhook_secret = br::ReadSecret("TELEGRAM_WEBHOOK_SECRET", f.webhook_secret_file, "--webhook-secret-file")
                         .value_or("");
  if (f.mode == "webhook") {
    if (f.common.listen.empty()) throw br::ExitWith{br::kExitConfig, "--mode webhook needs --listen ADDR:PORT"};
    if (s.webhook_secret.empty()) {
      throw br::ExitWith{br::kExitConfig,
                         "--mode webhook needs a secret: set TELEGRAM_WEBHOOK_SECRET or pass --webhook-secret-file"};
    }
  }
  return s;
}

// The bridge once configured: runs until a signal or a fatal platform error.
int Run(const TelegramFlags& f, const Secrets& secrets) {
  // Before the Context: an adapter's on_fatal may still run on a worker while Run unwinds.
  br::FatalError fatal;
  st::ContextOptions context_options;
  context_options.threads = 2;
  context_options.min_level = br::LogLevelOf(f.common.log_level);
  st::Context context(context_options);

  auto backend = br::MakeBackend(context, f.common);
  st::TelegramOptions options;
  options.token = secrets.token;
  if (!f.common.api_url.empty()) options.api_url = f.common.api_url;
  auto adapter = st::TelegramAdapter::Create(context, options);
  if (!adapter) throw br::ExitWith{br::kExitConfig, adapter.error().message};
  auto bot = (*adapter)->Connect();
  if (!bot) {
    if (bot.error().code == st::Errc::unauthorized || bot.error().code == st::Errc::not_found) {
      throw br::ExitWith{br::kExitToken, "Telegram refused the bot token: " + bot.error().message};
    }
    throw br::ExitWith{br::kExitRuntime, "cannot reach Telegram: " + bot.error().message};
  }
  br::BridgeServer server(context, f.common.listen, *backend);
  auto router_options = br::MakeRouterOptions(f.common, "telegram", std::to_string(bot->id), bot->username);
  router_options.on_turn_finished = server.TurnObserver();
  auto router = br::MakeRouter(context, *backend, **adapter, std::move(router_options));
  (*adapter)->AsyncSetCommands(st::DefaultTelegramCommands(), [&context](st::Status s) {
    if (!s) context.Log(st::LogLevel::warning, "telegram: setMyCommands: " + s.error().message);
  });
  (*adapter)->SetWebhookSecret(secrets.webhook_secret);

  server.SetReady([a = adapter->get(), webhook = f.mode == "webhook"] { return webhook || a->Polling(); });
  server.SetMetrics([a = adapter->get()](br::MetricsSink& m) {
    const st::TelegramStats s = a->Stats();
    m.Counter("sessionturn_platform_calls_total", "Bot API calls made", s.calls);
    m.CountersBy("sessionturn_platform_errors_total", "Bot API calls that failed, by error code", "code",
                 s.errors_by_code);
    m.Counter("sessionturn_rate_limit_waits_total", "429 answers and sends that waited for their chat's pace",
              s.rate_limited + s.pacing_waits);
    m.Counter("sessionturn_updates_total", "updates received from Telegram", s.updates_received);
  });
  server.SetRouter(router.get());
  if (f.mode == "webhook") {
    server.Handle("POST", "/telegram", [a = adapter->get(), r = router.get()](const st::ServerRequest& req,
                                                                           st::HttpRespond respond) {
      // An absent header and an empty one are both refused, logged as missing.
      const std::string secret = req.Header("X-Telegram-Bot-Api-Secret-Token");
      a->HandleWebhook(secret.empty() ? std::nullopt : std::optional<std::string_view>(secret), req.body, *r, [respond](int status, std::string body) {
        respond(st::ServerResponse{status, {{"Content-Type", "text/plain"}}, std::move(body)});
      });
    });
  }
  const std::string listening = server.Start();
  // The server's handlers use the router: on every way out it stops before the router goes.
  struct StopServer {
    br::BridgeServer& server;
    ~StopServer() { server.Stop(); }
  } stop_server{server};

  router->Start();
  if (f.mode == "poll") {
    (*adapter)->StartPolling(*router, fatal.Handler());
  } else if (!f.public_url.empty()) {
    auto set = std::make_shared<std::promise<st::Status>>();
    auto done = set->get_future();
    (*adapter)->AsyncSetWebhook(f.public_url + "/telegram", secrets.webhook_secret,
                                [set](st::Status s) { set->set_value(std::move(s)); });
    if (auto s = done.get(); !s) throw br::ExitWith{br::kExitRuntime, "setWebhook: " + s.error().message};
  }
  br::WarnOpenAccess(kProgram, f.common);
  std::cerr << "ready: telegram bot @" << bot->username << ", backend " << br::DescribeBackend(f.common)
            << (listening.empty() ? "" : ", listening " + listening) << std::endl;

  return br::RunUntilStopped(kProgram, *router, fatal, [&] { (*adapter)->StopPolling(); },
                             [](const st::Error&) { return br::kExitRuntime; });
}

}  // namespace

int sessionturn_bridge::TelegramMain(int argc, char** argv) {
  br::BlockSignals();
  TelegramFlags f;
  CLI::App app{"A Telegram bot whose chats are persistent conversations with coding-agent Sessions", kProgram};
  br::AddCommonFlags(app, f.common);
  app.add_option("--token-file", f.token_file, "the bot token (else $TELEGRAM_BOT_TOKEN)");
  app.add_option("--webhook-secret-file", f.webhook_secret_file, "the webhook secret (else $TELEGRAM_WEBHOOK_SECRET)");
  app.add_option("--mode", f.mode, "poll (getUpdates) or webhook (POST /telegram)")
      ->check(CLI::IsMember({"poll", "webhook"}));
  app.add_option("--public-url", f.public_url, "webhook: the bridge's public base URL; the bridge calls setWebhook");
  try {
    br::Parse(app, argc, argv);
    return Run(f, ReadSecrets(f));
  } catch (const br::ExitWith& e) {
    if (!e.message.empty()) std::cerr << kProgram << ": " << e.message << "\n";
    return e.code;
  }
}
