// When a chat adapter tries a platform call again (Telegram's Bot API, Slack's Web API): a call that
// never reached the platform always; one that may have reached it (a dropped connection, a timeout, a
// 5xx) only when repeating it changes nothing. A 429 is not retried here: its retry_after goes back to
// the caller (the router paces that chat). Internal to src/chat.
#pragma once
#include "sessionturn/error.hpp"

namespace sessionturn::chat {

inline bool WorthRetrying(const Error& e, bool repeatable) {
  if (e.code == Errc::connection_failed) return true;  // nothing was sent
  const bool transient = e.code == Errc::connection_lost || e.code == Errc::timeout ||
                         (e.http_status >= 500 && e.http_status < 600);
  return transient && repeatable;
}

}  // namespace sessionturn::chat
