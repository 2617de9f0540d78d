// Chat commands (DESIGN.md §6): the words that manage a chat's Sessions instead of talking to one,
// parsed in the adapter's form ("/new@bot x" on Telegram, "new x" after the mention on Slack), and
// the help text that lists them. docs/routing-rules.md has the syntax.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "sessionturn/routing.hpp"

namespace sessionturn::routing {

enum class CommandKind { sessions, new_session, use, status, stop, suspend, resume, delete_session, help, unknown };
// The command word: "sessions", "new", "use", "status", "stop", "suspend", "resume", "delete", "help",
// "unknown".
std::string_view ToString(CommandKind kind) noexcept;

// A session name given to new, use or delete: 1 to 40 of [a-z0-9-] after lower-casing (the router
// makes the Session's name from it).
inline constexpr std::size_t kMaxCommandNameChars = 40;

struct ChatCommand {
  CommandKind kind = CommandKind::unknown;
  std::string word;  // the command word as written, lower-cased, without prefix or @bot
  std::string name;  // NAME (new, use, delete), lower-cased; empty when not given
  // Not empty: the arguments were wrong (a missing or invalid NAME, extra words). The router answers
  // with this Markdown text and runs nothing.
  std::string error;
};

// The command in `text`, or nullopt when `text` is a message for the agent.
// With a prefix (caps.command_prefix "/", Telegram): the first word is "/word" or "/word@bot" with
// word [A-Za-z0-9_]{1,32}, as Telegram writes commands (else, e.g. "/path/to/file", it is a
// message); "@bot" naming another bot than `bot_username` (case-insensitive, a leading '@'
// ignored) is a command for that bot: nullopt. An unknown word is CommandKind::unknown (answered
// with help, never sent to the agent: the prefix says the user meant a command), and wrong
// arguments set `error`.
// Without a prefix (Slack, where the adapter removed the mention): the text is a command only when
// it is exactly one: a known first word (case-insensitive) with no more words than the command
// takes ("stop", "use fix-login"). Anything else, an unknown first word or "help me with this"
// included, is a message: without a prefix, chat text cannot be told from a command any other way.
std::optional<ChatCommand> ParseCommand(std::string_view text, const ChatCapabilities& caps,
                                        std::string_view bot_username = {});

// Markdown listing every command in the adapter's form, for `help` and unknown commands.
std::string HelpText(const ChatCapabilities& caps);

}  // namespace sessionturn::routing
