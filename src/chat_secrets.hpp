// The chat bridges' secrets, as environment variables (docs/bridges.md). Processes we start for
// Sessions (local runtimes, their agents) never inherit them: an agent runs tools.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sessionturn {

inline constexpr std::string_view kChatSecretVariables[] = {"TELEGRAM_BOT_TOKEN", "TELEGRAM_WEBHOOK_SECRET",
                                                            "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN",
                                                            "SLACK_SIGNING_SECRET"};

// True for a "NAME=value" entry of one of them.
inline bool IsChatSecret(std::string_view entry) {
  for (std::string_view name : kChatSecretVariables)
    if (entry.size() > name.size() && entry.starts_with(name) && entry[name.size()] == '=') return true;
  return false;
}

// `env` (an environ-style array) without them.
inline std::vector<std::string> WithoutChatSecrets(char** env) {
  std::vector<std::string> out;
  for (char** e = env; e && *e; ++e)
    if (!IsChatSecret(*e)) out.emplace_back(*e);
  return out;
}

}  // namespace sessionturn
