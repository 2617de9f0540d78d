// SessionName (DESIGN.md §6), MessageKind's names and ChatAdapter's defaults. The hashes below were
// computed independently (`printf '%s' 'gravity:spawner-uid:C123:1790000000.000100' | sha256sum`,
// Python's hashlib for the others), not by the code under test.
#include <catch2/catch.hpp>

#include <random>
#include <regex>

#include "sessionturn/routing.hpp"

using namespace sessionturn;

namespace {

bool IsDnsLabel(const std::string& name) {
  static const std::regex kLabel("^[a-z0-9]([a-z0-9-]*[a-z0-9])?$");
  return name.size() <= 63 && std::regex_match(name, kLabel);
}

class NoOpAdapter : public ChatAdapter {
 public:
  ChatCapabilities Capabilities() const override { return {}; }
  void AsyncPost(const ThreadRef&, OutboundMessage, ChatHandler<std::string> handler) override { handler("1"); }
  void AsyncEdit(const ThreadRef&, const std::string&, OutboundMessage, ChatStatusHandler handler) override {
    handler(Status{});
  }
};

}  // namespace

TEST_CASE("SessionName matches the pinned test vector", "[naming]") {
  // sha256("gravity:spawner-uid:C123:1790000000.000100") = 21a0bbb0a820cf5d...
  CHECK(SessionName("gravity", "slack", "spawner-uid", "C123", "1790000000.000100") == "gravity-slack-21a0bbb0a820");
}

TEST_CASE("SessionName with an empty thread hashes an empty last field", "[naming]") {
  // sha256("gravity:spawner-uid:C123:") = f114be44fcea...
  CHECK(SessionName("gravity", "slack", "spawner-uid", "C123", "") == "gravity-slack-f114be44fcea");
}

TEST_CASE("SessionName cuts a long prefix so that the name fits 63 characters", "[naming]") {
  const std::string prefix(70, 'a');
  const std::string name = SessionName(prefix, "slack", "o", "c", "t");
  // sha256("aaaa…(70):o:c:t") = 494164930f5f...; 63 - len("-slack-") - 12 = 44 characters of prefix.
  CHECK(name == std::string(44, 'a') + "-slack-494164930f5f");
  CHECK(name.size() == 63);
  CHECK(IsDnsLabel(name));
}

TEST_CASE("SessionName lower-cases and sanitizes the prefix but hashes it as given", "[naming]") {
  // sha256("My_Bot.v2:o:c:t") = 324ebaec55ef...
  CHECK(SessionName("My_Bot.v2", "slack", "o", "c", "t") == "my-bot-v2-slack-324ebaec55ef");
  CHECK(SessionName("My_Bot.v2", "Slack", "o", "c", "t") == "my-bot-v2-slack-324ebaec55ef");
}

TEST_CASE("SessionName trims '-' and '.' left at the ends of the prefix", "[naming]") {
  const std::string hash = SessionName("bot", "slack", "o", "c", "t").substr(10);
  CHECK(SessionName("bot", "slack", "o", "c", "t") == "bot-slack-" + hash);
  // The hash covers the prefix as given, so only the readable part is compared.
  CHECK(SessionName("bot-", "slack", "o", "c", "t").rfind("bot-slack-", 0) == 0);
  CHECK(SessionName("bot.", "slack", "o", "c", "t").rfind("bot-slack-", 0) == 0);
  CHECK(SessionName("-.bot", "slack", "o", "c", "t").rfind("bot-slack-", 0) == 0);
  // A cut that lands just after a '-' leaves no "--" behind.
  const std::string prefix = std::string(43, 'a') + "-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
  const std::string name = SessionName(prefix, "slack", "o", "c", "t");
  CHECK(name.substr(0, 50) == std::string(43, 'a') + "-slack-");
  CHECK(name.size() == 62);
  CHECK(IsDnsLabel(name));
}

TEST_CASE("SessionName leaves out a prefix or platform that sanitizes to nothing", "[naming]") {
  const std::string a = SessionName("", "slack", "o", "c", "t");
  CHECK(a.rfind("slack-", 0) == 0);
  CHECK(a.size() == 6 + 12);
  const std::string b = SessionName("___", "", "o", "c", "t");
  CHECK(b.size() == 12);
  CHECK(IsDnsLabel(b));
  CHECK(SessionName("caf\xC3\xA9", "slack", "o", "c", "t").rfind("caf-slack-", 0) == 0);
}

TEST_CASE("SessionName cuts a platform too long to leave room for a prefix", "[naming]") {
  const std::string name = SessionName("gravity", std::string(60, 'p'), "o", "c", "t");
  CHECK(name.size() == 63);
  CHECK(name.rfind(std::string(50, 'p') + "-", 0) == 0);
  CHECK(IsDnsLabel(name));
}

TEST_CASE("SessionName separates owners, chats and threads", "[naming]") {
  const std::string base = SessionName("gravity", "slack", "owner-a", "C1", "T1");
  CHECK(SessionName("gravity", "slack", "owner-b", "C1", "T1") != base);
  CHECK(SessionName("gravity", "slack", "owner-a", "C2", "T1") != base);
  CHECK(SessionName("gravity", "slack", "owner-a", "C1", "T2") != base);
  CHECK(SessionName("gravity", "slack", "owner-a", "C1", "T1") == base);
}

TEST_CASE("SessionName is a DNS label for any input", "[naming][property]") {
  std::mt19937 rng(20261201);
  const std::string alphabet = "aZ09-_.:/ \n\x01\xC3\xA9\xFF\xE2\x80\xAE";
  for (int i = 0; i < 2000; ++i) {
    std::string parts[5];
    for (auto& p : parts) {
      const std::size_t len = rng() % 90;
      for (std::size_t k = 0; k < len; ++k) p.push_back(alphabet[rng() % alphabet.size()]);
    }
    const std::string name = SessionName(parts[0], parts[1], parts[2], parts[3], parts[4]);
    INFO("prefix '" << parts[0] << "' platform '" << parts[1] << "' -> " << name);
    CHECK(IsDnsLabel(name));
  }
}

TEST_CASE("MessageKind has stable names", "[naming]") {
  CHECK(ToString(MessageKind::new_message) == "new");
  CHECK(ToString(MessageKind::edited) == "edited");
  CHECK(ToString(MessageKind::deleted) == "deleted");
}

TEST_CASE("ChatAdapter's default Typing succeeds and calls its handler before it returns", "[naming][adapter]") {
  NoOpAdapter adapter;
  int calls = 0;
  adapter.AsyncTyping(ThreadRef{"slack", "T1", "C1", ""}, [&](Status st) {
    ++calls;
    CHECK(st.has_value());
  });
  CHECK(calls == 1);
}

TEST_CASE("ChatAdapter's default FetchThread says the adapter cannot fetch history", "[naming][adapter]") {
  NoOpAdapter adapter;
  int calls = 0;
  adapter.AsyncFetchThread(ThreadRef{"telegram", "", "42", ""}, "m1", 10,
                           [&](Result<std::vector<ThreadHistoryMessage>> r) {
                             ++calls;
                             REQUIRE_FALSE(r.has_value());
                             CHECK(r.error().code == Errc::unavailable);
                             CHECK_THAT(r.error().message, Catch::Contains("telegram adapter cannot fetch"));
                           });
  CHECK(calls == 1);
}
