// LocalRuntime's condensed history against the real runtime's rules: a straight port of its
// forward projection (history.go projectHistory + historyItemsPage) is the reference, and the
// runtime's backward walk must produce the same pages, cursors and pending questions on simulated
// journals (merges, removals, recovery merges, tools with and without starts, questions answered,
// cancelled and still open, interrupts, a retained window shorter than the journal). Then the same
// over the socket: cursors, pages from `history`, the late joiner answering a pending question.
#include <map>
#include <optional>
#include <random>
#include <set>

#include <catch2/catch.hpp>

#include "integration/runtime_support.hpp"
#include "runtime/history.hpp"
#include "runtime/journal.hpp"
#include "runtime/text.hpp"
#include "sessionturn/testing/local_runtime.hpp"

using namespace sessionturn;
using namespace sessionturn::test;
using sessionturn::testing::LocalRuntime;
using sessionturn::testing::LocalRuntimeOptions;
namespace rt = sessionturn::runtime;

namespace {

// ---- the reference: the runtime's forward projection, as written in Go ---------------------------

const std::string kMarker(rt::kHistoryMarker);
std::string Bnd(const std::string& s, std::size_t max) { return rt::Bounded(s, max, rt::kHistoryMarker); }

Event RefNormalized(Event e) {
  e.timestamp.clear();
  e.request_id.clear();
  e.turn_id.clear();
  e.first_event_id = e.last_event_id = 0;
  e.journal_id.clear();
  e.reset = e.history_limited = e.history_page = false;
  e.history_cursor.clear();
  e.history_state.reset();
  e.runtime.reset();
  e.line.clear();
  e.tool_id = Bnd(e.tool_id, 1024);
  e.tool_name = Bnd(e.tool_name, 1024);
  e.input_id = Bnd(e.input_id, 1024);
  e.status = Bnd(e.status, 1024);
  if (e.questions.size() > 5) e.questions.resize(5);
  for (auto& q : e.questions) {
    q.id = Bnd(q.id, 1024);
    q.header = Bnd(q.header, 512);
    q.question = Bnd(q.question, 4096);
    if (q.options.size() > 10) q.options.resize(10);
    for (auto& o : q.options) {
      o.label = Bnd(o.label, 512);
      o.description = Bnd(o.description, 512);
    }
  }
  return e;
}

struct RefItem {
  std::int64_t first, last;
  std::vector<Event> events;
};

struct RefProjection {
  std::vector<RefItem> items;
  HistoryState state;
  std::vector<Event> essential;
};

RefProjection RefProject(const std::vector<Event>& events) {
  struct Turn {
    std::optional<Event> user;
    std::int64_t user_event_id = 0;
    bool started = false;
    std::int64_t activity = 0;
    std::optional<std::string> started_at;
    bool completed = false, hidden = false, interrupting = false;
  };
  std::map<std::string, Turn> turns;
  std::map<std::string, Event> pending_inputs;
  std::string file_diff;
  for (const Event& e : events) {
    if (!e.turn_id.empty()) {
      Turn& t = turns[e.turn_id];
      if (e.type == event_type::kUserMessage) {
        t.user = e;
        t.user_event_id = e.id;
      } else if (e.type == event_type::kUserMessageUpdated) {
        if (t.user_event_id == 0) t.user_event_id = e.id;
        t.user = e;
      } else if (e.type == event_type::kUserMessageRemoved) {
        t.completed = t.hidden = true;
      } else if (e.type == event_type::kTurnStarted) {
        t.started = true;
        t.started_at = e.timestamp;
      } else if (e.type == event_type::kTurnInterrupting) {
        t.interrupting = true;
      } else if (e.type == event_type::kTurnCompleted) {
        t.completed = true;
        t.hidden = e.status == "merged";
        t.interrupting = false;
      }
      if (e.type != event_type::kUserMessage && e.type != event_type::kUserMessageUpdated &&
          e.type != event_type::kUserMessageRemoved && e.type != event_type::kTurnCompleted) {
        t.activity = e.id;
        if (!t.started_at) t.started_at = e.timestamp;
      }
    }
    if (e.type == event_type::kInputRequested && !e.input_id.empty()) pending_inputs[e.input_id] = e;
    if (e.type == event_type::kInputResolved) pending_inputs.erase(e.input_id);
    if (e.type == event_type::kFileDiff) file_diff = Bnd(e.diff.is_string() ? e.diff.get<std::string>() : "", 32768);
  }
  RefProjection out;
  HistoryState& st = out.state;
  if (!file_diff.empty()) st.file_diff = file_diff;
  std::optional<PendingTurn> pending;
  std::int64_t pending_event = 0, active_event = 0;
  for (const auto& [id, t] : turns) {
    if (t.activity > 0 && !t.completed && t.activity >= active_event) {
      st.active_turn_id = id;
      st.active_turn_started = t.started_at.value_or("");
      st.turn_interrupting = t.interrupting;
      active_event = t.activity;
    }
    if (t.user && !t.started && t.activity == 0 && !t.completed && t.user_event_id >= pending_event) {
      pending = PendingTurn{id, Bnd(t.user->text, 32768), std::max<std::int64_t>(1, t.user->revision)};
      pending_event = t.user_event_id;
    }
  }
  st.pending_turn = pending;
  st.waiting_for_input = !pending_inputs.empty();

  struct Assistant {
    Event event;
    std::optional<rt::BoundedText> text;
    std::string final_text;
    std::int64_t first = 0, last = 0;
  };
  std::map<std::string, Assistant> assistants;
  std::map<std::string, std::pair<Event, std::int64_t>> tools, inputs;
  auto add = [&](std::int64_t first, std::int64_t last, std::vector<Event> evs) {
    out.items.push_back(RefItem{first, last, std::move(evs)});
  };
  auto flush = [&](const std::string& turn, bool keep_streaming) {
    auto it = assistants.find(turn);
    if (it == assistants.end()) return;
    Assistant a = std::move(it->second);
    assistants.erase(it);
    a.event.type = keep_streaming && turn == st.active_turn_id ? "assistant.delta" : "assistant.message";
    a.event.text = a.final_text;
    if (a.event.text.empty() && a.text) a.event.text = a.text->String();
    add(a.first, a.last, {RefNormalized(a.event)});
  };
  for (Event e : events) {
    auto tt = turns.find(e.turn_id);
    const bool hidden = !e.turn_id.empty() && tt != turns.end() && tt->second.hidden;
    if ((pending && e.turn_id == pending->turn_id) || hidden) continue;
    if (e.type != event_type::kAssistantDelta && e.type != event_type::kAssistantMessage) flush(e.turn_id, false);
    const std::string& type = e.type;
    if (type == event_type::kUserMessage || type == event_type::kUserMessageUpdated) {
      if (e.turn_id.empty()) {
        if (type == event_type::kUserMessageUpdated) continue;
        e.text = Bnd(e.text, 32768);
        add(e.id, e.id, {RefNormalized(e)});
        continue;
      }
      const auto& t = turns[e.turn_id];
      if (t.user_event_id != e.id || !t.user) continue;
      Event latest = *t.user;
      latest.id = e.id;
      latest.type = "user.message";
      latest.text = Bnd(latest.text, 32768);
      add(e.id, e.id, {RefNormalized(latest)});
    } else if (type == event_type::kAssistantDelta) {
      Assistant& a = assistants[e.turn_id];
      if (a.first == 0) {
        a.first = e.id;
        a.event = e;
        a.text.emplace(32768, rt::kHistoryMarker);
      }
      a.last = e.id;
      a.event.id = e.id;
      a.text->Write(e.text);
    } else if (type == event_type::kAssistantMessage) {
      auto it = assistants.find(e.turn_id);
      if (it != assistants.end()) {
        if (!e.text.empty()) it->second.final_text = Bnd(e.text, 32768);
        it->second.event.id = e.id;
        it->second.last = e.id;
        flush(e.turn_id, false);
        continue;
      }
      if (!e.text.empty()) {
        e.text = Bnd(e.text, 32768);
        add(e.id, e.id, {RefNormalized(e)});
      }
    } else if (type == event_type::kToolStarted) {
      if (e.tool_id.empty()) {
        add(e.id, e.id, {RefNormalized(e)});
        continue;
      }
      tools[e.turn_id + '\0' + e.tool_id] = {e, e.id};
    } else if (type == event_type::kToolCompleted) {
      Event completion = RefNormalized(e);
      completion.output = Bnd(completion.output, 8192);
      const std::string key = e.turn_id + '\0' + e.tool_id;
      auto it = tools.find(key);
      if (it == tools.end()) {
        Event start;
        start.id = e.id;
        start.type = "tool.started";
        start.tool_id = e.tool_id;
        start.tool_name = e.tool_name;
        start.status = "running";
        add(e.id, e.id, {RefNormalized(start), completion});
        continue;
      }
      add(it->second.second, e.id, {RefNormalized(it->second.first), completion});
      tools.erase(it);
    } else if (type == event_type::kInputRequested) {
      if (!pending_inputs.count(e.input_id)) inputs[e.input_id] = {e, e.id};
    } else if (type == event_type::kInputResolved) {
      Event resolved = RefNormalized(e);
      auto it = inputs.find(e.input_id);
      if (it == inputs.end()) {
        add(e.id, e.id, {resolved});
        continue;
      }
      add(it->second.second, e.id, {RefNormalized(it->second.first), resolved});
      inputs.erase(it);
    } else if (type == event_type::kFileDiff) {
      if (e.diff.is_string()) e.diff = Bnd(e.diff.get<std::string>(), 32768);
      add(e.id, e.id, {RefNormalized(e)});
    } else if (type == event_type::kRuntimeRecovered || type == event_type::kError ||
               type == event_type::kTurnInterrupting) {
      e.text = Bnd(e.text, 8192);
      add(e.id, e.id, {RefNormalized(e)});
    } else if (type == event_type::kTurnCompleted) {
      if (e.status == "interrupted") add(e.id, e.id, {RefNormalized(e)});
    }
  }
  std::vector<std::string> rest;
  for (const auto& [turn, a] : assistants) rest.push_back(turn);
  for (const auto& turn : rest) flush(turn, true);
  for (const auto& [key, tool] : tools) add(tool.second, tool.second, {RefNormalized(tool.first)});
  std::stable_sort(out.items.begin(), out.items.end(), [](const RefItem& a, const RefItem& b) {
    return a.first == b.first ? a.last < b.last : a.first < b.first;
  });
  for (const auto& [id, e] : pending_inputs) {
    Event p = RefNormalized(e);
    p.input_id = e.input_id;
    p.questions = e.questions;
    out.essential.push_back(p);
  }
  std::sort(out.essential.begin(), out.essential.end(), [](const Event& a, const Event& b) { return a.id < b.id; });
  return out;
}

struct RefPage {
  std::vector<std::string> lines;
  std::int64_t before = 0;
};

// Items with their encoded lines, computed once per journal.
struct RefWire {
  std::int64_t first;
  std::vector<std::string> lines;
  std::size_t bytes = 0;
};

std::vector<RefWire> Wire(const std::vector<RefItem>& items) {
  std::vector<RefWire> out;
  for (const auto& it : items) {
    RefWire w{it.first, {}, 0};
    for (const auto& e : it.events) {
      w.lines.push_back(EncodeEvent(e) + "\n");
      w.bytes += w.lines.back().size();
    }
    out.push_back(std::move(w));
  }
  return out;
}

// historyItemsPage: newest first while within both limits, the newest eligible item always.
RefPage RefItemsPage(const std::vector<RefWire>& items, std::int64_t before, std::size_t item_limit,
                     std::size_t byte_limit) {
  std::vector<const RefWire*> eligible;
  for (const auto& it : items)
    if (before == 0 || it.first < before) eligible.push_back(&it);
  RefPage page;
  if (eligible.empty()) return page;
  std::size_t start = eligible.size(), bytes = 0;
  while (start > 0 && eligible.size() - start < item_limit) {
    const std::size_t b = eligible[start - 1]->bytes;
    if (start < eligible.size() && bytes + b > byte_limit) break;
    --start;
    bytes += b;
  }
  for (std::size_t i = start; i < eligible.size(); ++i)
    for (const auto& l : eligible[i]->lines) page.lines.push_back(l);
  page.before = start == 0 ? 0 : eligible[start]->first;
  return page;
}

// ---- a journal simulator ---------------------------------------------------------------------------

class Sim {
 public:
  Sim(std::uint32_t seed, std::size_t retained) : rng_(seed) {
    auto j = rt::Journal::Open("", retained, nullptr);
    REQUIRE(j);
    j_ = std::move(*j);
  }
  rt::Journal& journal() { return *j_; }

  std::int64_t Rand(std::int64_t n) { return std::uniform_int_distribution<std::int64_t>(0, n - 1)(rng_); }
  bool Chance(int percent) { return Rand(100) < percent; }

  void Add(Event e) { REQUIRE(j_->Append(std::move(e))); }
  Event Ev(std::string type, std::string turn = {}) {
    Event e;
    e.type = std::move(type);
    e.turn_id = std::move(turn);
    return e;
  }

  std::string NewTurnPrompt() {
    const std::string id = "turn-" + std::to_string(next_turn_++);
    Event e = Ev("user.message", id);
    e.request_id = "r-" + id;
    e.text = Chance(10) ? std::string(40000, 'p') + "<&>" : "prompt of " + id;
    e.revision = 1;
    Add(e);
    return id;
  }
  void Update(const std::string& turn, int revision) {
    Event e = Ev("user.message.updated", turn);
    e.request_id = "u-" + std::to_string(Rand(1000));
    e.text = "merged text " + std::to_string(revision) + " of " + turn;
    e.revision = revision;
    Add(e);
  }

  void Body(const std::string& turn) {
    const int steps = static_cast<int>(Rand(8));
    for (int s = 0; s < steps; ++s) {
      switch (Rand(9)) {
        case 0:
        case 1: {
          const int deltas = static_cast<int>(Rand(4));
          for (int d = 0; d < deltas; ++d) {
            Event e = Ev("assistant.delta", turn);
            e.text = Chance(5) ? std::string(20000, 'd') : "d" + std::to_string(d);
            Add(e);
          }
          if (Chance(70)) {
            Event m = Ev("assistant.message", turn);
            m.text = Chance(15) ? "" : "answer in " + turn;
            Add(m);
          }
          break;
        }
        case 2: {
          const std::string tool = "t" + std::to_string(Rand(3));
          if (Chance(80)) {
            Event st = Ev("tool.started", turn);
            st.tool_id = Chance(10) ? "" : tool;
            st.tool_name = "bash";
            st.status = "running";
            Add(st);
          }
          if (Chance(50)) {
            Event d = Ev("tool.delta", turn);
            d.tool_id = tool;
            d.output = "out";
            Add(d);
          }
          if (Chance(80)) {
            Event c = Ev("tool.completed", turn);
            c.tool_id = tool;
            c.tool_name = "bash";
            c.output = Chance(10) ? std::string(10000, 'o') : "done";
            c.status = Chance(20) ? "failed" : "completed";
            Add(c);
          }
          break;
        }
        case 3: {
          const std::string input = "input-" + std::to_string(next_input_++);
          Event q = Ev("input.requested", turn);
          q.input_id = input;
          q.status = "pending";
          q.questions.push_back(InputQuestion{"question-1", "H", "Which?", {InputOption{"a", ""}}, false, false});
          if (Chance(30)) q.questions.push_back(InputQuestion{"question-2", "", "And?", {}, true, false});
          Add(q);
          if (q.questions.size() > 1 && Chance(60)) {
            Event acc = Ev("request.accepted");
            acc.request_id = "a1";
            acc.input_id = input;
            acc.status = "accepted";
            Add(acc);
          }
          Event r = Ev("input.resolved", Chance(20) ? turn : "");
          r.request_id = Chance(80) ? "ans" : "";
          r.input_id = input;
          r.status = Chance(30) ? "cancelled" : "answered";
          Add(r);
          break;
        }
        case 4: {
          Event d = Ev("file.diff", turn);
          d.diff = Chance(10) ? std::string(40000, '+') : "diff --git a/x b/x";
          Add(d);
          break;
        }
        case 5: {
          Event e = Ev("error", turn);
          e.text = "a recoverable error";
          e.status = "failed";
          Add(e);
          break;
        }
        case 6:
          Add(Ev("tool.delta", turn));  // activity that shows nothing
          break;
        case 7: {
          Event u = Ev("user.message");  // a command outside any turn (goal control)
          u.text = "/goal pause";
          u.session_command = true;
          Add(u);
          break;
        }
        default:
          break;
      }
    }
  }

  // A running turn, possibly with the next prompt queued (and merged into) while it runs.
  void Turn(bool finish) {
    std::string turn = queued_.empty() ? NewTurnPrompt() : queued_;
    queued_.clear();
    Add([&] {
      Event e = Ev("turn.started", turn);
      e.status = "running";
      return e;
    }());
    Body(turn);
    if (Chance(40)) {
      queued_ = NewTurnPrompt();
      if (Chance(50)) Update(queued_, 2);
      if (Chance(20)) Update(queued_, 3);
      Body(turn);
    }
    if (!finish) return;
    if (Chance(20)) {
      Event ing = Ev("turn.interrupting", turn);
      ing.request_id = "i";
      ing.status = "interrupting";
      Add(ing);
      Event done = Ev("turn.completed", turn);
      done.status = "interrupted";
      Add(done);
    } else {
      Event done = Ev("turn.completed", turn);
      done.status = Chance(15) ? "failed" : "completed";
      Add(done);
    }
  }

  void Removed() {
    const std::string turn = NewTurnPrompt();
    if (Chance(50)) Update(turn, 2);
    Event rm = Ev("user.message.removed", turn);
    rm.status = "removed";
    rm.revision = 3;
    Add(rm);
  }

  // Two prompts left unstarted by a crash: recovery folds the later into the earlier.
  void RecoveryMerge() {
    const std::string a = NewTurnPrompt();
    const std::string b = NewTurnPrompt();
    Event rec = Ev("runtime.recovered");
    rec.text = "Session runtime restarted";
    rec.status = "recovered";
    Add(rec);
    Event merged = Ev("turn.completed", b);
    merged.status = "merged";
    Add(merged);
    Update(a, 2);
    queued_ = a;
  }

  void Run(int rounds) {
    for (int i = 0; i < rounds; ++i) {
      const auto pick = Rand(10);
      if (pick == 0 && queued_.empty()) Removed();
      else if (pick == 1 && queued_.empty()) RecoveryMerge();
      else Turn(true);
    }
    // End in any state: idle, a queued prompt, a running turn (maybe streaming, maybe asking).
    switch (Rand(4)) {
      case 0:
        break;
      case 1:
        if (queued_.empty()) NewTurnPrompt();
        break;
      case 2:
        Turn(false);
        if (Chance(60)) {
          Event d = Ev("assistant.delta", j_->state().active ? j_->state().active->id : "");
          d.text = "still streaming";
          Add(d);
        }
        break;
      default: {
        Turn(false);
        if (const auto& active = j_->state().active) {
          Event q = Ev("input.requested", active->id);
          q.input_id = "claude-request-1";
          q.status = "pending";
          q.questions.push_back(InputQuestion{"question-1", "", "Continue?", {}, false, false});
          Add(q);
        }
      }
    }
  }

 private:
  std::mt19937 rng_;
  std::unique_ptr<rt::Journal> j_;
  int next_turn_ = 1;
  int next_input_ = 1;
  std::string queued_;
};

std::vector<Event> Window(const rt::Journal& j) {
  std::vector<Event> out;
  for (const auto& e : j.retained()) out.push_back(e.event);
  return out;
}

std::vector<std::string> Lines(const rt::CondensedPage& p) {
  std::vector<std::string> out;
  for (const auto& l : p.lines) out.push_back(*l);
  return out;
}

}  // namespace

// Every page of every cursor chain for 20 limit pairs per journal: ~0.4 s a seed optimized, ~20x that
// in a Debug sanitizer build, which would pass ctest's timeout with the full set.
#ifdef NDEBUG
constexpr std::uint32_t kProjectionSeeds = 80;
#else
constexpr std::uint32_t kProjectionSeeds = 12;
#endif

TEST_CASE("history: the backward walk pages exactly as the runtime's forward projection", "[runtime][history]") {
  for (std::uint32_t seed = 1; seed <= kProjectionSeeds; ++seed) {
    const std::size_t retained = seed % 3 == 0 ? 60 : 4096;  // a short window evicts turns' beginnings
    Sim sim(seed, retained);
    sim.Run(static_cast<int>(3 + seed % 25));
    const rt::Journal& j = sim.journal();
    const RefProjection ref = RefProject(Window(j));
    const std::vector<RefWire> ref_items = Wire(ref.items);
    INFO("seed " << seed << ", " << j.retained().size() << " events retained of " << j.last_id());

    // The state for history.end and the questions sent after the first page.
    const HistoryState hs = rt::CurrentHistoryState(j);
    CHECK(hs.active_turn_id == ref.state.active_turn_id);
    CHECK(hs.active_turn_started == ref.state.active_turn_started);
    CHECK(hs.turn_interrupting == ref.state.turn_interrupting);
    CHECK(hs.waiting_for_input == ref.state.waiting_for_input);
    CHECK(hs.pending_turn == ref.state.pending_turn);
    CHECK(hs.file_diff == ref.state.file_diff);
    std::vector<std::string> essential, ref_essential;
    for (const auto& e : rt::PendingInputEvents(j)) essential.push_back(EncodeEvent(e));
    for (const auto& e : ref.essential) ref_essential.push_back(EncodeEvent(e));
    CHECK(essential == ref_essential);

    // Every page of every chain of cursors, for a few limits.
    for (std::size_t items : {1u, 2u, 3u, 7u, 100u}) {
      for (std::size_t bytes : {1u, 300u, 5000u, 1u << 20}) {
        std::int64_t before = 0;
        for (int page_no = 0; page_no < 1000; ++page_no) {
          INFO("items " << items << " bytes " << bytes << " before " << before);
          const auto page = rt::BuildCondensedPage(j, before, items, bytes);
          const auto want = RefItemsPage(ref_items, before, items, bytes);
          REQUIRE(Lines(page) == want.lines);
          REQUIRE(page.before == want.before);
          if (page.before == 0) break;
          before = page.before;
        }
      }
    }
  }
}

TEST_CASE("history: a page is found without walking the whole journal", "[runtime][history]") {
  auto jr = rt::Journal::Open("", sessionturn::testing::kRuntimeRetainedEvents, nullptr);
  REQUIRE(jr);
  rt::Journal& j = **jr;
  auto add = [&](Event e) { REQUIRE(j.Append(std::move(e))); };
  auto turn = [&](int n, int deltas) {
    const std::string id = "turn-" + std::to_string(n);
    Event um;
    um.type = "user.message";
    um.turn_id = id;
    um.text = "prompt " + std::to_string(n);
    um.revision = 1;
    add(um);
    Event st;
    st.type = "turn.started";
    st.turn_id = id;
    add(st);
    for (int d = 0; d < deltas; ++d) {
      Event e;
      e.type = "assistant.delta";
      e.turn_id = id;
      e.text = "x";
      add(e);
    }
    Event m;
    m.type = "assistant.message";
    m.turn_id = id;
    m.text = "reply " + std::to_string(n);
    add(m);
    Event done;
    done.type = "turn.completed";
    done.turn_id = id;
    done.status = "completed";
    add(done);
  };
  turn(1, 3900);  // one long turn fills most of the window
  for (int n = 2; n <= 30; ++n) turn(n, 2);
  const auto page = rt::BuildCondensedPage(j, 0, 4, 1 << 20);
  REQUIRE(page.lines.size() == 4);
  auto last = DecodeEvent(std::string_view(*page.lines.back()).substr(0, page.lines.back()->size() - 1));
  REQUIRE(last);
  CHECK(last->text == "reply 30");
  CHECK(page.before > 0);
  // Two turns of 6 events each hold the page; the walk stops one item further back.
  CHECK(page.walked < 20);
  CHECK(page.walked < j.retained().size() / 100);
}

namespace {

struct Rt {
  TempDir dir;
  std::unique_ptr<LocalRuntime> rt;
  explicit Rt(LocalRuntimeOptions o) {
    o.socket_path = dir / "rt.sock";
    if (o.provider.rfind("script-body:", 0) == 0) {
      WriteFile(dir / "script.json", o.provider.substr(12));
      o.provider = "script:" + (dir / "script.json");
    }
    if (!o.log_sink) o.log_sink = [](LogLevel, std::string_view) {};
    o.echo_delay = std::chrono::milliseconds(1);
    auto r = LocalRuntime::Start(o);
    if (!r) FAIL("Start: " << r.error().ToString());
    rt = std::move(*r);
  }
  TestClient Client() {
    TestClient c(rt->socket_path());
    REQUIRE(c.connected());
    return c;
  }
};

LocalRuntimeOptions Provider(std::string p) {
  LocalRuntimeOptions o;
  o.provider = std::move(p);
  return o;
}

Event Expect(Result<Event> e) {
  if (!e) FAIL("expected an event: " << e.error().ToString());
  return *e;
}

ClientRequest HistoryRequest(std::string id, std::string cursor) {
  ClientRequest h;
  h.type = "history";
  h.request_id = std::move(id);
  h.history_cursor = std::move(cursor);
  return h;
}

// Reads a history answer: history.start, the page, history.end (all with this request id but the page).
std::vector<Event> ReadPage(TestClient& c, const std::string& request_id) {
  std::vector<Event> seen;
  auto end = c.WaitFor(
      [&](const Event& e) { return e.type == event_type::kHistoryEnd && e.request_id == request_id; }, kTestDeadline,
      &seen);
  if (!end) FAIL("no history.end for " << request_id << ": " << end.error().ToString());
  return seen;
}

}  // namespace

TEST_CASE("history: the cursor is base64url of the runtime's JSON, and pages through history", "[runtime][history]") {
  Rt r(Provider("echo"));
  {
    TestClient a = r.Client();
    REQUIRE(a.Send(ClientRequest::Subscribe(0, {}, false, 0, 0)));
    for (int i = 1; i <= 5; ++i) {
      REQUIRE(a.Send(ClientRequest::Message("m" + std::to_string(i), "prompt " + std::to_string(i))));
      Expect(a.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-" + std::to_string(i))));
    }
  }
  TestClient b = r.Client();
  REQUIRE(b.Send(ClientRequest::Subscribe(0, {}, true, 3, 1 << 20)));
  auto first = b.ReadHistory();
  const Event& start = first.front();
  REQUIRE(start.type == event_type::kHistoryStart);
  CHECK(start.history_limited);
  // Opaque to clients, but the runtime's own shape: base64url without padding of its cursor JSON.
  CHECK(start.history_cursor.find_first_not_of(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") == std::string::npos);
  std::string json;
  REQUIRE(rt::Base64UrlDecode(start.history_cursor, &json));
  // Items, newest first: reply 5, prompt 5, reply 4 on the page; prompt 4 (its user.message) is next.
  std::int64_t prompt4 = 0;
  for (const auto& e : r.rt->JournalEvents())
    if (e.type == event_type::kUserMessage && e.turn_id == "turn-4") prompt4 = e.id;
  const std::int64_t reply4_first = prompt4 + 2;  // turn.started, then the first delta opens the reply
  CHECK(json == "{\"journalId\":\"" + r.rt->journal_id() + "\",\"beforeEventId\":" + std::to_string(reply4_first) +
                    ",\"itemLimit\":3,\"byteLimit\":1048576}");

  // Each `history` request answers the next page (the limits travel in the cursor) and a new cursor.
  std::vector<std::string> texts;
  for (std::size_t i = 1; i + 2 < first.size(); ++i) texts.insert(texts.end(), first[i].text);
  std::string cursor = start.history_cursor;
  int pages = 1;
  while (!cursor.empty()) {
    const std::string id = "h" + std::to_string(pages);
    REQUIRE(b.Send(HistoryRequest(id, cursor)));
    auto page = ReadPage(b, id);
    REQUIRE(page.size() >= 3);
    const Event& hs = page.front();
    CHECK(hs.type == event_type::kHistoryStart);
    CHECK(hs.request_id == id);
    CHECK(hs.history_page);
    CHECK(hs.journal_id == r.rt->journal_id());
    CHECK(hs.history_limited == !hs.history_cursor.empty());
    CHECK(hs.first_event_id == 0);
    CHECK(hs.line == "{\"type\":\"history.start\",\"requestId\":\"" + id + "\",\"journalId\":\"" + r.rt->journal_id() +
                         "\"" + (hs.history_limited ? ",\"historyLimited\":true" : "") + ",\"historyPage\":true" +
                         (hs.history_cursor.empty() ? "" : ",\"historyCursor\":\"" + hs.history_cursor + "\"") + "}");
    CHECK(page.back().line == "{\"type\":\"history.end\",\"requestId\":\"" + id + "\",\"historyPage\":true}");
    CHECK(page.size() - 2 <= 3);
    std::vector<std::string> older;
    for (std::size_t i = 1; i + 1 < page.size(); ++i) {
      CHECK(page[i].turn_id.empty());
      CHECK(page[i].timestamp.empty());
      older.push_back(page[i].text);
    }
    texts.insert(texts.begin(), older.begin(), older.end());
    cursor = hs.history_cursor;
    ++pages;
  }
  CHECK(pages == 4);  // 10 items, 3 a page
  std::vector<std::string> want;
  for (int i = 1; i <= 5; ++i) {
    want.push_back("prompt " + std::to_string(i));
    want.push_back("echo #" + std::to_string(i) + ": prompt " + std::to_string(i));
  }
  CHECK(texts == want);

  // Keys match case-insensitively, as Go's decoder matches them.
  const std::string loud = rt::Base64UrlEncode("{\"JOURNALID\":\"" + r.rt->journal_id() +
                                               "\",\"BeforeEventId\":3,\"itemlimit\":1,\"BYTELIMIT\":100}");
  REQUIRE(b.Send(HistoryRequest("loud", loud)));
  auto one = ReadPage(b, "loud");
  REQUIRE(one.size() == 3);
  CHECK(one[1].text == "prompt 1");
}

TEST_CASE("history: a cursor the runtime did not hand out is rejected", "[runtime][history]") {
  Rt r(Provider("echo"));
  TestClient c = r.Client();
  const std::string jid = r.rt->journal_id();
  auto cursor = [&](const std::string& json) { return rt::Base64UrlEncode(json); };
  auto good = [&](std::int64_t before, std::int64_t items, std::int64_t bytes) {
    return "{\"journalId\":\"" + jid + "\",\"beforeEventId\":" + std::to_string(before) +
           ",\"itemLimit\":" + std::to_string(items) + ",\"byteLimit\":" + std::to_string(bytes) + "}";
  };
  const std::vector<std::string> invalid = {
      "",                                  // none
      "not base64!",                       // outside the alphabet
      cursor(good(5, 10, 1000)) + "=",     // padding: RawURLEncoding has none
      cursor("{}"),                        // empty journal id
      cursor("[1]"),                       // not an object
      cursor(good(0, 10, 1000)),           // beforeEventId must be positive
      cursor(good(5, 0, 1000)),            // itemLimit 1..100
      cursor(good(5, 101, 1000)),
      cursor(good(5, 10, 0)),              // byteLimit 1..1 MiB
      cursor(good(5, 10, (1 << 20) + 1)),
      cursor("{\"journalId\":\"" + jid + "\",\"beforeEventId\":\"5\",\"itemLimit\":1,\"byteLimit\":1}"),  // a string
      cursor("{\"journalId\":\"" + jid + "\",\"beforeEventId\":5.5,\"itemLimit\":1,\"byteLimit\":1}"),    // a float
  };
  int n = 0;
  for (const auto& bad : invalid) {
    const std::string id = "bad-" + std::to_string(n++);
    INFO("cursor " << bad);
    REQUIRE(c.Send(HistoryRequest(id, bad)));
    auto e = Expect(c.WaitFor(ForRequest(id)));
    CHECK(e.line == "{\"type\":\"error\",\"requestId\":\"" + id +
                        "\",\"text\":\"invalid Session history cursor\",\"status\":\"rejected\"}");
  }
  REQUIRE(c.Send(HistoryRequest("other", cursor("{\"journalId\":\"another-journal\",\"beforeEventId\":5,"
                                                "\"itemLimit\":1,\"byteLimit\":1}"))));
  CHECK(Expect(c.WaitFor(ForRequest("other"))).text ==
        "Session history cursor expired; reconnect to reload history");
  // A history request does not subscribe: a turn run meanwhile sends this connection nothing.
  TestClient d = r.Client();
  REQUIRE(d.Send(ClientRequest::Message("m", "hello")));
  Expect(d.WaitType(event_type::kTurnCompleted));
  REQUIRE(c.Send(HistoryRequest("after", "")));
  CHECK(Expect(c.Next()).request_id == "after");
}

TEST_CASE("history: the condensed page holds prompts, replies, notices, tools, diffs and the open question",
          "[runtime][history]") {
  const char* script = R"({"turns":[
      [ {"type":"tool.start","id":"t1","name":"bash","text":"ls"},
        {"type":"tool.delta","id":"t1","output":"a"},
        {"type":"tool.complete","id":"t1","name":"bash","output":"a\nb\n"},
        {"type":"diff","diff":"diff --git a/x b/x"},
        {"type":"error","text":"a recoverable error"},
        {"type":"delta","text":"Hel"}, {"type":"message","text":"Hello"} ],
      [ {"type":"delta","text":"working"}, {"type":"sleep","ms":60000} ],
      [ {"type":"question","inputId":"claude-request-1","questions":[{"question":"Ship it?"}]},
        {"type":"message","text":"shipped"} ]
    ], "repeat":"last"})";
  Rt r(Provider(std::string("script-body:") + script));
  {
    TestClient a = r.Client();
    REQUIRE(a.Send(ClientRequest::Message("m1", "first")));
    Expect(a.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-1")));
    REQUIRE(a.Send(ClientRequest::Message("m2", "second")));
    Expect(a.WaitFor(IsTypeOf(event_type::kAssistantDelta, "turn-2")));
    REQUIRE(a.Send(ClientRequest::Interrupt("i2")));
    Expect(a.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-2")));
  }
  REQUIRE(r.rt->Restart());  // nothing unfinished: "Session runtime restarted"
  {
    TestClient a = r.Client();
    REQUIRE(a.Send(ClientRequest::Message("m3", "third")));
    Expect(a.WaitFor(IsTypeOf(event_type::kInputRequested, "turn-3")));
  }

  TestClient late = r.Client();
  REQUIRE(late.Send(ClientRequest::Subscribe(0, {}, true, 100, 1 << 20)));
  auto seen = late.ReadHistory();
  std::vector<std::string> shape;
  for (const auto& e : seen) {
    std::string s = e.type;
    if (!e.status.empty()) s += " " + e.status;
    if (!e.text.empty()) s += " " + e.text;
    shape.push_back(s);
    if (e.type != event_type::kHistoryStart && e.type != event_type::kHistoryEnd &&
        e.type != event_type::kRuntimeStatus) {
      CHECK(e.id > 0);
      CHECK(e.turn_id.empty());
      CHECK(e.request_id.empty());
      CHECK(e.timestamp.empty());
    }
  }
  const std::vector<std::string> want = {
      "history.start",
      "user.message first",
      "tool.started running ls",
      "tool.completed completed",
      "file.diff",
      "error failed a recoverable error",
      "assistant.message Hello",
      "user.message second",
      "assistant.message working",
      "turn.interrupting interrupting",
      "turn.completed interrupted",
      "runtime.recovered recovered Session runtime restarted",
      "user.message third",
      "input.requested pending",  // the open question, after the page, so a late joiner can answer it
      "runtime.status",
      "history.end",
  };
  CHECK(shape == want);
  const Event& question = seen[seen.size() - 3];
  CHECK(question.input_id == "claude-request-1");
  REQUIRE(question.questions.size() == 1);
  CHECK(question.questions[0].id == "question-1");
  const Event& end = seen.back();
  REQUIRE(end.history_state);
  CHECK(end.history_state->active_turn_id == "turn-3");
  CHECK_FALSE(end.history_state->active_turn_started.empty());
  CHECK(end.history_state->waiting_for_input);
  CHECK(end.history_state->file_diff == "diff --git a/x b/x");

  // The late joiner answers it.
  REQUIRE(late.Send(ClientRequest::Answer("ans", "claude-request-1", {{"question-1", {"yes"}}})));
  auto resolved = Expect(late.WaitFor(ForRequest("ans")));
  CHECK(resolved.type == event_type::kInputResolved);
  CHECK(resolved.status == "answered");
  CHECK(Expect(late.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-3"))).status == "completed");
}

TEST_CASE("history: prompts lists each turn's prompt with its latest text, paged by the same cursor",
          "[runtime][history]") {
  Rt r(Provider("echo"));
  TestClient a = r.Client();
  REQUIRE(a.Send(ClientRequest::Subscribe(0, {}, false, 0, 0)));
  for (int i = 1; i <= 3; ++i) {
    REQUIRE(a.Send(ClientRequest::Message("m" + std::to_string(i), "prompt " + std::to_string(i))));
    Expect(a.WaitFor(IsTypeOf(event_type::kTurnCompleted, "turn-" + std::to_string(i))));
  }
  r.rt->PauseProvider(true);
  REQUIRE(a.Send(ClientRequest::Message("m4", "four")));
  Expect(a.WaitFor(ForRequest("m4")));
  REQUIRE(a.Send(ClientRequest::Remove("x4", "turn-4", 1)));  // removed: not a prompt any more
  Expect(a.WaitFor(ForRequest("x4")));
  REQUIRE(a.Send(ClientRequest::Message("m5", "five")));
  Expect(a.WaitFor(ForRequest("m5")));
  REQUIRE(a.Send(ClientRequest::Message("m6", "six")));  // merged into the queued turn-5
  Expect(a.WaitFor(ForRequest("m6")));

  std::map<std::string, Event> first;  // each turn's user.message
  for (const auto& e : r.rt->JournalEvents())
    if (e.type == event_type::kUserMessage) first[e.turn_id] = e;
  auto prompt = [&](const std::string& turn, const std::string& text) {
    const Event& e = first.at(turn);
    return "{\"id\":" + std::to_string(e.id) + ",\"text\":\"" + text + "\",\"timestamp\":\"" + e.timestamp + "\"}";
  };
  TestClient b = r.Client();  // prompts does not subscribe either
  ClientRequest p = HistoryRequest("p1", "");
  p.type = "prompts";
  REQUIRE(b.Send(p));
  CHECK(Expect(b.Next()).line == "{\"type\":\"prompts\",\"requestId\":\"p1\",\"prompts\":[" + prompt("turn-1", "prompt 1") +
                                     "," + prompt("turn-2", "prompt 2") + "," + prompt("turn-3", "prompt 3") + "," +
                                     prompt("turn-5", "five\\n\\nsix") + "]}");

  const std::string jid = r.rt->journal_id();
  p.request_id = "p2";
  p.history_cursor = rt::EncodeHistoryCursor({jid, first.at("turn-5").id, 2, 1 << 20});
  REQUIRE(b.Send(p));
  const std::string next = rt::EncodeHistoryCursor({jid, first.at("turn-2").id, 2, 1 << 20});
  CHECK(Expect(b.Next()).line == "{\"type\":\"prompts\",\"requestId\":\"p2\",\"historyCursor\":\"" + next +
                                     "\",\"prompts\":[" + prompt("turn-2", "prompt 2") + "," +
                                     prompt("turn-3", "prompt 3") + "]}");
  p.request_id = "p3";
  p.history_cursor = rt::EncodeHistoryCursor({"another", 5, 2, 100});
  REQUIRE(b.Send(p));
  CHECK(Expect(b.Next()).text == "Session prompt history cursor expired; reload prompts");
  p.request_id = "p4";
  p.history_cursor = "!";
  REQUIRE(b.Send(p));
  CHECK(Expect(b.Next()).text == "invalid Session history cursor");
}
