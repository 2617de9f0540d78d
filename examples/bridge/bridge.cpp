// The bridges' shared command line, backend, router options and signal wait (bridge.hpp).
#include "bridge.hpp"

#include <signal.h>
#include <sys/prctl.h>

#include <cerrno>
#include <fstream>
#include <iostream>
#include <sstream>

#include <yaml-cpp/yaml.h>
#include <sessionturn/kube.hpp>

namespace sessionturn_bridge {
namespace st = sessionturn;

namespace {

// --config FILE as YAML: a mapping whose keys are the long flags' names; a value is a scalar or a
// list of scalars. CLI11 then treats each as the flag given (flags on the command line win).
class YamlConfig : public CLI::Config {
 public:
  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return {}; }
  std::vector<CLI::ConfigItem> from_config(std::istream& in) const override {
    YAML::Node root;
    try {
      root = YAML::Load(in);
    } catch (const YAML::Exception& e) {
      throw CLI::ConfigError("--config: not YAML: " + std::string(e.what()));
    }
    std::vector<CLI::ConfigItem> items;
    if (root.IsNull()) return items;
    if (!root.IsMap()) throw CLI::ConfigError("--config: the file must be a mapping of flag names to values");
    for (const auto& kv : root) {
      CLI::ConfigItem item;
      item.name = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      if (v.IsScalar()) {
        item.inputs.push_back(v.as<std::string>());
      } else if (v.IsSequence()) {
        for (const auto& e : v) {
          if (!e.IsScalar()) throw CLI::ConfigError("--config: key \"" + item.name + "\": a list of scalars only");
          item.inputs.push_back(e.as<std::string>());
        }
      } else if (!v.IsNull()) {
        throw CLI::ConfigError("--config: key \"" + item.name + "\" has a mapping as its value; a scalar or a list");
      }
      items.push_back(std::move(item));
    }
    return items;
  }
};

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  return s;
}

}  // namespace

void AddCommonFlags(CLI::App& app, CommonFlags& f) {
  app.config_formatter(std::make_shared<YamlConfig>());
  app.set_config("--config", "", "YAML file with the long flags' names as keys (flags win)");
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.add_option("--api-url", f.api_url, "the platform's API base URL");
  app.add_option("--backend", f.backend, "where the Sessions live")->check(CLI::IsMember({"local", "kubernetes"}));
  app.add_option("--state-dir", f.state_dir, "the Sessions (local) and the router's state");
  app.add_option("--provider", f.provider,
                 "local: echo, script:FILE, command:CMD or claude-code[:model=M,effort=E,permissions=skip|ask]");
  app.add_option("--agent-bin", f.agent_bin, "local: the claude-code agent program (default: claude on PATH)");
  app.add_option("--idle-suspend", f.idle_suspend, "local: suspend a Session idle this many seconds (0: never)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("-n,--namespace", f.namespace_name, "kubernetes: the namespace");
  app.add_option("--kubeconfig", f.kubeconfig, "kubernetes: the kubeconfig file");
  app.add_option("--context", f.kube_context, "kubernetes: the kubeconfig context");
  app.add_option("--spawner", f.spawner, "kubernetes: the SessionSpawner new Sessions come from");
  app.add_option("--template", f.template_file, "kubernetes: a Session template file (YAML or JSON)");
  app.add_option("--session-prefix", f.session_prefix, "the Sessions' name prefix (default: chat)");
  app.add_option("--allow-users", f.allow_users, "user ids that may talk to the bot (empty: anyone)")->delimiter(',');
  app.add_option("--allow-chats", f.allow_chats, "chat ids the bot works in (empty: any)")->delimiter(',');
  app.add_option("--admins", f.admins, "user ids that may delete Sessions")->delimiter(',');
  app.add_option("--questions", f.questions, "the agent's questions: ask them in the chat, or decline them")
      ->check(CLI::IsMember({"ask", "decline"}));
  app.add_option("--answer-timeout", f.answer_timeout, "seconds a question waits for its answer")
      ->check(CLI::PositiveNumber);
  app.add_option("--turn-timeout", f.turn_timeout, "seconds a turn may run")->check(CLI::PositiveNumber);
  app.add_option("--max-queued", f.max_queued, "messages waiting per Session")->check(CLI::PositiveNumber);
  app.add_option("--listen", f.listen, "ADDR:PORT for /healthz, /readyz, /metrics and webhooks");
  app.add_option("--log-level", f.log_level, "debug, info, warning or error")
      ->check(CLI::IsMember({"debug", "info", "warning", "error"}));
  app.add_option("--runtime-program", f.runtime_program, "local: the sessionturn-local-runtime program")
      ->group("");  // tests and packagers only
}

void Parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::cout << app.help();
    throw ExitWith{kExitOk, ""};
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    throw ExitWith{kExitOk, ""};
  } catch (const CLI::ConfigError& e) {
    std::string what = e.what();
    // CLI11 says "INI was not able to parse NAME" for a key that is no flag.
    if (auto at = what.find("was not able to parse "); at != std::string::npos) {
      what = "--config: unknown key \"" + what.substr(at + 22) + "\" (the keys are the long flags' names)";
    }
    throw ExitWith{kExitConfig, what};
  } catch (const CLI::ParseError& e) {
    throw ExitWith{kExitConfig, e.what()};
  }
}

std::optional<std::string> ReadSecret(const char* env_name, const std::string& file, const char* file_flag) {
  // A process holding chat secrets is not dumpable: processes of the same user (an agent's tools) cannot
  // read its memory or /proc/<pid>/environ.
  ::prctl(PR_SET_DUMPABLE, 0);
  if (const char* v = std::getenv(env_name); v != nullptr && *v != '\0') return Trimmed(v);
  if (file.empty()) return std::nullopt;
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ExitWith{kExitConfig, std::string(file_flag) + " " + file + ": cannot be read"};
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string secret = Trimmed(buffer.str());
  if (secret.empty()) throw ExitWith{kExitConfig, std::string(file_flag) + " " + file + ": the file is empty"};
  return secret;
}

st::LogLevel LogLevelOf(const std::string& name) {
  if (name == "debug") return st::LogLevel::debug;
  if (name == "info") return st::LogLevel::info;
  if (name == "warning") return st::LogLevel::warning;
  if (name == "error") return st::LogLevel::error;
  throw ExitWith{kExitConfig, "--log-level " + name + ": not one of debug, info, warning, error"};
}

std::string StateDir(const CommonFlags& f) {
  return f.state_dir.empty() ? st::DefaultStateDir() : f.state_dir;
}

std::unique_ptr<st::SessionBackend> MakeBackend(st::Context& context, const CommonFlags& f) {
  if (f.backend == "local") {
    st::LocalBackendOptions options;
    options.state_dir = StateDir(f);
    options.provider = f.provider;
    options.agent_bin = f.agent_bin;
    options.suspend_after = std::chrono::seconds(f.idle_suspend);
    options.runtime_program = f.runtime_program;
    auto backend = st::MakeLocalBackend(context, std::move(options));
    if (!backend) throw ExitWith{kExitConfig, backend.error().ToString()};
    return std::move(*backend);
  }
  st::KubeConfigOptions kube_options;
  kube_options.kubeconfig = f.kubeconfig;
  kube_options.context = f.kube_context;
  kube_options.namespace_name = f.namespace_name;
  auto kube = st::KubeConfig::Load(kube_options);
  if (!kube) throw ExitWith{kExitConfig, "--kubeconfig: " + kube.error().ToString()};
  st::KubernetesBackendOptions options;
  options.namespace_name = kube->Namespace();
  options.spawner = f.spawner;
  options.template_file = f.template_file;
  auto backend = st::MakeKubernetesBackend(context, std::move(*kube), std::move(options));
  if (!backend) throw ExitWith{kExitConfig, backend.error().ToString()};
  return std::move(*backend);
}

std::string DescribeBackend(const CommonFlags& f) {
  if (f.backend == "local") return "local (" + StateDir(f) + ")";
  return "kubernetes" + (f.namespace_name.empty() ? std::string() : " (namespace " + f.namespace_name + ")");
}

st::RouterOptions MakeRouterOptions(const CommonFlags& f, const std::string& platform, const std::string& bot_id,
                                    const std::string& bot_username) {
  st::RouterOptions options;
  options.session_prefix = f.session_prefix.empty() ? "chat" : f.session_prefix;
  // The bot's identity owns its Sessions: two bots on one backend never share one.
  options.owner_uid = platform + ":" + bot_id;
  options.store_path = StateDir(f) + "/router-" + platform + "-" + bot_id + ".db";
  options.max_queued = static_cast<std::size_t>(f.max_queued);
  options.turn_timeout = std::chrono::seconds(f.turn_timeout);
  options.answer_timeout = std::chrono::seconds(f.answer_timeout);
  options.decline_questions = f.questions == "decline";
  options.bot_username = bot_username;
  st::RouteConfig route;
  route.name = platform;
  route.platform = platform;
  route.chats = f.allow_chats;
  route.users = f.allow_users;
  route.admins = f.admins;
  options.routes.push_back(std::move(route));
  return options;
}

void WarnOpenAccess(const char* program, const CommonFlags& f) {
  if (f.allow_users.empty()) {
    std::cerr << program << ": warning: --allow-users is empty: anyone who can message the bot can talk to the agent\n";
  }
  if (f.allow_chats.empty()) {
    std::cerr << program << ": warning: --allow-chats is empty: the bot answers in every chat it is added to\n";
  }
}

void BlockSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

bool WaitForStop(const std::function<bool()>& stop_requested) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  const timespec tick{0, 100'000'000};
  while (!stop_requested()) {
    if (sigtimedwait(&set, nullptr, &tick) > 0) return true;
  }
  return false;
}

std::unique_ptr<st::Router> MakeRouter(st::Context& context, st::SessionBackend& backend, st::ChatAdapter& adapter,
                                       st::RouterOptions options) {
  auto router = st::Router::Create(context, backend, adapter, std::move(options));
  if (!router) {
    throw ExitWith{router.error().code == st::Errc::invalid_argument ? kExitConfig : kExitRuntime,
                   router.error().message};
  }
  return std::move(*router);
}

std::function<void(st::Error)> FatalError::Handler() {
  return [this](st::Error e) {
    std::lock_guard lock(mu_);
    if (raised_) return;
    error_ = std::move(e);
    raised_ = true;
  };
}

st::Error FatalError::Get() const {
  std::lock_guard lock(mu_);
  return error_;
}

int RunUntilStopped(const char* program, st::Router& router, const FatalError& fatal,
                    const std::function<void()>& stop_inbound, const std::function<int(const st::Error&)>& exit_for) {
  const bool signalled = WaitForStop([&] { return fatal.Raised(); });
  stop_inbound();
  if (auto s = router.ShutdownAndWait(); !s) std::cerr << program << ": shutdown: " << s.error().message << "\n";
  if (!signalled) {
    const st::Error e = fatal.Get();
    throw ExitWith{exit_for(e), e.message};
  }
  return kExitOk;
}

}  // namespace sessionturn_bridge
