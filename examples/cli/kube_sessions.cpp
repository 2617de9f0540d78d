// `sessionturn sessions list|get|suspend|resume|delete`: the Kelos Sessions of a cluster.
#include <cstdio>

#include <sessionturn/kube.hpp>
#include <sessionturn/sessions.hpp>

#include "commands.hpp"
#include "kube_flags.hpp"
#include "options.hpp"
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
  auto list = sessions.List();
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

}  // namespace

CLI::App* AddSessions(CLI::App& app, Args& args) {
  CLI::App* sessions = app.add_subcommand("sessions", "List, inspect, suspend, resume and delete Sessions");
  SetSynopsis(*sessions, "sessionturn sessions list [KUBE] [--json]\n"
                         "sessionturn sessions (get | suspend | resume | delete) NAME [KUBE] [--json]");
  struct Action {
    const char* name;
    const char* help;
  };
  const Action actions[] = {
      {"list", "A table: NAME PHASE POD AGE-or-MESSAGE (the status message when there is one)"},
      {"get", "The Session's fields"},
      {"suspend", "Suspend the Session as its owner (spec.suspend)"},
      {"resume", "Lift the owner's suspension (a Session its idle policy suspended is woken by a turn or wait)"},
      {"delete", "Delete the Session"},
  };
  for (const Action& a : actions) {
    CLI::App* action = sessions->add_subcommand(a.name, a.help);
    const std::string name = a.name;
    if (name == "list") {
      SetSynopsis(*action, "sessionturn sessions list [KUBE] [--json]");
    } else {
      SetSynopsis(*action, "sessionturn sessions " + name + " NAME [KUBE] [--json]");
      action->add_option("NAME", args.name, "the Session")->type_name("");
    }
    AddKubeOptions(*action, args);
    AddJsonFlag(*action, args, "the raw objects as the API server returned them");
  }
  return sessions;
}

void CheckSessions(Args& args) {
  if (args.sessions_action.empty()) {
    throw UsageError{"`sessionturn sessions` needs list, get, suspend, resume or delete"};
  }
  if (args.sessions_action != "list" && args.name.empty()) {
    throw UsageError{"`sessionturn sessions " + args.sessions_action + "` needs a Session NAME"};
  }
}

int RunSessions(const Args& args) {
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
