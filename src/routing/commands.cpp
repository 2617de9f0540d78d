// Chat command parsing and the help text (routing/commands.hpp).
#include "routing/commands.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <vector>

#include "event_encode.hpp"
#include "sessionturn/protocol.hpp"
#include "unicode.hpp"

namespace sessionturn::routing {

namespace {

enum class Arity { none, optional_name, name };

struct CommandSpec {
  CommandKind kind;
  std::string_view word;
  Arity arity;
  std::string_view summary;  // Markdown, for the help text
};

// In the help text's order.
constexpr std::array<CommandSpec, 9> kCommands{{
    {CommandKind::sessions, "sessions", Arity::none, "list this chat's sessions"},
    {CommandKind::new_session, "new", Arity::optional_name, "start a new session and make it the current one"},
    {CommandKind::use, "use", Arity::name, "make session NAME the current one"},
    {CommandKind::status, "status", Arity::none, "show the current session and what it is doing"},
    {CommandKind::stop, "stop", Arity::none, "stop the current session's running turn"},
    {CommandKind::suspend, "suspend", Arity::none, "suspend the current session (its work is kept)"},
    {CommandKind::resume, "resume", Arity::none, "resume the current session"},
    {CommandKind::delete_session, "delete", Arity::name, "delete session NAME (admins only)"},
    {CommandKind::help, "help", Arity::none, "show this list"},
}};

// Telegram's limits for a command and a bot username.
constexpr std::size_t kMaxCommandWord = 32;
constexpr std::size_t kMaxBotUsername = 64;

const CommandSpec* Find(std::string_view word) {
  for (const auto& spec : kCommands) {
    if (spec.word == word) return &spec;
  }
  return nullptr;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool IsWordChars(std::string_view s, std::size_t max) {
  return !s.empty() && s.size() <= max && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool IsValidName(std::string_view name) {
  return !name.empty() && name.size() <= kMaxCommandNameChars && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

// A command is a word and at most one argument: three words tell a command (even one with too many
// arguments) from a sentence, so a long message is not split any further.
constexpr std::size_t kWordsLooked = 3;

// The first `most` words, separated by Unicode white space (as the runtime trims it).
std::vector<std::string_view> Words(std::string_view text, std::size_t most) {
  std::vector<std::string_view> words;
  words.reserve(most);  // one allocation, not one per word (every message is looked at)
  std::size_t start = 0, i = 0;
  while (i < text.size() && words.size() < most) {
    char32_t cp = 0;
    const std::size_t n = detail::GoRuneLen(text, i, &cp);
    if (n > 0 && IsUnicodeSpace(cp)) {
      if (i > start) words.push_back(text.substr(start, i - start));
      i += n;
      start = i;
    } else {
      i += n > 0 ? n : 1;
    }
  }
  if (i > start && words.size() < most) words.push_back(text.substr(start, i - start));
  return words;
}

std::string Usage(const CommandSpec& spec, const ChatCapabilities& caps) {
  std::string usage = caps.command_prefix + std::string(spec.word);
  if (spec.arity == Arity::optional_name) usage += " [NAME]";
  if (spec.arity == Arity::name) usage += " NAME";
  return usage;
}

constexpr std::string_view kNameRule = "a session name is 1 to 40 letters, digits or `-` (like `fix-login`)";

ChatCommand Build(const CommandSpec& spec, std::string word, const std::vector<std::string_view>& args,
                  const ChatCapabilities& caps) {
  ChatCommand c{spec.kind, std::move(word), {}, {}};
  const std::string usage = "`" + Usage(spec, caps) + "`";
  const std::size_t max_args = spec.arity == Arity::none ? 0 : 1;
  if (args.size() > max_args) {
    c.error = max_args == 0 ? usage + " takes no arguments." : "Usage: " + usage + " (" + std::string(kNameRule) + ").";
    return c;
  }
  if (args.empty()) {
    if (spec.arity == Arity::name) c.error = usage + " needs a session name: " + std::string(kNameRule) + ".";
    return c;
  }
  std::string name = Lower(args[0]);
  if (!IsValidName(name)) {
    c.error = "That is not a session name: " + std::string(kNameRule) + ".";
    return c;
  }
  c.name = std::move(name);
  return c;
}

std::optional<ChatCommand> ParseBare(const std::vector<std::string_view>& words, const ChatCapabilities& caps) {
  std::string word = Lower(words[0]);
  const CommandSpec* spec = Find(word);
  if (spec == nullptr) return std::nullopt;
  if (words.size() > (spec->arity == Arity::none ? 1u : 2u)) return std::nullopt;  // a sentence, not a command
  return Build(*spec, std::move(word), {words.begin() + 1, words.end()}, caps);
}

}  // namespace

std::string_view ToString(CommandKind kind) noexcept {
  for (const auto& spec : kCommands) {
    if (spec.kind == kind) return spec.word;
  }
  return "unknown";
}

std::optional<ChatCommand> ParseCommand(std::string_view text, const ChatCapabilities& caps,
                                        std::string_view bot_username) {
  const std::vector<std::string_view> words = Words(TrimUnicodeSpace(text), kWordsLooked);
  if (words.empty()) return std::nullopt;
  const std::string_view prefix = caps.command_prefix;
  if (prefix.empty()) return ParseBare(words, caps);

  std::string_view first = words[0];
  if (first.substr(0, prefix.size()) != prefix) return std::nullopt;
  first.remove_prefix(prefix.size());
  const std::size_t at = first.find('@');
  const std::string_view word = first.substr(0, at);
  const std::string_view target = at == std::string_view::npos ? std::string_view() : first.substr(at + 1);
  if (!IsWordChars(word, kMaxCommandWord)) return std::nullopt;
  if (at != std::string_view::npos && !IsWordChars(target, kMaxBotUsername)) return std::nullopt;
  if (!bot_username.empty() && bot_username.front() == '@') bot_username.remove_prefix(1);
  if (!target.empty() && !bot_username.empty() && Lower(target) != Lower(bot_username)) return std::nullopt;

  std::string lowered = Lower(word);
  const std::vector<std::string_view> args(words.begin() + 1, words.end());
  if (const CommandSpec* spec = Find(lowered)) return Build(*spec, std::move(lowered), args, caps);
  return ChatCommand{CommandKind::unknown, std::move(lowered), {}, {}};
}

std::string HelpText(const ChatCapabilities& caps) {
  std::string out;
  if (caps.command_prefix.empty()) {
    out += "**Commands** (mention me first, except in a private chat; a command is the whole message):\n\n";
  } else {
    out += "**Commands**\n\n";
  }
  for (const auto& spec : kCommands) {
    out += "- `" + Usage(spec, caps) + "`: " + std::string(spec.summary) + "\n";
  }
  out += "\nNAME: 1 to 40 letters, digits or `-`. Anything else you write goes to the agent.\n";
  return out;
}

}  // namespace sessionturn::routing
