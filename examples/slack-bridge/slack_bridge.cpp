// sessionturn-slack: a Slack app whose threads are persistent conversations with Sessions. The Slack
// adapter, the Router and a backend, wired from flags (docs/bridges.md). Secrets come from the
// environment or files only: $SLACK_BOT_TOKEN / --bot-token-file, $SLACK_APP_TOKEN / --app-token-file
// (Socket Mode), $SLACK_SIGNING_SECRET / --signing-secret-file (Events API).
#include <iostream>

#include <sessionturn/chat/slack.hpp>
#include <sessionturn/http_server.hpp>
#include <sessionturn/router.hpp>

#include "bridge.hpp"
#include "slack_bridge.hpp"
#include "bridge_server.hpp"

namespace st = sessionturn;
namespace br = sessionturn_bridge;

namespace {

constexpr const char* kProgram = "sessionturn-slack";

struct SlackFlags {
  br::CommonFlags common;
  std::string bot_token_file, app_token_file, signing_secret_file;
  std::string mode = "socket";
  std::int64_t socket_ping_ms = 0;  // hidden (tests): Socket Mode ping interval and deadline; 0: the default
};

struct Secrets {
  std::string bot_token, app_token, signing_secret;
};

Secrets ReadSecrets(const SlackFlags& f) {
  Secrets s;
  auto bot = br::ReadSecret("SLACK_BOT_TOKEN", f.bot_token_file, "--bot-token-file");
  if (!bot) throw br::ExitWith{br::kExitConfig, "no bot token: set SLACK_BOT_TOKEN or pass --bot-token-file FILE"};
  s.bot_token = *bot;
  s.app_token = br::ReadSecret("SLACK_APP_TOKEN", f.app_token_file, "--app-token-file").value_or("");
  s.signing_secret = br::ReadSecret("SLACK_SIGNING_SECRET", f.signing_secret_file, "--signing-secret-file").value_or("");
  if (f.mode == "socket" && s.app_token.empty()) {
    throw br::ExitWith{br::kExitConfig,
                       "--mode socket needs an app-level token: set SLACK_APP_TOKEN or pass --app-token-file FILE"};
  }
  if (f.mode == "events") {
    if (f.common.listen.empty()) throw br::ExitWith{br::kExitConfig, "--mode events needs --listen ADDR:PORT"};
    if (s.signing_secret.empty()) {
      throw br::ExitWith{br::kExitConfig,
                         "--mode events needs the signing secret: set SLACK_SIGNING_SECRET or pass "
                         "--signing-secret-file FILE"};
    }
  }
  return s;
}

void ExportMetrics(br::BridgeServer& server, st::SlackAdapter* adapter) {
  server.SetMetrics([adapter](br::MetricsSink& m) {
    const st::SlackStats s = adapter->Stats();
    m.Counter("sessionturn_platform_calls_total", "Web API calls made", s.calls);
    m.CountersBy("sessionturn_platform_errors_total", "Web API calls that failed, by Slack's error code", "code",
                 s.errors_by_code);
    m.Counter("sessionturn_rate_limit_waits_total", "429 answers and posts that waited for their channel's pace",
              s.rate_limited + s.pacing_waits);
    m.Counter("sessionturn_updates_total", "events received from Slack", s.events_received);
    m.Counter("sessionturn_slack_redeliveries_total", "events Slack delivered again", s.redeliveries);
    m.Counter("sessionturn_slack_socket_connections_total", "Socket Mode connections opened", s.socket_connections);
    m.Counter("sessionturn_slack_socket_disconnects_total", "Socket Mode disconnects and dropped connections",
              s.socket_disconnects);
    m.Counter("sessionturn_webhook_refused_total", "Events API requests refused for their signature",
              s.requests_refused);
  });
}

// The bridge once configured: runs until a signal or a fatal platform error.
int Run(const SlackFlags& f, const Secrets& secrets) {
  // Before the Context: an adapter's on_fatal may still run on a worker while Run unwinds.
  br::FatalError fatal;
  st::ContextOptions context_options;
  context_options.threads = 2;
  context_options.min_level = br::LogLevelOf(f.common.log_level);
  st::Context context(context_options);

  auto backend = br::MakeBackend(context, f.common);
  st::SlackOptions options;
  options.bot_token = secrets.bot_token;
  options.app_token = secrets.app_token;
  options.signing_secret = secrets.signing_secret;
  if (!f.common.api_url.empty()) options.api_url = f.common.api_url;
  if (f.socket_ping_ms > 0) {
    options.ping_interval = options.pong_timeout = std::chrono::milliseconds(f.socket_ping_ms);
  }
  auto adapter = st::SlackAdapter::Create(context, options);
  if (!adapter) throw br::ExitWith{br::kExitConfig, adapter.error().message};
  auto bot = (*adapter)->Connect();
  if (!bot) {
    if (bot.error().code == st::Errc::unauthorized || bot.error().code == st::Errc::forbidden) {
      throw br::ExitWith{br::kExitToken, "Slack refused the bot token: " + bot.error().message};
    }
    throw br::ExitWith{br::kExitRuntime, "cannot reach Slack: " + bot.error().message};
  }
  br::BridgeServer server(context, f.common.listen, *backend);
  auto router_options = br::MakeRouterOptions(f.common, "slack", bot->team_id + "-" + bot->user_id, bot->user);
  router_options.on_turn_finished = server.TurnObserver();
  auto router = br::MakeRouter(context, *backend, **adapter, std::move(router_options));
  const bool events = f.mode == "events";
  server.SetReady([a = adapter->get(), events] { return events || a->SocketConnected(); });
  ExportMetrics(server, adapter->get());
  server.SetRouter(router.get());
  if (events) {
    server.Handle("POST", "/slack/events", [a = adapter->get(), r = router.get()](const st::ServerRequest& req,
                                                                                st::HttpRespond respond) {
      st::SlackEventsRequest request{req.Header("Content-Type"),     req.Header("X-Slack-Signature"),
                                     req.Header("X-Slack-Request-Timestamp"), req.Header("X-Slack-Retry-Num"),
                                     req.Header("X-Slack-Retry-Reason"), req.body};
      a->HandleEvents(request, *r, [respond](int status, std::string type, std::string body) {
        respond(st::ServerResponse{status, {{"Content-Type", std::move(type)}}, std::move(body)});
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
  if (!events) (*adapter)->StartSocketMode(*router, fatal.Handler());
  br::WarnOpenAccess(kProgram, f.common);
  std::cerr << "ready: slack bot @" << bot->user << " (" << (bot->team.empty() ? bot->team_id : bot->team)
            << "), " << (events ? "events API" : "socket mode") << ", backend " << br::DescribeBackend(f.common)
            << (listening.empty() ? "" : ", listening " + listening) << std::endl;

  return br::RunUntilStopped(
      kProgram, *router, fatal, [&] { (*adapter)->StopInbound(); },
      [](const st::Error& e) { return e.code == st::Errc::unauthorized ? br::kExitToken : br::kExitRuntime; });
}

}  // namespace

int sessionturn_bridge::SlackMain(int argc, char** argv) {
  br::BlockSignals();
  SlackFlags f;
  CLI::App app{"A Slack app whose threads are persistent conversations with coding-agent Sessions", kProgram};
  br::AddCommonFlags(app, f.common);
  app.add_option("--bot-token-file", f.bot_token_file, "the bot token, xoxb- (else $SLACK_BOT_TOKEN)");
  app.add_option("--app-token-file", f.app_token_file, "socket mode: the app-level token, xapp- (else $SLACK_APP_TOKEN)");
  app.add_option("--signing-secret-file", f.signing_secret_file,
                 "events mode: the signing secret (else $SLACK_SIGNING_SECRET)");
  app.add_option("--mode", f.mode, "socket (Socket Mode) or events (Events API at POST /slack/events)")
      ->check(CLI::IsMember({"socket", "events"}));
  app.add_option("--socket-ping-ms", f.socket_ping_ms, "Socket Mode ping interval and pong deadline")
      ->check(CLI::NonNegativeNumber)
      ->group("");  // tests only: a half-open connection noticed in seconds
  try {
    br::Parse(app, argc, argv);
    return Run(f, ReadSecrets(f));
  } catch (const br::ExitWith& e) {
    if (!e.message.empty()) std::cerr << kProgram << ": " << e.message << "\n";
    return e.code;
  }
}
