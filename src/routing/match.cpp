// Route matching (DESIGN.md §6): allow-lists, mentions, triggers and excludes, checked in a fixed
// order so that the reason a message was refused is the first rule it broke.
#include "routing/match.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include "routing/envelope.hpp"

namespace sessionturn::routing {

namespace {

bool Contains(const std::vector<std::string>& list, std::string_view value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  });
}

// Ids and names quoted in reasons and warnings: they reach logs, so one bounded line.
std::string Quote(std::string_view text) {
  return "'" + FlattenLine(text, kMaxAuthorIdChars) + "'";
}

}  // namespace

Result<RouteMatcher> RouteMatcher::Compile(std::vector<RouteConfig> routes) {
  RouteMatcher matcher;
  std::set<std::string> names;
  for (std::size_t i = 0; i < routes.size(); ++i) {
    RouteConfig& route = routes[i];
    if (route.name.empty()) route.name = "route-" + std::to_string(i);
    if (!names.insert(route.name).second) {
      return Fail(Errc::invalid_argument, "route " + Quote(route.name) + " (index " + std::to_string(i) +
                                              "): an earlier route has the same name");
    }
    Compiled compiled;
    const auto compile = [&](const std::vector<std::string>& sources, std::vector<Pattern>& out,
                             const char* what) -> Status {
      for (std::size_t k = 0; k < sources.size(); ++k) {
        const std::string where =
            "route " + Quote(route.name) + " (index " + std::to_string(i) + "): " + what + " " + std::to_string(k + 1);
        if (sources[k].empty()) return Fail(Errc::invalid_argument, where + " is empty");
        try {
          out.push_back(Pattern{sources[k], std::regex(sources[k], std::regex::ECMAScript)});
        } catch (const std::regex_error& e) {
          return Fail(Errc::invalid_argument,
                      where + " /" + sources[k] + "/ is not a valid ECMAScript regex: " + e.what());
        }
      }
      return {};
    };
    if (auto st = compile(route.triggers, compiled.triggers, "trigger"); !st) return Fail(st.error());
    if (auto st = compile(route.excludes, compiled.excludes, "exclude"); !st) return Fail(st.error());
    matcher.compiled_.push_back(std::move(compiled));
  }
  matcher.routes_ = std::move(routes);
  return matcher;
}

std::string RouteMatcher::Refusal(std::size_t index, const InboundMessage& message, std::string* warning) const {
  const RouteConfig& route = routes_[index];
  const Compiled& compiled = compiled_[index];
  if (message.is_self) return "it is the bot's own message";
  const bool listed_bot = message.is_bot && Contains(route.allowed_bots, message.author_id);
  if (message.is_bot && !route.allow_bots && !listed_bot) {
    return "it is from bot " + Quote(message.author_id) + " (allow_bots is off and allowed_bots does not list it)";
  }
  if (!route.platform.empty() && !EqualsIgnoreCase(route.platform, message.platform)) {
    return "it is from " + Quote(message.platform) + " and the route is for " + Quote(route.platform);
  }
  if (!route.chats.empty() && !Contains(route.chats, message.chat)) {
    return "chat " + Quote(message.chat) + " is not one of the route's chats";
  }
  if (!IsAllowedUser(route, message.author_id) && !listed_bot) {
    return "user " + Quote(message.author_id) + " is not one of the route's users";
  }
  const bool mention_required = route.require_mention.value_or(!message.is_private_chat);
  if (mention_required && !message.mentions_bot) {
    return route.require_mention ? "the bot was not mentioned (the route requires a mention)"
                                 : "the bot was not mentioned (required outside private chats)";
  }

  const std::string_view text = CutUtf8(message.text, kMaxMatchTextBytes);
  // A regex_error here is the engine giving up (error_complexity, error_stack): the pattern counts
  // as not matching, and the warning says so.
  const auto matches = [&](const Pattern& p, const char* what) {
    try {
      return std::regex_search(text.begin(), text.end(), p.regex);
    } catch (const std::regex_error& e) {
      if (!warning->empty()) *warning += "; ";
      *warning += "route " + Quote(route.name) + ": " + what + " /" + p.source + "/ could not be evaluated (" +
                  e.what() + "): taken as not matching";
      return false;
    }
  };
  for (const Pattern& p : compiled.excludes) {
    if (matches(p, "exclude")) return "the text matches exclude /" + p.source + "/";
  }
  if (!compiled.triggers.empty() && std::none_of(compiled.triggers.begin(), compiled.triggers.end(),
                                                 [&](const Pattern& p) { return matches(p, "trigger"); })) {
    return "the text matches none of the route's triggers";
  }
  return {};
}

RouteMatch RouteMatcher::Match(const InboundMessage& message) const {
  RouteMatch result;
  if (routes_.empty()) {
    result.reason = "no routes are configured";
    return result;
  }
  std::string first_reason;
  for (std::size_t i = 0; i < routes_.size(); ++i) {
    std::string reason = Refusal(i, message, &result.warning);
    if (reason.empty()) {
      result.route = &routes_[i];
      result.index = i;
      return result;
    }
    if (i == 0) first_reason = std::move(reason);
  }
  result.reason = "route " + Quote(routes_[0].name) + ": " + first_reason;
  if (routes_.size() > 1) result.reason += " (and " + std::to_string(routes_.size() - 1) + " more refused it)";
  return result;
}

bool IsAllowedUser(const RouteConfig& route, std::string_view user) {
  return route.users.empty() || Contains(route.users, user);
}

bool IsAdmin(const RouteConfig& route, std::string_view user) {
  return !user.empty() && Contains(route.admins, user);
}

}  // namespace sessionturn::routing
