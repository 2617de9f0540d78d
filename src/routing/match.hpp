// Routes compiled for matching: which route (if any) handles an inbound message, and why none did.
// The rules and their order are in docs/routing-rules.md; the Router calls Match for every message.
#pragma once

#include <cstddef>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "sessionturn/error.hpp"
#include "sessionturn/routing.hpp"

namespace sessionturn::routing {

// Triggers and excludes see only this much of a message's text. libstdc++'s std::regex matches by
// recursion, stack frames per character for patterns like "(a|b)*": measured with g++ 12 -O2, about
// 750 bytes of stack per byte of text, so 2,000 bytes need about 1.5 MB, well within a thread's
// default 8 MB (an ASan -O0 build needs about 1.5 times that), where 30 KB of text crashes.
// Nested groups cost more per byte. A trigger is about how a message starts or what it is about,
// which its first 2,000 bytes show (cut at a character boundary).
inline constexpr std::size_t kMaxMatchTextBytes = 2000;

struct RouteMatch {
  const RouteConfig* route = nullptr;  // the first route that matched; nullptr: none did
  std::size_t index = 0;               // route's index in the compiled list
  // When no route matched: why the first route refused it (for logs), "route 'main': ...".
  std::string reason;
  // A trigger or exclude that could not be evaluated on this text (std::regex_error at match time:
  // treated as not matching); empty when all could.
  std::string warning;
};

class RouteMatcher {
 public:
  // Validates and compiles `routes` in order. Routes without a name are named "route-<index>".
  // Errc::invalid_argument naming the route and the pattern for a trigger or exclude that is empty
  // or not an ECMAScript regex, and for two routes with the same name. No routes is valid: then no
  // message matches.
  static Result<RouteMatcher> Compile(std::vector<RouteConfig> routes);

  // The first route that takes `message`. Rules, in order (each route): the bot's own messages
  // never; other bots' only with allow_bots or when listed in allowed_bots; platform; chats; users
  // (a bot listed in allowed_bots passes); mention (require_mention unset: required unless the
  // chat is private); excludes (any match drops it); triggers (when set, one must match).
  RouteMatch Match(const InboundMessage& message) const;

  const std::vector<RouteConfig>& routes() const { return routes_; }

 private:
  struct Pattern {
    std::string source;
    std::regex regex;
  };
  struct Compiled {
    std::vector<Pattern> triggers;
    std::vector<Pattern> excludes;
  };

  // Empty when `route` takes the message; else why not. Appends to *warning for patterns that
  // failed to evaluate.
  std::string Refusal(std::size_t index, const InboundMessage& message, std::string* warning) const;

  std::vector<RouteConfig> routes_;
  std::vector<Compiled> compiled_;
};

// `user` may talk through `route` (its users list is empty or names them).
bool IsAllowedUser(const RouteConfig& route, std::string_view user);
// `user` may run admin commands (delete) on `route`'s Sessions: its admins list names them.
bool IsAdmin(const RouteConfig& route, std::string_view user);

}  // namespace sessionturn::routing
