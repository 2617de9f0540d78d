// Chat commands: several Sessions from one chat (sessions, new, use), the current one's state and
// control (status, stop, suspend, resume), delete (admins, confirmed), help. None of it reaches a
// runtime as a prompt.
#include <algorithm>
#include <cstdio>

#include "routing/commands.hpp"
#include "routing/router_impl.hpp"
#include "sessionturn/render.hpp"

namespace sessionturn {

using routing::ChatCommand;
using routing::CommandKind;

namespace {

constexpr std::chrono::seconds kDeleteConfirmWindow{60};
// A `sessions` list's buttons act for an hour; at most kMaxPickers lists are kept (the oldest go).
constexpr std::chrono::hours kPickerLifetime{1};
constexpr std::size_t kMaxPickers = 1024;

std::string Ago(std::chrono::system_clock::time_point t) {
  if (t == std::chrono::system_clock::time_point{}) return "never";
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now() - t).count();
  if (s < 60) return std::to_string(std::max<long long>(s, 0)) + " s ago";
  if (s < 3600) return std::to_string(s / 60) + " min ago";
  if (s < 86400) return std::to_string(s / 3600) + " h ago";
  return std::to_string(s / 86400) + " d ago";
}

}  // namespace

std::string Router::Impl::DisplayName(const routing::ChatRef& chat, const std::string& session) {
  auto listed = store->ListChatSessions(chat);
  if (listed) {
    for (const auto& cs : *listed) {
      if (cs.session == session && !cs.label.empty()) return cs.label;
    }
  }
  return session;
}

void Router::Impl::SwitchTo(const ThreadRef& where, const std::string& session, const std::string& reply_to) {
  const routing::ChatRef chat = routing::ChatRef::Of(where);
  Status st = where.thread.empty()
                  ? store->SetCurrent(chat, session)
                  : store->BindThread(routing::Binding{where, session, std::chrono::system_clock::now(), false});
  if (!st) return Note(where, "\u26A0\uFE0F " + EscapeMarkdown(st.error().message), {}, reply_to);
  Note(where, "Now talking to **" + EscapeMarkdown(DisplayName(chat, session)) + "**" +
                  (where.thread.empty() ? " in this chat." : " in this thread."), session, reply_to);
}

void Router::Impl::ListSessions(const InboundMessage& m, const std::string& current) {
  auto listed = store->ListChatSessions(routing::ChatRef::Of(m.Where()));
  if (!listed) return Note(m.Where(), "\u26A0\uFE0F " + EscapeMarkdown(listed.error().message), {}, m.message_id);
  auto chat_sessions = std::move(*listed);
  backend.AsyncList(
      {}, OnStrand<Result<std::vector<SessionInfo>>>([m, current, chat_sessions](Impl& r,
                                                                                 Result<std::vector<SessionInfo>> all) {
        std::map<std::string, SessionInfo> infos;
        if (all) {
          for (auto& info : *all) infos[info.name] = std::move(info);
        }
        std::string text = "**Sessions of this chat**\n\n";
        std::vector<std::vector<Button>> buttons;
        char picker[16];
        do {
          std::snprintf(picker, sizeof picker, "%010llx", static_cast<unsigned long long>(r.rng() & 0xffffffffffULL));
        } while (r.pickers.count(picker) != 0);
        std::vector<std::string> names;
        for (const auto& cs : chat_sessions) {
          const std::size_t index = names.size();
          names.push_back(cs.session);
          text += "- **" + EscapeMarkdown(cs.label.empty() ? cs.session : cs.label) + "**";
          if (!cs.label.empty()) text += " (" + MarkdownCode(cs.session) + ")";
          auto info = infos.find(cs.session);
          if (info != infos.end()) {
            text += " \u2014 " + std::string(ToString(info->second.phase));
            if (info->second.suspended != SuspendReason::none) text += " (" + std::string(ToString(info->second.suspended)) + ")";
            text += ", last activity " + Ago(info->second.last_activity);
          } else {
            text += " \u2014 not created yet";
          }
          auto run = r.sessions.find(cs.session);
          if (run != r.sessions.end()) {
            if (run->second->running) text += ", a turn is running";
            if (!run->second->queue.empty()) text += ", " + std::to_string(run->second->queue.size()) + " queued";
          }
          if (cs.session == current) text += " \u2190 current";
          text += "\n";
          const std::string base = std::string("p:") + picker + ":";
          if (r.caps.buttons && base.size() + 8 <= r.caps.button_data_limit) {
            std::vector<Button> row{{"Use " + (cs.label.empty() ? cs.session : cs.label), base + "u" + std::to_string(index)}};
            if (run != r.sessions.end() && run->second->running) {
              row.push_back({"Stop", base + "s" + std::to_string(index)});
            }
            const bool busy = run != r.sessions.end() && (run->second->running || !run->second->queue.empty());
            if (info != infos.end() && info->second.phase == SessionPhase::ready && !busy) {
              row.push_back({"Suspend", base + "z" + std::to_string(index)});
            }
            buttons.push_back(std::move(row));
          }
        }
        if (chat_sessions.empty()) text += "_None yet: the first message starts one._\n";
        if (!all) text += "\n_(the backend could not say their phases: " + EscapeMarkdown(all.error().message) + ")_";
        r.KeepPicker(picker, Picker{m.Where(), std::move(names), std::chrono::steady_clock::now() + kPickerLifetime});
        r.adapter.AsyncPost(m.Where(), OutboundMessage{r.Render(text), std::move(buttons), m.message_id},
                            r.OnStrand<Result<std::string>>([](Impl& r2, Result<std::string> id) {
                              if (!id) r2.Log(LogLevel::warning, "posting the sessions list failed: " + id.error().ToString());
                            }));
      }));
}

void Router::Impl::TryCommand(const InboundMessage& m, std::size_t route, const std::string& session) {
  auto parsed = routing::ParseCommand(m.text, caps, options.bot_username);
  if (!parsed) return;
  const ChatCommand& cmd = *parsed;
  const ThreadRef where = m.Where();
  if (!cmd.error.empty()) return Note(where, cmd.error, {}, m.message_id);
  const routing::ChatRef chat = routing::ChatRef::Of(where);
  auto reply = [&](const std::string& markdown) { Note(where, markdown, session, m.message_id); };
  switch (cmd.kind) {
    case CommandKind::help:
    case CommandKind::unknown: return reply(routing::HelpText(caps));
    case CommandKind::sessions: return ListSessions(m, session);
    case CommandKind::new_session: {
      std::string key = cmd.name.empty() ? "new:" + std::to_string(rng()) : "name:" + cmd.name;
      std::string name = SessionName(options.session_prefix, where.platform, options.owner_uid, where.chat, key);
      auto added = store->AddChatSession({chat, name, std::chrono::system_clock::now(), cmd.name});
      if (!added) return reply("\u26A0\uFE0F " + EscapeMarkdown(added.error().message));
      if (!*added) {
        return reply("There is a session called **" + EscapeMarkdown(cmd.name) + "** already: " +
                     MarkdownCode(caps.command_prefix + "use " + cmd.name) + " switches to it.");
      }
      SessionFor(name, route);
      return SwitchTo(where, name, m.message_id);
    }
    case CommandKind::use: {
      auto listed = store->ListChatSessions(chat);
      if (!listed) return reply("\u26A0\uFE0F " + EscapeMarkdown(listed.error().message));
      for (const auto& cs : *listed) {
        if (cs.label == cmd.name || cs.session == cmd.name) return SwitchTo(where, cs.session, m.message_id);
      }
      return reply("This chat has no session called **" + EscapeMarkdown(cmd.name) + "** (" +
                   MarkdownCode(caps.command_prefix + "sessions") + " lists them).");
    }
    case CommandKind::status: {
      auto run = sessions.find(session);
      std::string text = "**" + EscapeMarkdown(DisplayName(chat, session)) + "**";
      if (run != sessions.end() && run->second->running) {
        text += "\n" + ProgressText(*run->second->running);
        if (run->second->running->usage) {
          text += "\n_tokens so far: " + std::to_string(run->second->running->usage->total_tokens) + "_";
        }
      } else {
        text += "\nNo turn is running.";
      }
      if (run != sessions.end() && !run->second->queue.empty()) {
        text += "\n" + std::to_string(run->second->queue.size()) + " message(s) queued.";
      }
      backend.AsyncGet(session, OnStrand<Result<SessionInfo>>([text, where, session, id = m.message_id](
                                                                  Impl& r, Result<SessionInfo> info) {
        std::string out = text;
        if (info) {
          out += "\nPhase: " + std::string(ToString(info->phase));
          if (info->suspended != SuspendReason::none) out += " (" + std::string(ToString(info->suspended)) + ")";
        } else if (info.error().code == Errc::not_found) {
          out += "\nNot created yet: the next message starts it.";
        }
        r.Note(where, out, session, id);
      }));
      return;
    }
    case CommandKind::stop: {
      auto run = sessions.find(session);
      if (run == sessions.end() || !run->second->running) return reply("Nothing is running.");
      return StopTurn(*run->second, where, m.message_id);
    }
    case CommandKind::suspend:
    case CommandKind::resume: {
      const bool suspend = cmd.kind == CommandKind::suspend;
      if (suspend && Busy(session, where, m.message_id, "suspend")) return;
      auto done = OnStrand<Result<SessionInfo>>([where, session, suspend, id = m.message_id](Impl& r, Result<SessionInfo> info) {
        if (suspend && info) r.ForgetReady(session, /*drop_driver=*/true);  // its runtime stops
        r.Note(where, info ? (suspend ? "Suspended **" : "Resumed **") + EscapeMarkdown(session) + "**."
                           : "\u26A0\uFE0F " + EscapeMarkdown(info.error().message), session, id);
      });
      ForgetReady(session, /*drop_driver=*/false);  // the next turn looks at the Session first
      if (suspend) return backend.AsyncSuspend(session, std::move(done));
      return backend.AsyncResume(session, std::move(done));
    }
    case CommandKind::delete_session: {
      if (!routing::IsAdmin(Route(route), m.author_id)) return reply("Only an admin of this bot can delete sessions.");
      auto listed = store->ListChatSessions(chat);
      if (!listed) return reply("\u26A0\uFE0F " + EscapeMarkdown(listed.error().message));
      std::string target;
      for (const auto& cs : *listed) {
        if (cs.label == cmd.name || cs.session == cmd.name) target = cs.session;
      }
      if (target.empty()) return reply("This chat has no session called **" + EscapeMarkdown(cmd.name) + "**.");
      auto run = sessions.find(target);
      if (run != sessions.end() && (run->second->running || !run->second->queue.empty())) {
        return reply("**" + EscapeMarkdown(cmd.name) + "** has a turn running or queued: " +
                     MarkdownCode(caps.command_prefix + "stop") + " it first.");
      }
      const std::string key = ChatKey(where) + '\x1f' + target + '\x1f' + m.author_id;  // each admin confirms
      const auto now = std::chrono::steady_clock::now();
      auto pending = pending_deletes.find(key);
      if (pending == pending_deletes.end() || pending->second < now) {
        pending_deletes[key] = now + kDeleteConfirmWindow;
        return reply("This deletes **" + EscapeMarkdown(cmd.name) + "** with its workspace and conversation. Send " +
                     MarkdownCode(m.text) + " again within a minute to confirm.");
      }
      pending_deletes.erase(pending);
      for (auto it = pending_deletes.begin(); it != pending_deletes.end();) {  // the expired go too
        it = it->second < now ? pending_deletes.erase(it) : std::next(it);
      }
      backend.AsyncDelete(target, OnStrand<Status>([where, target, label = cmd.name, id = m.message_id](Impl& r, Status st) {
        if (st || st.error().code == Errc::not_found) {
          auto run = r.sessions.find(target);
          (void)r.Durably("forgetting a deleted Session", [&] {
            if (auto removed = r.store->UnbindSession(target); !removed) r.Log(LogLevel::warning, removed.error().ToString());
            // It was idle when the delete was sent; a message that came for it since is withdrawn, told
            // so in its receipt (and out of the inbox, so a restart does not bring the Session back).
            if (run == r.sessions.end()) return;
            for (const std::unique_ptr<routing::Waiting>& w : run->second->queue) {
              if (auto st = r.Withdraw(*w); !st) r.Log(LogLevel::warning, st.error().ToString());
              r.SetLive(w->receipt, "Withdrawn: its Session **" + EscapeMarkdown(label) +
                                       "** was deleted before its turn started.");
            }
          });
          if (run != r.sessions.end()) {
            r.waiting_total -= run->second->queue.size();
            r.SetRunning(*run->second, nullptr);  // a turn started since fails with its Session, and says so
            run->second->gone = true;  // a turn or a start still holding it looks the name up
            r.sessions.erase(run);
          }
        }
        r.Note(where, st || st.error().code == Errc::not_found
                          ? "Deleted **" + EscapeMarkdown(label) + "**."
                          : "\u26A0\uFE0F **" + EscapeMarkdown(label) + "** could not be deleted: " +
                                EscapeMarkdown(st.error().message),
               {}, id);
      }));
      return;
    }
  }
}

bool Router::Impl::Busy(const std::string& session, const ThreadRef& where, const std::string& reply_to,
                        std::string_view what) {
  auto run = sessions.find(session);
  if (run == sessions.end() || (!run->second->running && !run->second->starting && run->second->queue.empty())) {
    return false;
  }
  // Its runtime would stop under the running turn, and every queued message fail on a suspended Session.
  Note(where, "**" + EscapeMarkdown(session) + "** has a turn running or messages queued: " +
                  MarkdownCode(caps.command_prefix + "stop") + " it, or wait until they are done, then " +
                  std::string(what) + " it.", session, reply_to);
  return true;
}

void Router::Impl::KeepPicker(const std::string& id, Picker picker) {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = pickers.begin(); it != pickers.end();) it = it->second.expires < now ? pickers.erase(it) : std::next(it);
  while (pickers.size() >= kMaxPickers) {
    pickers.erase(std::min_element(pickers.begin(), pickers.end(), [](const auto& a, const auto& b) {
      return a.second.expires < b.second.expires;
    }));
  }
  pickers[id] = std::move(picker);
}

bool Router::Impl::MayManage(const ThreadRef& where, const std::string& user) const {
  // A button press has no text: mentions and triggers are about messages. The chat and the user
  // must be ones a route lets talk.
  for (const RouteConfig& r : matcher.routes()) {
    if (!r.platform.empty() && r.platform != where.platform) continue;
    if (!r.chats.empty() && std::find(r.chats.begin(), r.chats.end(), where.chat) == r.chats.end()) continue;
    if (routing::IsAllowedUser(r, user) || routing::IsAdmin(r, user)) return true;
  }
  return false;
}

bool Router::Impl::PickerAction(const InboundAction& action) {
  // "p:<picker>:<u|s|z><index>"
  if (action.data.rfind("p:", 0) != 0) return false;
  const auto colon = action.data.find(':', 2);
  if (colon == std::string::npos || colon + 2 > action.data.size()) return false;
  const std::string picker = action.data.substr(2, colon - 2);
  const char verb = action.data[colon + 1];
  std::size_t index = 0;
  try {
    index = std::stoul(action.data.substr(colon + 2));
  } catch (const std::exception&) {
    return false;
  }
  auto ack = [&](std::string_view text) {
    if (action.ack) action.ack(text);
  };
  auto it = pickers.find(picker);
  if (it != pickers.end() && it->second.expires < std::chrono::steady_clock::now()) {
    pickers.erase(it);
    it = pickers.end();
  }
  const std::string again = "send " + caps.command_prefix + "sessions again.";
  if (it == pickers.end() || index >= it->second.sessions.size()) {
    ack("This list is out of date (it expired, or the bot restarted): " + again);
    return true;
  }
  const ThreadRef where = it->second.where;
  if (action.platform != where.platform || action.chat != where.chat) {
    ack("This button belongs to another chat.");
    return true;
  }
  const std::string session = it->second.sessions[index];
  if (!MayManage(where, action.author_id)) {
    ack("You cannot manage this chat's sessions.");
    return true;
  }
  if (verb != 'u' && verb != 's' && verb != 'z') {
    ack("This button is not one this bot made: " + again);
    return true;
  }
  if (shutting_down) {
    ack("The bot is restarting: try again in a moment.");
    return true;
  }
  if (verb == 'u') {
    // Deleted since the list was posted: not brought back.
    auto listed = store->ListChatSessions(routing::ChatRef::Of(where));
    if (!listed || std::none_of(listed->begin(), listed->end(),
                                [&session](const routing::ChatSession& cs) { return cs.session == session; })) {
      ack(listed ? "That session is gone: " + again : "The bot's state could not be read: try again.");
      return true;
    }
    ack({});
    SwitchTo(where, session, {});
  } else if (verb == 's') {
    ack({});
    auto run = sessions.find(session);
    if (run != sessions.end() && run->second->running) {
      StopTurn(*run->second, where, {});
    } else {
      Note(where, "Nothing is running in **" + EscapeMarkdown(session) + "**.", session);
    }
  } else {
    ack({});
    if (Busy(session, where, {}, "suspend")) return true;
    ForgetReady(session, /*drop_driver=*/false);  // the next turn looks at the Session first
    backend.AsyncSuspend(session, OnStrand<Result<SessionInfo>>([where, session](Impl& r, Result<SessionInfo> info) {
      if (info) r.ForgetReady(session, /*drop_driver=*/true);  // its runtime stops
      r.Note(where, info ? "Suspended **" + EscapeMarkdown(session) + "**." : "\u26A0\uFE0F " + EscapeMarkdown(info.error().message),
             session);
    }));
  }
  return true;
}

}  // namespace sessionturn
