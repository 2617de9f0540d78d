// Route matching (routing/match.hpp): every rule both ways, in order, and compile errors.
#include <catch2/catch.hpp>

#include "routing/match.hpp"

using namespace sessionturn;
using namespace sessionturn::routing;

namespace {

InboundMessage Message(std::string text = "hello") {
  InboundMessage m;
  m.platform = "slack";
  m.workspace = "T1";
  m.chat = "C1";
  m.thread = "1.0";
  m.message_id = "2.0";
  m.author_id = "U1";
  m.author_name = "Ada";
  m.text = std::move(text);
  m.mentions_bot = true;
  return m;
}

RouteConfig Route(std::string name = "main") {
  RouteConfig r;
  r.name = std::move(name);
  return r;
}

RouteMatcher Compile(std::vector<RouteConfig> routes) {
  auto m = RouteMatcher::Compile(std::move(routes));
  REQUIRE(m.has_value());
  return std::move(*m);
}

// The reason the only route refused `m` ("" when it took it).
std::string Refusal(const RouteConfig& route, const InboundMessage& m) {
  const RouteMatcher matcher = Compile({route});
  const RouteMatch r = matcher.Match(m);
  if (r.route != nullptr) {
    CHECK(r.reason.empty());
    return "";
  }
  CHECK_FALSE(r.reason.empty());
  return r.reason;
}

}  // namespace

TEST_CASE("A route with no conditions takes a mentioned message", "[match]") {
  const RouteMatcher matcher = Compile({Route()});
  const RouteMatch r = matcher.Match(Message());
  REQUIRE(r.route != nullptr);
  CHECK(r.route->name == "main");
  CHECK(r.index == 0);
}

TEST_CASE("The bot's own messages never match, whatever the route allows", "[match]") {
  RouteConfig route = Route();
  route.allow_bots = true;
  route.allowed_bots = {"U1"};
  InboundMessage m = Message();
  m.is_self = true;
  m.is_bot = true;
  CHECK_THAT(Refusal(route, m), Catch::Contains("the bot's own message"));
}

TEST_CASE("Other bots match only with allow_bots or when listed", "[match]") {
  InboundMessage m = Message();
  m.is_bot = true;
  m.author_id = "B7";
  RouteConfig route = Route();
  CHECK_THAT(Refusal(route, m), Catch::Contains("from bot 'B7'"));
  route.allow_bots = true;
  CHECK(Refusal(route, m).empty());
  route.allow_bots = false;
  route.allowed_bots = {"B7"};
  CHECK(Refusal(route, m).empty());
  route.allowed_bots = {"B8"};
  CHECK_THAT(Refusal(route, m), Catch::Contains("allowed_bots does not list it"));
}

TEST_CASE("A listed bot passes the users list, allow_bots alone does not", "[match]") {
  InboundMessage m = Message();
  m.is_bot = true;
  m.author_id = "B7";
  RouteConfig route = Route();
  route.users = {"U1"};
  route.allowed_bots = {"B7"};
  CHECK(Refusal(route, m).empty());
  route.allowed_bots.clear();
  route.allow_bots = true;
  CHECK_THAT(Refusal(route, m), Catch::Contains("user 'B7' is not one of the route's users"));
}

TEST_CASE("The platform must match when the route names one (any case)", "[match]") {
  RouteConfig route = Route();
  route.platform = "telegram";
  CHECK_THAT(Refusal(route, Message()), Catch::Contains("it is from 'slack' and the route is for 'telegram'"));
  route.platform = "Slack";
  CHECK(Refusal(route, Message()).empty());
}

TEST_CASE("The chat must be listed when the route lists chats", "[match]") {
  RouteConfig route = Route();
  route.chats = {"C2", "C3"};
  CHECK_THAT(Refusal(route, Message()), Catch::Contains("chat 'C1' is not one of the route's chats"));
  route.chats.push_back("C1");
  CHECK(Refusal(route, Message()).empty());
}

TEST_CASE("The author must be listed when the route lists users", "[match]") {
  RouteConfig route = Route();
  route.users = {"U2"};
  CHECK_THAT(Refusal(route, Message()), Catch::Contains("user 'U1' is not one of the route's users"));
  route.users = {"U2", "U1"};
  CHECK(Refusal(route, Message()).empty());
}

TEST_CASE("A mention is required in group chats and not in private ones by default", "[match]") {
  InboundMessage m = Message();
  m.mentions_bot = false;
  CHECK_THAT(Refusal(Route(), m), Catch::Contains("not mentioned (required outside private chats)"));
  m.is_private_chat = true;
  CHECK(Refusal(Route(), m).empty());
}

TEST_CASE("require_mention set overrides the default both ways", "[match]") {
  InboundMessage m = Message();
  m.mentions_bot = false;
  RouteConfig route = Route();
  route.require_mention = false;
  CHECK(Refusal(route, m).empty());
  route.require_mention = true;
  m.is_private_chat = true;
  CHECK_THAT(Refusal(route, m), Catch::Contains("the route requires a mention"));
  m.mentions_bot = true;
  CHECK(Refusal(route, m).empty());
}

TEST_CASE("An exclude that matches drops the message", "[match]") {
  RouteConfig route = Route();
  route.excludes = {"^ignore", "secret"};
  CHECK_THAT(Refusal(route, Message("ignore this")), Catch::Contains("matches exclude /^ignore/"));
  CHECK_THAT(Refusal(route, Message("a secret plan")), Catch::Contains("matches exclude /secret/"));
  CHECK(Refusal(route, Message("please ignore")).empty());
}

TEST_CASE("When triggers are set one must match (anywhere, case-sensitive)", "[match]") {
  RouteConfig route = Route();
  route.triggers = {"^deploy\\b", "review"};
  CHECK(Refusal(route, Message("deploy now")).empty());
  CHECK(Refusal(route, Message("please review")).empty());
  CHECK_THAT(Refusal(route, Message("Deploy now")), Catch::Contains("matches none of the route's triggers"));
  CHECK_THAT(Refusal(route, Message("deployment")), Catch::Contains("matches none"));
}

TEST_CASE("Excludes are checked before triggers", "[match]") {
  RouteConfig route = Route();
  route.triggers = {"deploy"};
  route.excludes = {"prod"};
  CHECK_THAT(Refusal(route, Message("deploy prod")), Catch::Contains("exclude /prod/"));
}

TEST_CASE("The rules apply in order: the reason is the first one broken", "[match]") {
  RouteConfig route = Route();
  route.platform = "telegram";
  route.users = {"U2"};
  route.triggers = {"x"};
  InboundMessage m = Message("y");
  m.mentions_bot = false;
  CHECK_THAT(Refusal(route, m), Catch::Contains("route is for 'telegram'"));
  route.platform.clear();
  CHECK_THAT(Refusal(route, m), Catch::Contains("user 'U1'"));
  route.users.clear();
  CHECK_THAT(Refusal(route, m), Catch::Contains("not mentioned"));
  m.mentions_bot = true;
  CHECK_THAT(Refusal(route, m), Catch::Contains("triggers"));
}

TEST_CASE("The first matching route wins and the reason names the first route", "[match]") {
  RouteConfig ops = Route("ops");
  ops.chats = {"C9"};
  RouteConfig all = Route("all");
  RouteConfig never = Route("never");
  never.users = {"nobody"};
  const RouteMatcher matcher = Compile({ops, all, never});
  const RouteMatch r = matcher.Match(Message());
  REQUIRE(r.route != nullptr);
  CHECK(r.route->name == "all");
  CHECK(r.index == 1);

  const RouteMatcher none = Compile({ops, never});
  const RouteMatch n = none.Match(Message());
  CHECK(n.route == nullptr);
  CHECK(n.reason == "route 'ops': chat 'C1' is not one of the route's chats (and 1 more refused it)");
}

TEST_CASE("No routes: nothing matches, and the reason says why", "[match]") {
  const RouteMatcher matcher = Compile({});
  const RouteMatch r = matcher.Match(Message());
  CHECK(r.route == nullptr);
  CHECK(r.reason == "no routes are configured");
}

TEST_CASE("Routes without a name are named by their index", "[match]") {
  RouteConfig a = Route("");
  a.chats = {"C9"};
  const RouteMatcher matcher = Compile({a, Route("")});
  CHECK(matcher.routes()[0].name == "route-0");
  CHECK(matcher.routes()[1].name == "route-1");
  CHECK(matcher.Match(Message()).route->name == "route-1");
}

TEST_CASE("Compile refuses an invalid regex, naming the route and the pattern", "[match]") {
  RouteConfig ok = Route("ok");
  RouteConfig bad = Route("bad");
  bad.triggers = {"fine", "(unclosed"};
  auto m = RouteMatcher::Compile({ok, bad});
  REQUIRE_FALSE(m.has_value());
  CHECK(m.error().code == Errc::invalid_argument);
  CHECK_THAT(m.error().message, Catch::Contains("route 'bad' (index 1): trigger 2 /(unclosed/"));
  CHECK_THAT(m.error().message, Catch::Contains("not a valid ECMAScript regex"));

  RouteConfig ex = Route("ex");
  ex.excludes = {"[z-a]"};
  auto e = RouteMatcher::Compile({ex});
  REQUIRE_FALSE(e.has_value());
  CHECK_THAT(e.error().message, Catch::Contains("route 'ex' (index 0): exclude 1 /[z-a]/"));
}

TEST_CASE("Compile refuses empty patterns and duplicate route names", "[match]") {
  RouteConfig empty = Route("e");
  empty.excludes = {""};
  auto a = RouteMatcher::Compile({empty});
  REQUIRE_FALSE(a.has_value());
  CHECK_THAT(a.error().message, Catch::Contains("route 'e' (index 0): exclude 1 is empty"));

  auto b = RouteMatcher::Compile({Route("x"), Route("x")});
  REQUIRE_FALSE(b.has_value());
  CHECK_THAT(b.error().message, Catch::Contains("route 'x' (index 1): an earlier route has the same name"));
  // A defaulted name counts too.
  auto c = RouteMatcher::Compile({Route("route-1"), Route("")});
  REQUIRE_FALSE(c.has_value());
}

TEST_CASE("A route with no session parameters compiles", "[match]") {
  RouteConfig r = Route();
  r.session = SessionSpec{};
  CHECK(RouteMatcher::Compile({r}).has_value());
}

TEST_CASE("Triggers see only the first 2,000 bytes of the text", "[match]") {
  RouteConfig route = Route();
  route.triggers = {"needle"};
  CHECK(Refusal(route, Message(std::string(kMaxMatchTextBytes - 6, 'a') + "needle")).empty());
  CHECK_THAT(Refusal(route, Message(std::string(kMaxMatchTextBytes - 5, 'a') + "needle")), Catch::Contains("triggers"));
  // The cut never splits a character: a pattern for the whole character sees it or nothing.
  route.triggers = {"\xE2\x82\xAC$"};
  CHECK_THAT(Refusal(route, Message(std::string(kMaxMatchTextBytes - 1, 'a') + "\xE2\x82\xAC")),
             Catch::Contains("triggers"));
  route.triggers = {"a$"};
  CHECK(Refusal(route, Message(std::string(kMaxMatchTextBytes - 1, 'a') + "\xE2\x82\xAC")).empty());
}

TEST_CASE("A recursive pattern over a huge text stays within the stack", "[match]") {
  // libstdc++ recurses per character for "(a|b)*": 100 KB of text would overflow the stack, the
  // bounded prefix does not.
  RouteConfig route = Route();
  route.triggers = {"^(a|b)*c"};
  route.excludes = {"(x|y)+z"};
  const std::string text(100 * 1024, 'a');
  CHECK_THAT(Refusal(route, Message(text)), Catch::Contains("triggers"));
  route.triggers = {"^(a|b)*$"};
  CHECK(Refusal(route, Message(text)).empty());
}

TEST_CASE("A matched message carries no warning when every pattern evaluated", "[match]") {
  RouteConfig route = Route();
  route.triggers = {"x"};
  const RouteMatch r = Compile({route}).Match(Message("x"));
  CHECK(r.route != nullptr);
  CHECK(r.warning.empty());
}

TEST_CASE("IsAllowedUser and IsAdmin read the route's lists", "[match]") {
  RouteConfig route = Route();
  CHECK(IsAllowedUser(route, "anyone"));
  CHECK_FALSE(IsAdmin(route, "anyone"));
  route.users = {"U1"};
  route.admins = {"U9"};
  CHECK(IsAllowedUser(route, "U1"));
  CHECK_FALSE(IsAllowedUser(route, "U2"));
  CHECK(IsAdmin(route, "U9"));
  CHECK_FALSE(IsAdmin(route, "U1"));
  CHECK_FALSE(IsAdmin(route, ""));
}

TEST_CASE("Ids in a reason are flattened to one line", "[match]") {
  RouteConfig route = Route();
  route.users = {"U2"};
  InboundMessage m = Message();
  m.author_id = "U1\nFAKE LOG LINE";
  CHECK(Refusal(route, m) == "route 'main': user 'U1 FAKE LOG LINE' is not one of the route's users");
}
