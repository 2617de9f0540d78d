// `sessionturn sessions ...` on a cluster, through SessionClient: the raw objects (--json) and
// kubectl-like tables. Goes when KubernetesBackend lands (backend_flags.hpp): cmd_sessions.cpp then
// serves both backends.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <sessionturn/kube.hpp>
#include <sessionturn/sessions.hpp>

#include "kube_flags.hpp"
#include "output.hpp"

namespace sessionturn_cli {

namespace {

std::string Age(const st::Session& s) {
  const auto pointer = st::Json::json_pointer("/metadata/creationTimestamp");
  if (!s.raw.is_object() || !s.raw.contains(pointer) || !s.raw.at(pointer).is_string()) return "-";
  return AgeOfTimestamp(s.raw.at(pointer).get<std::string>());
}

void PrintSession(const st::Session& s) {
  PrintTable({
      {"Name:", s.name},
      {"Namespace:", s.namespace_name},
      {"Phase:", OrDash(s.phase)},
      {"Pod:", OrDash(s.pod_name)},
      {"Message:", OrDash(s.message)},
      {"Suspend:", s.suspend ? "true" : "false"},
      {"Ready reason:", OrDash(s.ready_reason)},
      {"Idle resume request:", OrDash(s.resume_request)},
      {"Idle resume acknowledgement:", OrDash(s.resume_acknowledgement)},
      {"Age:", Age(s)},
  });
}

int List(const Args& args, st::SessionClient& sessions, const std::string& namespace_name) {
  auto list = sessions.List(args.selector);
  if (!list) {
    std::fprintf(stderr, "sessionturn: %s\n", list.error().ToString().c_str());
    return SessionExitCode(list.error());
  }
  if (args.json) {
    st::Json items = st::Json::array();
    for (const st::Session& s : *list) items.push_back(s.raw);
    PrintJson(items);
    return kExitCompleted;
  }
  if (list->empty()) {
    std::fprintf(stderr, "sessionturn: no Sessions in namespace %s\n", namespace_name.c_str());
    return kExitCompleted;
  }
  std::vector<std::vector<std::string>> rows = {{"NAME", "PHASE", "POD", "AGE/MESSAGE"}};
  for (const st::Session& s : *list) {
    std::string phase = OrDash(s.phase);
    if (s.IsIdleSuspended()) phase += " (idle)";
    else if (s.IsOwnerSuspended()) phase += " (owner)";
    // A message says more than an age when there is one (why it failed, why it is suspended).
    std::string message = s.message;
    for (char& c : message) {
      if (c == '\n' || c == '\t') c = ' ';
    }
    rows.push_back({s.name, phase, OrDash(s.pod_name), message.empty() ? Age(s) : message});
  }
  PrintTable(rows);
  return kExitCompleted;
}

// "KEY=VALUE" flags (validated by the parser) as a map.
std::map<std::string, std::string> Pairs(const std::vector<std::string>& flags) {
  std::map<std::string, std::string> out;
  for (const std::string& kv : flags) out[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  return out;
}

// A Session object from --template FILE: a whole Session, or only its spec. JSON (YAML templates come
// with KubernetesBackend, whose template files are YAML or JSON).
st::Json ReadTemplate(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ExitWith{kExitUsage, "cannot read the Session template " + path};
  std::stringstream text;
  text << in.rdbuf();
  st::Json parsed = st::Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) {
    throw ExitWith{kExitUsage, "the Session template " + path + " is not a JSON object (a Session, or its spec)"};
  }
  if (parsed.contains("spec")) return parsed;
  return st::Json{{"spec", parsed}};
}

st::Result<st::Session> Create(const Args& args, st::SessionClient& sessions) {
  if (!args.spawner.empty()) return sessions.CreateFromSpawner(args.spawner, args.name, Pairs(args.annotations));
  st::Json object = ReadTemplate(args.template_file);
  st::Json& metadata = object["metadata"];
  if (!metadata.is_object()) metadata = st::Json::object();
  metadata["name"] = args.name;
  for (const auto& [key, value] : Pairs(args.labels)) metadata["labels"][key] = value;
  for (const auto& [key, value] : Pairs(args.annotations)) metadata["annotations"][key] = value;
  return sessions.Create(std::move(object));
}

}  // namespace

int RunKubeSessions(const Args& args) {
  const st::KubeConfig kube = LoadKube(args);
  st::KubeClient client(kube);
  st::SessionClient sessions(client, kube.Namespace());
  const std::string who = "Session " + kube.Namespace() + "/" + args.name;
  auto fail = [&](const st::Error& e) {
    std::fprintf(stderr, "sessionturn: %s\n", e.ToString().c_str());
    return SessionExitCode(e);
  };
  const std::string& action = args.sessions_action;
  if (action == "list") return List(args, sessions, kube.Namespace());
  if (action == "create") {
    auto created = Create(args, sessions);
    if (!created) return fail(created.error());
    if (args.json) PrintJson(created->raw);
    else std::fprintf(stdout, "%s created\n", who.c_str());
    return kExitCompleted;
  }
  if (action == "delete") {
    if (auto deleted = sessions.Delete(args.name); !deleted) return fail(deleted.error());
    if (args.json) {
      PrintJson({{"name", args.name}, {"namespace", kube.Namespace()}, {"deleted", true}});
    } else {
      std::fprintf(stdout, "%s deleted\n", who.c_str());
    }
    return kExitCompleted;
  }
  auto s = action == "get"       ? sessions.Get(args.name)
           : action == "suspend" ? sessions.Suspend(args.name)
                                 : sessions.Resume(args.name);
  if (!s) return fail(s.error());
  if (args.json) {
    PrintJson(s->raw);
  } else if (action == "get") {
    PrintSession(*s);
  } else {
    std::fprintf(stdout, "%s %s\n", who.c_str(), action == "suspend" ? "suspended" : "resumed");
    if (action == "resume" && s->IsIdleSuspended()) {
      std::fprintf(stderr,
                   "sessionturn: note: %s is also suspended by its idle policy; a turn or "
                   "`sessionturn wait %s` wakes it\n",
                   who.c_str(), args.name.c_str());
    }
  }
  return kExitCompleted;
}

}  // namespace sessionturn_cli
