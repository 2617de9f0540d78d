// LocalRuntime over real unix sockets: journal, subscribe/replay/reset/condensed history, messages,
// merge/edit/remove, rejections, interrupt, questions, back-pressure, recovery and fault hooks.
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <atomic>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include <catch2/catch.hpp>

#include "integration/runtime_support.hpp"
#include "sessionturn/testing/local_runtime.hpp"

using namespace sessionturn;
using namespace sessionturn::test;
using sessionturn::testing::LocalRuntime;
using sessionturn::testing::LocalRuntimeOptions;
namespace reject_reason = sessionturn::testing::reject_reason;

namespace {

struct Rt {
  TempDir dir;
  std::unique_ptr<LocalRuntime> rt;

  explicit Rt(LocalRuntimeOptions o = {}) {
    if (o.socket_path.empty()) o.socket_path = dir / "rt.sock";
    if (o.provider.rfind("script-body:", 0) == 0) {
      WriteFile(dir / "script.json", o.provider.substr(12));
      o.provider = "script:" + (dir / "script.json");
    }
    auto r = LocalRuntime::Start(o);
    if (!r) FAIL("LocalRuntime::Start: " << r.error().ToString());
    rt = std::move(*r);
  }
  TestClient Client() {
    TestClient c(rt->socket_path());
    REQUIRE(c.connected());
    return c;
  }
  // A client that subscribed (since 0, no bounds) and read through history.end.
  TestClient Subscribed() {
    TestClient c = Client();
    REQUIRE(c.Send(ClientRequest::Subscribe(0, {}, false, 0, 0)));
    auto end = c.WaitType(event_type::kHistoryEnd);
    REQUIRE(end);
    return c;
  }
  Event WaitJournal(const std::function<bool(const Event&)>& pred) {
    auto e = rt->WaitForEvent(pred, kTestDeadline);
    REQUIRE(e);
    return *e;
  }
};

LocalRuntimeOptions Opts(std::string provider = "echo") {
  LocalRuntimeOptions o;
  o.provider = std::move(provider);
  o.echo_delay = std::chrono::milliseconds(1);
  o.log_sink = [](LogLevel, std::string_view) {};  // expected warnings (interrupt timeouts) stay out of the output
  return o;
}

Event Expect(Result<Event> e) {
  if (!e) FAIL("expected an event: " << e.error().ToString());
  return *e;
}

std::vector<Event> OfType(const std::vector<Event>& evs, std::string_view type) {
  std::vector<Event> out;
  for (const auto& e : evs)
    if (e.type == type) out.push_back(e);
  return out;
}

}  // namespace

TEST_CASE("local runtime: socket 0600 in a 0700 directory, stale socket replaced, removed on stop", "[runtime]") {
  TempDir dir;
  const std::string sock = dir / "sub/dir/rt.sock";
  {
    LocalRuntimeOptions o = Opts();
    o.socket_path = sock;
    auto rt = LocalRuntime::Start(o);
    REQUIRE(rt);
    struct stat st {};
    REQUIRE(::stat(sock.c_str(), &st) == 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK((st.st_mode & 0777) == 0600);
    REQUIRE(::stat((dir / "sub/dir").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);

    // A second runtime on a live socket refuses instead of stealing it.
    auto second = LocalRuntime::Start(o);
    REQUIRE_FALSE(second);
    CHECK(second.error().message.find("already listening") != std::string::npos);
    (*rt)->Stop();
    CHECK(::stat(sock.c_str(), &st) != 0);
  }
  // A stale socket file (nobody listening) is replaced.
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof(addr.sun_path) - 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  ::close(fd);
  LocalRuntimeOptions o = Opts();
  o.socket_path = sock;
  auto rt = LocalRuntime::Start(o);
  REQUIRE(rt);
  TestClient c((*rt)->socket_path());
  REQUIRE(c.connected());
  REQUIRE(c.Send(ClientRequest::Subscribe(0, {}, false, 0, 0)));
  CHECK(c.WaitType(event_type::kHistoryEnd));
  (*rt)->Stop();

  // A regular file is never replaced.
  WriteFile(dir / "plain", "x");
  o.socket_path = dir / "plain";
  auto bad = LocalRuntime::Start(o);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("not a socket") != std::string::npos);
}

TEST_CASE("local runtime: many clients at once all see every journaled event", "[runtime]") {
  Rt r(Opts());
  std::vector<TestClient> clients;
  for (int i = 0; i < 8; ++i) clients.push_back(r.Subscribed());
  CHECK(r.rt->ConnectionCount() == 8);
  REQUIRE(clients[3].Send(ClientRequest::Message("req-1", "hello")));
  for (auto& c : clients) {
    auto done = c.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-1"));
    REQUIRE(done);
    CHECK(done->status == "completed");
  }
}

TEST_CASE("local runtime: journal ids from 1, a UUID journal id, the last N retained", "[runtime]") {
  // An unpaced burst (flood:N would wait for this test's client, which does not read).
  auto o = Opts(R"(script-body:{"turns":[[{"type":"burst","count":5000},{"type":"message","text":"done"}]]})");
  Rt r(o);
  CHECK(std::regex_match(r.rt->journal_id(),
                         std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")));
  TestClient c = r.Subscribed();
  REQUIRE(c.Send(ClientRequest::Message("r1", "go")));
  auto first = Expect(c.WaitType(event_type::kUserMessage));
  CHECK(first.id == 1);
  r.WaitJournal(IsType(event_type::kTurnCompleted));
  auto events = r.rt->JournalEvents();
  REQUIRE(events.size() == sessionturn::testing::kRuntimeRetainedEvents);
  CHECK(events.back().id == r.rt->last_event_id());
  CHECK(r.rt->last_event_id() == 5004);  // user.message, turn.started, 5000 deltas, message, completed
  for (std::size_t i = 1; i < events.size(); ++i) REQUIRE(events[i].id == events[i - 1].id + 1);

  // A full replay starts at the first retained event.
  TestClient late = r.Client();
  REQUIRE(late.Send(ClientRequest::Subscribe(0, {}, false, 0, 0)));
  auto replay0 = Expect(late.Next());
  CHECK(replay0.id == r.rt->last_event_id() - 4095);
}

TEST_CASE("local runtime: a state directory keeps events.jsonl and reloads it", "[runtime]") {
  TempDir state;
  std::string jid;
  std::int64_t last = 0;
  {
    auto o = Opts();
    o.state_dir = state.path();
    Rt r(o);
    jid = r.rt->journal_id();
    TestClient c = r.Subscribed();
    REQUIRE(c.Send(ClientRequest::Message("r1", "one")));
    auto msg = Expect(c.WaitFor(IsType(event_type::kAssistantMessage)));
    CHECK(msg.text == "echo #1: one");
    Expect(c.WaitType(event_type::kTurnCompleted));
    last = r.rt->last_event_id();
  }
  std::ifstream in(state / "events.jsonl");
  REQUIRE(in);
  std::string line;
  std::int64_t expect_id = 1;
  while (std::getline(in, line)) {
    auto e = DecodeEvent(line);
    REQUIRE(e);
    CHECK(e->id == expect_id++);
  }
  CHECK(expect_id - 1 == last);

  auto o = Opts();
  o.state_dir = state.path();
  Rt again(o);
  CHECK(again.rt->journal_id() == jid);
  {
    // One runtime per state directory: a second one (on another socket) is refused.
    TempDir other;
    auto o2 = o;
    o2.socket_path = other / "rt.sock";
    auto second = LocalRuntime::Start(o2);
    REQUIRE_FALSE(second);
    CHECK(second.error().message.find("in use by another runtime") != std::string::npos);
  }
  auto rec = again.WaitJournal(IsType(event_type::kRuntimeRecovered));
  CHECK(rec.id == last + 1);
  TestClient c = again.Subscribed();
  REQUIRE(c.Send(ClientRequest::Message("r2", "two")));
  auto um = Expect(c.WaitType(event_type::kUserMessage));
  CHECK(um.turn_id == "turn-2");
  auto msg = Expect(c.WaitType(event_type::kAssistantMessage));
  CHECK(msg.text == "echo #2: two");  // counted from the journal, so it survived the restart
}

TEST_CASE("local runtime: subscribe replays, then runtime.status, history.end and live events", "[runtime]") {
  Rt r(Opts());
  {
    TestClient a = r.Subscribed();
    REQUIRE(a.Send(ClientRequest::Message("r1", "first")));
    Expect(a.WaitType(event_type::kTurnCompleted));
  }
  const std::int64_t last = r.rt->last_event_id();

  SECTION("full replay in order, status, end, then a second subscribe is ignored") {
    TestClient b = r.Client();
    REQUIRE(b.Send(ClientRequest::Subscribe(0, {}, false, 0, 0)));
    auto seen = b.ReadHistory();
    REQUIRE(seen.size() == static_cast<std::size_t>(last) + 2);
    for (std::int64_t i = 0; i < last; ++i) CHECK(seen[i].id == i + 1);
    CHECK(seen[last].type == event_type::kRuntimeStatus);
    CHECK(seen[last].id == 0);
    REQUIRE(seen[last].runtime);
    CHECK(seen[last].runtime->session_name == "local");
    CHECK(seen[last + 1].type == event_type::kHistoryEnd);
    CHECK_FALSE(seen[last + 1].history_state);

    REQUIRE(b.Send(ClientRequest::Subscribe(0, {}, true, 0, 0)));
    REQUIRE(b.Send(ClientRequest::Message("r2", "second")));
    auto next = Expect(b.Next());
    CHECK(next.type == event_type::kUserMessage);  // no second replay
    CHECK(next.request_id == "r2");
  }
  SECTION("history.start with bounds, nothing newer to replay") {
    TestClient b = r.Client();
    REQUIRE(b.Send(ClientRequest::Subscribe(last, r.rt->journal_id(), true, 0, 0)));
    auto seen = b.ReadHistory();
    REQUIRE(seen.size() == 3);
    CHECK(seen[0].type == event_type::kHistoryStart);
    CHECK(seen[0].first_event_id == 1);
    CHECK(seen[0].last_event_id == last);
    CHECK(seen[0].journal_id == r.rt->journal_id());
    CHECK_FALSE(seen[0].reset);
    CHECK(seen[1].type == event_type::kRuntimeStatus);
    CHECK(seen[2].type == event_type::kHistoryEnd);
  }
  SECTION("any other request subscribes implicitly") {
    TestClient b = r.Client();
    REQUIRE(b.Send(ClientRequest::Message("r3", "third")));
    std::vector<Event> seen;
    auto um = Expect(b.WaitFor(ForRequest("r3"), kTestDeadline, &seen));
    REQUIRE(seen.size() == static_cast<std::size_t>(last) + 3);
    CHECK(seen[last + 1].type == event_type::kHistoryEnd);
    CHECK(um.request_id == "r3");
  }
}

TEST_CASE("local runtime: replay reset rules", "[runtime]") {
  Rt r(Opts());
  {
    TestClient a = r.Subscribed();
    REQUIRE(a.Send(ClientRequest::Message("r1", "x")));
    Expect(a.WaitType(event_type::kTurnCompleted));
  }
  const std::int64_t last = r.rt->last_event_id();
  const std::string jid = r.rt->journal_id();
  auto subscribe = [&](ClientRequest req) {
    TestClient c = r.Client();
    REQUIRE(c.Send(req));
    return c.ReadHistory();
  };
  SECTION("another journal id resets and replays from the start") {
    auto seen = subscribe(ClientRequest::Subscribe(3, "00000000-0000-4000-8000-000000000000", true, 0, 0));
    REQUIRE(seen.front().type == event_type::kHistoryStart);
    CHECK(seen.front().reset);
    CHECK(seen[1].id == 1);
  }
  SECTION("since without a journal id resets") {
    auto seen = subscribe(ClientRequest::Subscribe(3, "", true, 0, 0));
    CHECK(seen.front().reset);
    CHECK(seen[1].id == 1);
  }
  SECTION("since beyond the journal resets") {
    auto seen = subscribe(ClientRequest::Subscribe(last + 5, jid, true, 0, 0));
    CHECK(seen.front().reset);
    CHECK(seen[1].id == 1);
  }
  SECTION("a valid cursor replays only what is newer") {
    auto seen = subscribe(ClientRequest::Subscribe(3, jid, true, 0, 0));
    CHECK_FALSE(seen.front().reset);
    CHECK(seen[1].id == 4);
    CHECK(OfType(seen, event_type::kHistoryStart).size() == 1);
    CHECK(seen.size() == static_cast<std::size_t>(last - 3) + 3);
  }
}

TEST_CASE("local runtime: condensed history page with historyState and older pages", "[runtime]") {
  Rt r(Opts());
  TestClient a = r.Subscribed();
  for (int i = 1; i <= 3; ++i) {
    REQUIRE(a.Send(ClientRequest::Message("r" + std::to_string(i), "prompt " + std::to_string(i))));
    Expect(a.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-" + std::to_string(i))));
  }
  r.rt->PauseProvider(true);
  REQUIRE(a.Send(ClientRequest::Message("r4", "queued one")));
  Expect(a.WaitType(event_type::kUserMessage));

  TestClient b = r.Client();
  REQUIRE(b.Send(ClientRequest::Subscribe(0, {}, true, 4, 1 << 20)));
  auto seen = b.ReadHistory();
  REQUIRE(seen.size() == 4 + 3);
  const Event& start = seen.front();
  CHECK(start.type == event_type::kHistoryStart);
  CHECK(start.history_limited);
  REQUIRE_FALSE(start.history_cursor.empty());
  // The newest four condensed items: turn-2's reply, turn-3's prompt and reply... no queued turn.
  std::vector<std::string> texts;
  for (std::size_t i = 1; i <= 4; ++i) {
    CHECK(seen[i].turn_id.empty());
    CHECK(seen[i].request_id.empty());
    CHECK(seen[i].id > 0);
    texts.push_back(seen[i].text);
  }
  CHECK(texts == std::vector<std::string>{"prompt 2", "echo #2: prompt 2", "prompt 3", "echo #3: prompt 3"});
  const Event& end = seen.back();
  REQUIRE(end.history_state);
  REQUIRE(end.history_state->pending_turn);
  CHECK(end.history_state->pending_turn->turn_id == "turn-4");
  CHECK(end.history_state->pending_turn->text == "queued one");
  CHECK(end.history_state->pending_turn->revision == 1);
  CHECK(end.history_state->active_turn_started.empty());

  // The older page through `history`.
  ClientRequest h;
  h.type = "history";
  h.request_id = "h1";
  h.history_cursor = start.history_cursor;
  REQUIRE(b.Send(h));
  std::vector<Event> page;
  Expect(b.WaitFor([](const Event& e) { return e.type == event_type::kHistoryEnd && e.request_id == "h1"; },
                   kTestDeadline, &page));
  REQUIRE(page.size() == 4);
  CHECK(page[0].history_page);
  CHECK_FALSE(page[0].history_limited);
  CHECK(page[1].text == "prompt 1");
  CHECK(page[2].text == "echo #1: prompt 1");

  // A byte bound keeps at least one item.
  TestClient c = r.Client();
  REQUIRE(c.Send(ClientRequest::Subscribe(0, {}, true, 100, 1)));
  auto tiny = c.ReadHistory();
  CHECK(tiny.size() == 1 + 1 + 2);
  CHECK(tiny.front().history_limited);
}

TEST_CASE("local runtime: message echo, merge into the queued turn, rejections to the requester only", "[runtime]") {
  Rt r(Opts());
  r.rt->PauseProvider(true);
  TestClient a = r.Subscribed();
  TestClient b = r.Subscribed();
  REQUIRE(a.Send(ClientRequest::Message("ra", "first")));
  auto um = Expect(a.WaitType(event_type::kUserMessage));
  CHECK(um.request_id == "ra");
  CHECK(um.turn_id == "turn-1");
  CHECK(um.revision == 1);
  CHECK(um.text == "first");

  REQUIRE(b.Send(ClientRequest::Message("rb", "second")));
  auto up = Expect(a.WaitType(event_type::kUserMessageUpdated));
  CHECK(up.request_id == "rb");
  CHECK(up.turn_id == "turn-1");
  CHECK(up.text == "first\n\nsecond");
  CHECK(up.revision == 2);
  REQUIRE(a.Send(ClientRequest::Message("ra2", "/goals are words too")));
  auto up2 = Expect(b.WaitFor(ForRequest("ra2")));
  CHECK(up2.revision == 3);

  auto rejected = [&](const std::string& text, std::string_view reason) {
    std::string id = "rej-" + std::to_string(std::hash<std::string>{}(text));
    REQUIRE(a.Send(ClientRequest::Message(id, text)));
    auto e = Expect(a.WaitFor(ForRequest(id)));
    CHECK(e.type == event_type::kError);
    CHECK(e.status == "rejected");
    CHECK(e.text == reason);
    CHECK(e.id == 0);
  };
  rejected(" \t\n", reject_reason::kEmptyText);
  rejected("  !ls", reject_reason::kPendingCommand);
  rejected("/goal ship it", reject_reason::kGoalUnsupported);
  r.rt->SetDraining(true);
  rejected("later", reject_reason::kDraining);
  r.rt->SetDraining(false);

  // b saw none of a's rejections: its next event is the next journaled one.
  REQUIRE(a.Send(ClientRequest::Message("ra3", "fourth")));
  auto next_b = Expect(b.Next());
  CHECK(next_b.request_id == "ra3");
  for (const auto& e : r.rt->JournalEvents()) CHECK(e.type != event_type::kError);

  // A queued command takes no more text.
  r.rt->PauseProvider(false);
  Expect(a.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-1")));
  r.rt->PauseProvider(true);
  REQUIRE(a.Send(ClientRequest::Message("rc", "!true")));
  auto cmd = Expect(a.WaitFor(ForRequest("rc")));
  CHECK(cmd.type == event_type::kUserMessage);
  CHECK(cmd.session_command);
  rejected("plain words", reject_reason::kPendingCommand);
}

TEST_CASE("local runtime: two clients racing on one queued turn share it", "[runtime]") {
  Rt r(Opts());
  r.rt->PauseProvider(true);
  TestClient a = r.Subscribed();
  TestClient b = r.Subscribed();
  std::atomic<int> ready{0};
  std::atomic<int> sent{0};
  // Catch2 assertions are not thread-safe: the threads only count successes.
  auto send = [&](TestClient& c, const std::string& id, const std::string& text) {
    ready.fetch_add(1);
    while (ready.load() < 2) std::this_thread::yield();
    if (c.Send(ClientRequest::Message(id, text))) sent.fetch_add(1);
  };
  std::thread ta([&] { send(a, "race-a", "alpha"); });
  std::thread tb([&] { send(b, "race-b", "beta"); });
  ta.join();
  tb.join();
  REQUIRE(sent.load() == 2);
  Event ea, eb;
  for (int got = 0; got < 2;) {
    auto e = Expect(a.WaitFor([](const Event& x) { return x.request_id == "race-a" || x.request_id == "race-b"; }));
    (e.request_id == "race-a" ? ea : eb) = e;
    ++got;
  }
  // Exactly one created the turn, the other merged into it.
  std::set<std::string> types = {ea.type, eb.type};
  CHECK(types == std::set<std::string>{std::string(event_type::kUserMessage), std::string(event_type::kUserMessageUpdated)});
  CHECK(ea.turn_id == "turn-1");
  CHECK(eb.turn_id == "turn-1");
  r.rt->PauseProvider(false);
  std::vector<Event> seen;
  Expect(b.WaitFor(IsType(event_type::kTurnCompleted), kTestDeadline, &seen));
  auto reply = OfType(seen, event_type::kAssistantMessage);
  REQUIRE(reply.size() == 1);
  CHECK(reply[0].text.find("alpha") != std::string::npos);
  CHECK(reply[0].text.find("beta") != std::string::npos);
  CHECK(OfType(r.rt->JournalEvents(), event_type::kTurnStarted).size() == 1);
}

TEST_CASE("local runtime: ! commands run only with allow_shell, and /goal is unsupported", "[runtime]") {
  SECTION("disabled: a failed tool event, the turn fails") {
    Rt r(Opts());
    TestClient c = r.Subscribed();
    // Ideographic space: Unicode-trimmed before the '!' is seen.
    REQUIRE(c.Send(ClientRequest::Message("r1", "\xE3\x80\x80!echo hi")));
    std::vector<Event> seen;
    auto done = Expect(c.WaitType(event_type::kTurnCompleted, kTestDeadline, &seen));
    CHECK(done.status == "failed");
    CHECK(OfType(seen, event_type::kUserMessage).at(0).session_command);
    auto tool = OfType(seen, event_type::kToolCompleted);
    REQUIRE(tool.size() == 1);
    CHECK(tool[0].status == "failed");
    CHECK(tool[0].output.find("shell commands are disabled") != std::string::npos);
  }
  SECTION("allowed: runs with /bin/sh -lc") {
    auto o = Opts();
    o.allow_shell = true;
    Rt r(o);
    TestClient c = r.Subscribed();
    REQUIRE(c.Send(ClientRequest::Message("r1", "!echo hi; echo there")));
    std::vector<Event> seen;
    auto done = Expect(c.WaitType(event_type::kTurnCompleted, kTestDeadline, &seen));
    CHECK(done.status == "completed");
    // Output streams in the chunks it was read in (one or more), never lost or reordered.
    std::string streamed;
    for (const auto& d : OfType(seen, event_type::kToolDelta)) streamed += d.output;
    CHECK(streamed == "hi\nthere\n");
    auto tool = OfType(seen, event_type::kToolCompleted);
    REQUIRE(tool.size() == 1);
    CHECK(tool[0].output == "hi\nthere\n");
    CHECK(tool[0].status == "completed");
  }
  SECTION("/goal as a word is rejected, /goalkeeper is a prompt") {
    Rt r(Opts());
    TestClient c = r.Subscribed();
    REQUIRE(c.Send(ClientRequest::Message("g1", "/goal")));
    auto e = Expect(c.WaitFor(ForRequest("g1")));
    CHECK(e.text == reject_reason::kGoalUnsupported);
    REQUIRE(c.Send(ClientRequest::Message("g2", "/goalkeeper")));
    CHECK(Expect(c.WaitFor(ForRequest("g2"))).type == event_type::kUserMessage);
  }
}

TEST_CASE("local runtime: edit and remove with revision checks", "[runtime]") {
  Rt r(Opts());
  r.rt->PauseProvider(true);
  TestClient c = r.Subscribed();
  REQUIRE(c.Send(ClientRequest::Message("m1", "draft")));
  Expect(c.WaitType(event_type::kUserMessage));
  REQUIRE(c.Send(ClientRequest::Edit("e1", "turn-1", "better", 1)));
  auto up = Expect(c.WaitFor(ForRequest("e1")));
  CHECK(up.type == event_type::kUserMessageUpdated);
  CHECK(up.text == "better");
  CHECK(up.revision == 2);
  REQUIRE(c.Send(ClientRequest::Edit("e2", "turn-1", "stale", 1)));
  auto bad = Expect(c.WaitFor(ForRequest("e2")));
  CHECK(bad.status == "rejected");
  CHECK(bad.text == "editing Session turn \"turn-1\": revision is 2, not 1");
  REQUIRE(c.Send(ClientRequest::Remove("x1", "turn-1", 2)));
  auto rm = Expect(c.WaitFor(ForRequest("x1")));
  CHECK(rm.type == event_type::kUserMessageRemoved);
  CHECK(rm.status == "removed");
  CHECK(rm.revision == 3);
  REQUIRE(c.Send(ClientRequest::Edit("e3", "turn-1", "again", 3)));
  CHECK(Expect(c.WaitFor(ForRequest("e3"))).text == "Session turn \"turn-1\" is no longer pending");
  for (const auto& e : r.rt->JournalEvents()) CHECK(e.type != event_type::kTurnCompleted);

  // A started turn can no longer be edited or removed.
  r.rt->PauseProvider(false);
  auto so = Opts("script-body:{\"turns\":[[{\"type\":\"sleep\",\"ms\":60000}]]}");
  Rt s(so);
  TestClient d = s.Subscribed();
  REQUIRE(d.Send(ClientRequest::Message("m2", "long")));
  Expect(d.WaitType(event_type::kTurnStarted));
  REQUIRE(d.Send(ClientRequest::Remove("x2", "turn-1", 1)));
  CHECK(Expect(d.WaitFor(ForRequest("x2"))).text == "Session turn \"turn-1\" is no longer pending");
}

TEST_CASE("local runtime: turns run one at a time, in order", "[runtime]") {
  Rt r(Opts());
  TestClient c = r.Subscribed();
  REQUIRE(c.Send(ClientRequest::Message("a", "one")));
  Expect(c.WaitType(event_type::kTurnStarted));
  REQUIRE(c.Send(ClientRequest::Message("b", "two")));
  REQUIRE(c.Send(ClientRequest::Message("c", "three")));
  r.WaitJournal(IsTypeOf(event_type::kTurnCompleted, "turn-2"));
  std::string running;
  std::vector<std::string> order;
  for (const auto& e : r.rt->JournalEvents()) {
    if (e.type == event_type::kTurnStarted) {
      CHECK(running.empty());
      running = e.turn_id;
      order.push_back(e.turn_id);
    } else if (e.type == event_type::kTurnCompleted) {
      CHECK(running == e.turn_id);
      running.clear();
    } else if (e.type == event_type::kAssistantDelta || e.type == event_type::kAssistantMessage) {
      CHECK(e.turn_id == running);
    }
  }
  CHECK(order == std::vector<std::string>{"turn-1", "turn-2"});
}

TEST_CASE("local runtime: interrupt", "[runtime]") {
  SECTION("stops the running turn; rejected when idle") {
    Rt r(Opts("script-body:{\"turns\":[[{\"type\":\"delta\",\"text\":\"working\"},{\"type\":\"sleep\",\"ms\":60000}]]}"));
    TestClient c = r.Subscribed();
    REQUIRE(c.Send(ClientRequest::Interrupt("i0")));
    auto idle = Expect(c.WaitFor(ForRequest("i0")));
    CHECK(idle.type == event_type::kError);
    CHECK(idle.text == reject_reason::kNoActiveTurn);
    REQUIRE(c.Send(ClientRequest::Message("m", "go")));
    Expect(c.WaitType(event_type::kAssistantDelta));
    REQUIRE(c.Send(ClientRequest::Interrupt("i1")));
    auto ing = Expect(c.WaitType(event_type::kTurnInterrupting));
    CHECK(ing.request_id == "i1");
    CHECK(ing.turn_id == "turn-1");
    auto done = Expect(c.WaitType(event_type::kTurnCompleted));
    CHECK(done.status == "interrupted");
  }
  SECTION("a provider that does not stop is killed after the timeout; the queued turn is kept") {
    auto o = Opts(
        "script-body:{\"turns\":[[{\"type\":\"stall\"}],[{\"type\":\"message\",\"text\":\"after restart\"}]]}");
    o.interrupt_timeout = std::chrono::milliseconds(300);
    o.provider_restart_delay = std::chrono::milliseconds(1500);
    Rt r(o);
    TestClient c = r.Subscribed();
    REQUIRE(c.Send(ClientRequest::Message("m1", "hang")));
    Expect(c.WaitType(event_type::kTurnStarted));
    REQUIRE(c.Send(ClientRequest::Message("m2", "next")));
    Expect(c.WaitFor(ForRequest("m2")));
    auto t0 = std::chrono::steady_clock::now();
    REQUIRE(c.Send(ClientRequest::Interrupt("i1")));
    Expect(c.WaitType(event_type::kTurnInterrupting));
    auto done = Expect(c.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-1")));
    CHECK(done.status == "interrupted");
    CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(300));
    REQUIRE(c.Send(ClientRequest::Message("m3", "too soon")));
    auto rej = Expect(c.WaitFor(ForRequest("m3")));
    CHECK(rej.text == reject_reason::kProviderRestarting);
    auto msg = Expect(c.WaitFor(IsTypeOf(event_type::kAssistantMessage, "turn-2")));
    CHECK(msg.text == "after restart");
    CHECK(Expect(c.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-2"))).status == "completed");
  }
}

TEST_CASE("local runtime: questions are answered, partly answered, declined", "[runtime]") {
  const char* script = R"({"turns":[[
      {"type":"question","inputId":"in-1","questions":[{"id":"a","question":"A?"},{"id":"b","question":"B?",
        "options":[{"label":"yes"},{"label":"no"}]}]},
      {"type":"question","inputId":"in-2","questions":[{"id":"c","question":"C?"}]},
      {"type":"message","text":"done"}]]})";
  Rt r(Opts(std::string("script-body:") + script));
  TestClient c = r.Subscribed();
  REQUIRE(c.Send(ClientRequest::Message("m", "ask me")));
  auto req = Expect(c.WaitType(event_type::kInputRequested));
  CHECK(req.input_id == "in-1");
  REQUIRE(req.questions.size() == 2);
  CHECK(req.questions[1].options.size() == 2);

  REQUIRE(c.Send(ClientRequest::Answer("x0", "nope", {{"a", {"1"}}})));
  CHECK(Expect(c.WaitFor(ForRequest("x0"))).text == "input request \"nope\" is not pending");
  REQUIRE(c.Send(ClientRequest::Answer("x1", "in-1", {{"a", {"1"}}})));
  auto acc = Expect(c.WaitFor(ForRequest("x1")));
  CHECK(acc.type == event_type::kRequestAccepted);
  REQUIRE(c.Send(ClientRequest::Answer("x2", "in-1", {{"b", {"yes"}}})));
  auto res = Expect(c.WaitFor(ForRequest("x2")));
  CHECK(res.type == event_type::kInputResolved);
  CHECK(res.status == "answered");
  auto echo = Expect(c.WaitType(event_type::kAssistantMessage));
  CHECK(echo.text == "Answers: a=1 b=yes");

  Expect(c.WaitType(event_type::kInputRequested));
  REQUIRE(c.Send(ClientRequest::Decline("x3", "in-2")));
  auto dec = Expect(c.WaitFor(ForRequest("x3")));
  CHECK(dec.type == event_type::kInputResolved);
  CHECK(dec.status == "cancelled");
  CHECK(Expect(c.WaitType(event_type::kAssistantMessage)).text == "The question was declined.");
  CHECK(Expect(c.WaitType(event_type::kTurnCompleted)).status == "completed");
  REQUIRE(c.Send(ClientRequest::Decline("x4", "in-2")));
  CHECK(Expect(c.WaitFor(ForRequest("x4"))).status == "rejected");
}

TEST_CASE("local runtime: a slow subscriber is disconnected at its bound, a fast one is not", "[runtime]") {
  // 160 bursts of 125 deltas, 10 ms apart: a reader that keeps reading has the kernel buffer plus the
  // 256-event bound (well over a thousand events) of slack even on a loaded or sanitized build; a reader
  // that never reads overflows both and is dropped.
  Json steps = Json::array();
  for (int i = 0; i < 160; ++i) {
    steps.push_back({{"type", "burst"}, {"count", 125}, {"text", std::string(40, 'x')}});
    steps.push_back({{"type", "sleep"}, {"ms", 10}});
  }
  Json script = {{"turns", Json::array({steps})}};
  Rt r(Opts("script-body:" + script.dump()));
  TestClient slow = r.Subscribed();
  TestClient fast = r.Subscribed();
  REQUIRE(r.rt->ConnectionCount() == 2);
  // The fast reader only counts lines (cheap), on its own thread; no Catch2 assertions there.
  std::atomic<long> lines{0};
  std::atomic<bool> completed{false};
  std::thread reader([&] {
    std::string tail;
    std::vector<char> buf(1 << 16);
    auto deadline = std::chrono::steady_clock::now() + 60s;
    while (!completed && std::chrono::steady_clock::now() < deadline) {
      pollfd pfd{fast.fd(), POLLIN, 0};
      if (::poll(&pfd, 1, 200) <= 0) continue;
      ssize_t n = ::recv(fast.fd(), buf.data(), buf.size(), 0);
      if (n <= 0) return;
      tail.append(buf.data(), static_cast<std::size_t>(n));
      std::size_t pos = 0, nl;
      while ((nl = tail.find('\n', pos)) != std::string::npos) {
        lines.fetch_add(1);
        if (std::string_view(tail).substr(pos, nl - pos).find("\"turn.completed\"") != std::string_view::npos)
          completed = true;
        pos = nl + 1;
      }
      tail.erase(0, pos);
    }
  });
  REQUIRE(slow.Send(ClientRequest::Message("m", "flood")));
  reader.join();
  CHECK(completed.load());
  // user.message, turn.started, runtime.status (re-sent as a turn starts), the deltas, turn.completed
  CHECK(lines.load() == 20000 + 4);
  CHECK(r.rt->ConnectionCount() == 1);
  // The slow one finds its stream cut short: no turn.completed before the end.
  bool saw_completed = false;
  for (;;) {
    auto e = slow.Next(kTestDeadline);
    if (!e) {
      CHECK(e.error().code == Errc::connection_lost);
      break;
    }
    if (e->type == event_type::kTurnCompleted) saw_completed = true;
  }
  CHECK_FALSE(saw_completed);
}

TEST_CASE("local runtime: recovery from a journal on disk", "[runtime]") {
  TempDir state;
  const std::string jid = "5a1d3c4e-0000-4000-8000-00000000abcd";
  WriteFile(state / "journal.json", "{\"journalId\":\"" + jid + "\"}\n");
  std::string lines;
  lines += R"({"id":1,"type":"user.message","turnId":"turn-1","text":"one","revision":1})" "\n";
  lines += R"({"id":2,"type":"turn.started","turnId":"turn-1","status":"running"})" "\n";
  lines += R"({"id":3,"type":"input.requested","turnId":"turn-1","inputId":"in-1","questions":[{"id":"q"}]})" "\n";
  lines += R"({"id":4,"type":"user.message","turnId":"turn-2","text":"two","revision":1})" "\n";
  lines += R"({"id":5,"type":"user.message","turnId":"turn-3","text":"three","revision":1})" "\n";
  lines += R"({"id":6,"type":"assista)";  // a torn last write is skipped
  WriteFile(state / "events.jsonl", lines);

  auto o = Opts();
  o.state_dir = state.path();
  std::vector<std::string> warnings;
  std::mutex wmu;
  o.log_sink = [&](LogLevel, std::string_view m) {
    std::lock_guard<std::mutex> lk(wmu);
    warnings.emplace_back(m);
  };
  Rt r(o);
  CHECK(r.rt->journal_id() == jid);
  r.WaitJournal(IsTypeOf(event_type::kTurnCompleted, "turn-2"));
  auto ev = r.rt->JournalEvents();
  REQUIRE(ev.size() >= 12);
  CHECK(ev[5].type == event_type::kRuntimeRecovered);
  CHECK(ev[5].id == 6);
  CHECK((ev[6].type == event_type::kInputResolved && ev[6].status == "cancelled" && ev[6].input_id == "in-1"));
  CHECK((ev[7].type == event_type::kTurnCompleted && ev[7].turn_id == "turn-1" && ev[7].status == "interrupted"));
  // As the real runtime: the merged turns complete first, then the earliest carries their texts.
  CHECK((ev[8].type == event_type::kTurnCompleted && ev[8].turn_id == "turn-3" && ev[8].status == "merged"));
  CHECK((ev[9].type == event_type::kUserMessageUpdated && ev[9].turn_id == "turn-2"));
  CHECK(ev[9].text == "two\n\nthree");
  CHECK(ev[9].revision == 2);
  CHECK((ev[10].type == event_type::kTurnStarted && ev[10].turn_id == "turn-2"));
  auto reply = r.WaitJournal(IsTypeOf(event_type::kAssistantMessage, "turn-2"));
  CHECK(reply.text == "echo #2: two\n\nthree");
  std::lock_guard<std::mutex> lk(wmu);
  bool warned = false;
  for (const auto& w : warnings) warned = warned || w.find("events.jsonl:6") != std::string::npos;
  CHECK(warned);
}

TEST_CASE("local runtime: Restart() recovers an in-memory journal under the same id", "[runtime]") {
  const char* script = R"({"turns":[[{"type":"question","inputId":"in-1","questions":[{"id":"q"}]}],
                                    [{"type":"message","text":"second turn ran"}]]})";
  Rt r(Opts(std::string("script-body:") + script));
  const std::string jid = r.rt->journal_id();
  TestClient c = r.Subscribed();
  REQUIRE(c.Send(ClientRequest::Message("m1", "ask")));
  Expect(c.WaitType(event_type::kInputRequested));
  REQUIRE(c.Send(ClientRequest::Message("m2", "queued")));
  Expect(c.WaitFor(ForRequest("m2")));
  const std::int64_t before = r.rt->last_event_id();

  REQUIRE(r.rt->Restart());
  CHECK(c.WaitClosed());
  CHECK(r.rt->journal_id() == jid);
  TestClient d(r.rt->socket_path());
  REQUIRE(d.connected());
  REQUIRE(d.Send(ClientRequest::Subscribe(before, jid, true, 0, 0)));
  std::vector<Event> seen = d.ReadHistory();
  REQUIRE(seen.size() >= 2);
  CHECK_FALSE(seen[0].reset);
  CHECK(seen[1].type == event_type::kRuntimeRecovered);
  CHECK(seen[1].id == before + 1);
  // The second turn may have run before d subscribed (then it is in the replay).
  Event reply;
  for (const auto& e : seen)
    if (e.type == event_type::kAssistantMessage && e.turn_id == "turn-2") reply = e;
  if (reply.type.empty()) reply = Expect(d.WaitFor(IsTypeOf(event_type::kAssistantMessage, "turn-2")));
  CHECK(reply.text == "second turn ran");
  auto all = r.rt->JournalEvents();
  bool cancelled = false, interrupted = false;
  for (const auto& e : all) {
    cancelled = cancelled || (e.type == event_type::kInputResolved && e.status == "cancelled");
    interrupted = interrupted || (e.type == event_type::kTurnCompleted && e.turn_id == "turn-1" && e.status == "interrupted");
  }
  CHECK(cancelled);
  CHECK(interrupted);
}

TEST_CASE("local runtime: fault hooks", "[runtime]") {
  Rt r(Opts());
  SECTION("DropAllConnections closes every connection") {
    TestClient a = r.Subscribed();
    TestClient b = r.Subscribed();
    r.rt->DropAllConnections();
    CHECK(a.WaitClosed());
    CHECK(b.WaitClosed());
    TestClient c = r.Subscribed();  // the listener stays
    CHECK(c.connected());
  }
  SECTION("DropAfterEvents closes open connections after n more events; later ones are spared") {
    TestClient a = r.Subscribed();
    r.rt->DropAfterEvents(3);
    REQUIRE(a.Send(ClientRequest::Message("m", "hello")));
    int got = 0;
    while (a.Next()) ++got;
    CHECK(got == 3);
    TestClient b = r.Subscribed();
    auto done = b.WaitFor(IsType(event_type::kTurnCompleted));
    CHECK(done);
  }
  SECTION("PauseProvider holds turns until resumed") {
    r.rt->PauseProvider(true);
    TestClient a = r.Subscribed();
    REQUIRE(a.Send(ClientRequest::Message("m", "hold")));
    Expect(a.WaitType(event_type::kUserMessage));
    auto none = a.Next(std::chrono::milliseconds(300));
    CHECK_FALSE(none);
    r.rt->PauseProvider(false);
    CHECK(Expect(a.WaitType(event_type::kTurnCompleted)).status == "completed");
  }
  SECTION("ReceivedRequests and WaitForRequest need record_requests") {
    TestClient a = r.Subscribed();
    REQUIRE(a.Send(ClientRequest::Interrupt("int-1")));
    Expect(a.WaitFor(ForRequest("int-1")));
    CHECK(r.rt->ReceivedRequests().empty());  // nothing kept: the log would grow without bound
    auto off = r.rt->WaitForRequest([](const ClientRequest&) { return true; }, kTestDeadline);
    REQUIRE_FALSE(off);
    CHECK(off.error().code == Errc::invalid_argument);
    CHECK(off.error().message.find("record_requests") != std::string::npos);

    auto o = Opts();
    o.record_requests = true;
    Rt rec(o);
    TestClient b = rec.Subscribed();
    REQUIRE(b.Send(ClientRequest::Interrupt("int-2")));
    REQUIRE(rec.rt->WaitForRequest([](const ClientRequest& q) { return q.type == "interrupt"; }, kTestDeadline));
    auto reqs = rec.rt->ReceivedRequests();
    REQUIRE(reqs.size() == 2);
    CHECK(reqs[0].type == "subscribe");
    CHECK(reqs[1].request_id == "int-2");
  }
  SECTION("half-closing ends the connection at once") {
    TestClient a = r.Subscribed();
    a.HalfClose();
    CHECK(a.WaitClosed());
  }
}
