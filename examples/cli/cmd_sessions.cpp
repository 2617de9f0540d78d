// `sessionturn sessions list|get|create|suspend|resume|delete`: the Sessions of a backend. This file
// is the command and its SessionBackend form (--local); on a cluster kube_sessions.cpp shows the
// objects themselves (backend_flags.hpp says why).
#include <cctype>
#include <cstdio>
#include <filesystem>

#include <sessionturn/backend.hpp>
#include <sessionturn/context.hpp>

#include "backend_flags.hpp"
#include "commands.hpp"
#include "kube_flags.hpp"
#include "options.hpp"
#include "output.hpp"

namespace sessionturn_cli {

namespace {

// A table cell holds one line; the whole message is `sessions get`'s.
constexpr std::size_t kListMessageBytes = 100;

std::string Phase(const st::SessionInfo& info) {
  std::string phase(st::ToString(info.phase));
  if (info.phase == st::SessionPhase::suspended && info.suspended != st::SuspendReason::none) {
    phase += " (" + std::string(st::ToString(info.suspended)) + ")";
  }
  return phase;
}

std::string OneLine(std::string text, std::size_t max_bytes) {
  for (char& c : text) {
    if (c == '\n' || c == '\t' || c == '\r') c = ' ';
  }
  if (text.size() <= max_bytes) return text;
  std::size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return text.substr(0, cut) + "...";
}

std::string Joined(const std::map<std::string, std::string>& pairs) {
  std::string out;
  for (const auto& [key, value] : pairs) out += (out.empty() ? "" : ",") + key + "=" + value;
  return out;
}

st::Json TimeJson(std::chrono::system_clock::time_point t) {
  if (t == std::chrono::system_clock::time_point{}) return nullptr;
  return FormatTimestamp(t);
}

st::Json InfoJson(const st::SessionInfo& info) {
  return st::Json{{"name", info.name},
                  {"phase", std::string(st::ToString(info.phase))},
                  {"suspendReason", std::string(st::ToString(info.suspended))},
                  {"message", info.message},
                  {"created", TimeJson(info.created)},
                  {"lastActivity", TimeJson(info.last_activity)},
                  {"labels", info.labels},
                  {"annotations", info.annotations},
                  {"details", info.details}};
}

int List(const Args& args, st::SessionBackend& backend) {
  auto list = backend.List(args.selector);
  if (!list) throw ExitWith{SessionExitCode(list.error()), list.error().ToString()};
  if (args.json) {
    st::Json items = st::Json::array();
    for (const st::SessionInfo& info : *list) items.push_back(InfoJson(info));
    PrintJson(items);
    return kExitCompleted;
  }
  if (list->empty()) {
    std::fprintf(stderr, "sessionturn: no Sessions in %s\n", backend.Describe().c_str());
    return kExitCompleted;
  }
  std::vector<std::vector<std::string>> rows = {{"NAME", "PHASE", "AGE", "LAST-ACTIVITY", "MESSAGE"}};
  for (const st::SessionInfo& info : *list) {
    rows.push_back({info.name, Phase(info), AgeSince(info.created), AgeSince(info.last_activity) + " ago",
                    OrDash(OneLine(info.message, kListMessageBytes))});
  }
  PrintTable(rows);
  return kExitCompleted;
}

void PrintInfo(const st::SessionInfo& info, const std::string& where) {
  std::vector<std::vector<std::string>> rows = {
      {"Name:", info.name},
      {"Backend:", where},
      {"Phase:", Phase(info)},
      {"Message:", OrDash(OneLine(info.message, std::string::npos))},
      {"Created:", FormatTimestamp(info.created) + " (" + AgeSince(info.created) + " ago)"},
      {"Last activity:", FormatTimestamp(info.last_activity) + " (" + AgeSince(info.last_activity) + " ago)"},
      {"Labels:", OrDash(Joined(info.labels))},
      {"Annotations:", OrDash(Joined(info.annotations))},
  };
  for (const auto& [key, value] : info.details) {
    std::string label = key + ":";
    label[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(label[0])));
    rows.push_back({label, value});
  }
  PrintTable(rows);
}

std::map<std::string, std::string> Pairs(const std::vector<std::string>& flags) {
  std::map<std::string, std::string> out;
  for (const std::string& kv : flags) out[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  return out;
}

int Create(const Args& args, st::SessionBackend& backend) {
  st::SessionSpec spec;
  spec.labels = Pairs(args.labels);
  spec.annotations = Pairs(args.annotations);
  if (!args.provider.empty()) spec.parameters["provider"] = args.provider;
  if (!args.workdir.empty()) {
    std::error_code ec;
    spec.parameters["workdir"] = std::filesystem::absolute(args.workdir, ec).lexically_normal().string();
  }
  auto ensured = backend.Ensure(args.name, spec);
  if (!ensured) throw ExitWith{SessionExitCode(ensured.error()), ensured.error().ToString()};
  if (args.json) {
    st::Json out = InfoJson(ensured->info);
    out["created"] = ensured->created;
    PrintJson(out);
  } else if (ensured->created) {
    std::fprintf(stdout, "Session %s created in %s\n", args.name.c_str(), backend.Describe().c_str());
  } else {
    std::fprintf(stdout, "Session %s already exists in %s\n", args.name.c_str(), backend.Describe().c_str());
    if (!spec.parameters.empty() || !spec.labels.empty() || !spec.annotations.empty()) {
      std::fprintf(stderr, "sessionturn: note: the Session was already there; its spec is kept as it was\n");
    }
  }
  return kExitCompleted;
}

int Change(const Args& args, st::SessionBackend& backend) {
  const std::string& action = args.sessions_action;
  if (action == "delete") {
    if (auto deleted = backend.Delete(args.name); !deleted) {
      throw ExitWith{SessionExitCode(deleted.error()), deleted.error().ToString()};
    }
    if (args.json) PrintJson({{"name", args.name}, {"deleted", true}});
    else std::fprintf(stdout, "Session %s deleted\n", args.name.c_str());
    return kExitCompleted;
  }
  auto info = action == "get"       ? backend.Get(args.name)
              : action == "suspend" ? backend.Suspend(args.name)
                                    : backend.Resume(args.name);
  if (!info) throw ExitWith{SessionExitCode(info.error()), info.error().ToString()};
  if (args.json) {
    PrintJson(InfoJson(*info));
  } else if (action == "get") {
    PrintInfo(*info, backend.Describe());
  } else {
    std::fprintf(stdout, "Session %s %s\n", args.name.c_str(), action == "suspend" ? "suspended" : "resumed");
  }
  return kExitCompleted;
}

struct Action {
  const char* name;
  const char* help;
  const char* synopsis;
};

constexpr Action kActions[] = {
    {"list", "A table: NAME PHASE AGE LAST-ACTIVITY MESSAGE (on a cluster: NAME PHASE POD AGE-or-MESSAGE)",
     "sessionturn sessions list [BACKEND] [-l SELECTOR] [--json]"},
    {"get", "The Session's fields", "sessionturn sessions get NAME [BACKEND] [--json]"},
    {"create", "Create the Session unless it exists (an existing one is kept as it is)",
     "sessionturn sessions create NAME --local [--provider SPEC] [--workdir DIR] [--label K=V]... "
     "[--annotation K=V]... [--json]\n"
     "sessionturn sessions create NAME [KUBE] (--spawner NAME | --template FILE) [--label K=V]... "
     "[--annotation K=V]... [--json]"},
    {"suspend", "Suspend the Session as its owner: its runtime stops, its state stays; turns are refused until resume",
     "sessionturn sessions suspend NAME [BACKEND] [--json]"},
    {"resume",
     "Lift the owner's suspension (a Session its idle policy suspended is woken by a turn or wait, not by this)",
     "sessionturn sessions resume NAME [BACKEND] [--json]"},
    {"delete", "Delete the Session (on --local: its runtime is stopped and its directory removed)",
     "sessionturn sessions delete NAME [BACKEND] [--json]"},
};

void AddCreateOptions(CLI::App& create, Args& args) {
  create.add_option("--provider", args.provider,
                    "with --local: the Session's provider, echo, script:FILE, command:CMD or "
                    "claude-code[:model=M,effort=E,permissions=skip|ask] (default echo)")
      ->type_name("SPEC")
      ->check(NonEmpty("a provider spec"));
  create.add_option("--workdir", args.workdir,
                    "with --local: the Session's working directory, an existing directory (default: its own "
                    "workspace under the state root)")
      ->type_name("DIR")
      ->check(NonEmpty("a directory"));
  create.add_option("--spawner", args.spawner,
                    "on a cluster: create it from this SessionSpawner's spec.sessionTemplate (owned by the spawner)")
      ->type_name("NAME")
      ->check(NonEmpty("a SessionSpawner name"));
  create.add_option("--template", args.template_file, "on a cluster: a JSON file, a Session or its spec")
      ->type_name("FILE")
      ->check(NonEmpty("a file"));
  create.add_option("--label", args.labels, "a label for the Session (repeatable)")
      ->type_name("KEY=VALUE")
      ->check(KeyValue())
      ->allow_extra_args(false);
  create.add_option("--annotation", args.annotations, "an annotation for the Session (repeatable)")
      ->type_name("KEY=VALUE")
      ->check(KeyValue())
      ->allow_extra_args(false);
}

}  // namespace

CLI::App* AddSessions(CLI::App& app, Args& args) {
  CLI::App* sessions = app.add_subcommand("sessions", "List, create, inspect, suspend, resume and delete Sessions");
  std::string synopsis;
  for (const Action& a : kActions) synopsis += std::string(synopsis.empty() ? "" : "\n") + a.synopsis;
  SetSynopsis(*sessions, synopsis);
  for (const Action& a : kActions) {
    CLI::App* action = sessions->add_subcommand(a.name, a.help);
    SetSynopsis(*action, a.synopsis);
    const std::string name = a.name;
    if (name != "list") action->add_option("NAME", args.name, "the Session")->type_name("");
    if (name == "list") {
      action->add_option("-l,--selector", args.selector, "only Sessions with these labels: KEY=VALUE[,KEY=VALUE...]")
          ->type_name("SELECTOR");
    }
    if (name == "create") AddCreateOptions(*action, args);
    AddKubeOptions(*action, args);
    AddLocalOptions(*action, args, false);
    AddJsonFlag(*action, args,
                "JSON: on a cluster, the raw objects as the API server returned them; on --local, name, phase, "
                "suspendReason, message, created, lastActivity, labels, annotations, details");
  }
  return sessions;
}

void CheckSessions(Args& args) {
  if (args.sessions_action.empty()) {
    throw UsageError{"`sessionturn sessions` needs list, get, create, suspend, resume or delete"};
  }
  if (args.sessions_action != "list" && args.name.empty()) {
    throw UsageError{"`sessionturn sessions " + args.sessions_action + "` needs a Session NAME"};
  }
  CheckBackendFlags(args);
  if (args.sessions_action != "create") return;
  if (!args.local && (!args.provider.empty() || !args.workdir.empty())) {
    throw UsageError{"--provider and --workdir go with --local (on a cluster the template says)"};
  }
  if (args.local && (!args.spawner.empty() || !args.template_file.empty())) {
    throw UsageError{"--spawner and --template are for a cluster, not --local"};
  }
  if (!args.local && args.spawner.empty() == args.template_file.empty()) {
    throw UsageError{"creating a Session in a cluster needs --spawner NAME or --template FILE (one of them)"};
  }
  if (!args.spawner.empty() && !args.labels.empty()) {
    throw UsageError{"--label goes with --template or --local (a spawner's template sets the labels)"};
  }
}

int RunSessions(const Args& args) {
  if (!args.local) return RunKubeSessions(args);
  st::Context context;
  auto backend = MakeBackend(context, args);
  if (args.sessions_action == "list") return List(args, *backend);
  if (args.sessions_action == "create") return Create(args, *backend);
  return Change(args, *backend);
}

}  // namespace sessionturn_cli
