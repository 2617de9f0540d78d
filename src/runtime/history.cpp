#include "runtime/history.hpp"

#include <algorithm>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "event_encode.hpp"
#include "runtime/text.hpp"

namespace sessionturn::runtime {
namespace {

// The runtime's bounds on what one history item may hold.
constexpr std::size_t kMessageBytes = 32 * 1024;
constexpr std::size_t kToolOutputBytes = 8 * 1024;
constexpr std::size_t kDiffBytes = 32 * 1024;
constexpr std::size_t kNoticeBytes = 8 * 1024;
constexpr std::size_t kIdentifierBytes = 1024;
constexpr std::size_t kMaxQuestions = 5;
constexpr std::size_t kMaxOptions = 10;

std::string B(std::string_view text, std::size_t max) { return Bounded(text, max, kHistoryMarker); }

Json BoundedDiff(const Json& diff) {
  if (!diff.is_string()) return diff;
  return Json(B(diff.get_ref<const std::string&>(), kDiffBytes));
}

// The runtime's normalizedHistoryEvent: no timestamp, request or turn id, no stream bounds or
// state; identifiers and questions bounded. Id, type, text, revision, sessionCommand, output, diff,
// goal and attachments stay.
Event Normalized(Event e) {
  e.timestamp.clear();
  e.request_id.clear();
  e.turn_id.clear();
  e.first_event_id = 0;
  e.last_event_id = 0;
  e.journal_id.clear();
  e.reset = false;
  e.history_limited = false;
  e.history_page = false;
  e.history_cursor.clear();
  e.history_state.reset();
  e.runtime.reset();
  e.line.clear();
  e.tool_id = B(e.tool_id, kIdentifierBytes);
  e.tool_name = B(e.tool_name, kIdentifierBytes);
  e.input_id = B(e.input_id, kIdentifierBytes);
  e.status = B(e.status, kIdentifierBytes);
  if (e.questions.size() > kMaxQuestions) e.questions.resize(kMaxQuestions);
  for (auto& q : e.questions) {
    q.id = B(q.id, kIdentifierBytes);
    q.header = B(q.header, 512);
    q.question = B(q.question, 4 * 1024);
    if (q.options.size() > kMaxOptions) q.options.resize(kMaxOptions);
    for (auto& o : q.options) {
      o.label = B(o.label, 512);
      o.description = B(o.description, 512);
    }
  }
  return e;
}

struct Item {
  std::int64_t first = 0;
  std::int64_t last = 0;
  std::vector<Event> events;
  bool operator<(const Item& o) const { return first < o.first; }  // max-heap: newest first
};

class Walker {
 public:
  Walker(const Journal& j, std::int64_t before, std::size_t max_items, std::size_t max_bytes)
      : j_(j), before_(before), max_items_(max_items), max_bytes_(max_bytes) {
    const SessionState& st = j.state();
    if (!st.queued.empty()) pending_turn_ = st.queued.front().id;
    if (st.active) active_turn_ = st.active->id;
    for (const auto& in : st.open_inputs)
      if (!in.input_id.empty()) pending_inputs_.insert(in.input_id);
  }

  CondensedPage Run() {
    const auto& retained = j_.retained();
    for (auto it = retained.rbegin(); it != retained.rend() && !done_; ++it) {
      ++walked_;
      Process(it->event);
      Drain(false);
    }
    if (!done_) {
      // The window's start: whatever is still open closes as the runtime's end-of-walk rules say.
      std::vector<std::string> turns;
      for (const auto& [turn, g] : groups_) turns.push_back(turn);
      for (const auto& t : turns) FinishGroup(t);
      for (const auto& [key, completion] : tools_) Close(SyntheticTool(*completion));
      tools_.clear();
      for (const auto& [id, resolved] : inputs_) Close(Item{resolved->id, resolved->id, {Normalized(*resolved)}});
      inputs_.clear();
      open_bounds_.clear();
      Drain(true);
    }
    CondensedPage page;
    page.before = done_ ? oldest_first_ : 0;
    page.walked = walked_;
    for (auto it = included_.rbegin(); it != included_.rend(); ++it)
      for (auto& line : *it) page.lines.push_back(std::move(line));
    return page;
  }

 private:
  struct Group {
    std::int64_t last = 0;
    const Event* message = nullptr;       // the assistant.message that ends it, if any
    std::vector<const Event*> deltas;     // newest first
    bool keep_streaming = false;          // it ends the window in the running turn: stays a delta
    std::int64_t bound() const { return deltas.empty() ? last : deltas.back()->id; }
  };

  static std::string ToolKey(const Event& e) { return e.turn_id + '\0' + e.tool_id; }

  void Process(const Event& e) {
    const std::string& t = e.turn_id;
    if (!t.empty()) {
      if (t == pending_turn_) return;  // the queued turn shows only in historyState.pendingTurn
      const TurnIndex* idx = j_.Turn(t);
      if (idx && idx->hidden) return;  // removed, or merged at recovery
    }
    const std::string& type = e.type;
    if (type == event_type::kAssistantDelta) {
      auto g = groups_.find(t);
      if (g != groups_.end()) {
        open_bounds_.erase(open_bounds_.find(g->second.bound()));
        g->second.deltas.push_back(&e);
        open_bounds_.insert(g->second.bound());
      } else {
        Group ng;
        ng.last = e.id;
        ng.deltas.push_back(&e);
        // No later event of this turn: the group runs to the end of the journal.
        ng.keep_streaming = !seen_turns_.count(t) && t == active_turn_;
        open_bounds_.insert(ng.bound());
        groups_.emplace(t, std::move(ng));
      }
    } else if (type == event_type::kAssistantMessage) {
      FinishGroup(t);
      Group ng;
      ng.last = e.id;
      ng.message = &e;
      open_bounds_.insert(ng.bound());
      groups_.emplace(t, std::move(ng));
    } else {
      FinishGroup(t);
      Other(e);
    }
    seen_turns_.insert(t);
  }

  void Other(const Event& e) {
    const std::string& type = e.type;
    if (type == event_type::kUserMessage || type == event_type::kUserMessageUpdated) {
      if (e.turn_id.empty()) {
        if (type == event_type::kUserMessage && Wanted(e.id)) {
          Event ev = e;
          ev.text = B(ev.text, kMessageBytes);
          Close(Item{e.id, e.id, {Normalized(std::move(ev))}});
        }
        return;
      }
      // One item per turn, where its prompt first appeared, with the text it ended up with.
      const TurnIndex* idx = j_.Turn(e.turn_id);
      if (!idx || idx->anchor() != e.id || !Wanted(e.id)) return;
      const JournalEntry* latest = j_.Find(idx->latest());
      Event ev = latest ? latest->event : e;
      ev.id = e.id;
      ev.type = std::string(event_type::kUserMessage);
      ev.text = B(ev.text, kMessageBytes);
      Close(Item{e.id, e.id, {Normalized(std::move(ev))}});
    } else if (type == event_type::kToolStarted) {
      if (e.tool_id.empty()) {
        if (Wanted(e.id)) Close(Item{e.id, e.id, {Normalized(e)}});
        return;
      }
      const std::string key = ToolKey(e);
      if (auto it = tools_.find(key); it != tools_.end()) {
        const Event* completion = it->second;
        open_bounds_.erase(open_bounds_.find(completion->id));
        tools_.erase(it);
        if (Wanted(e.id)) Close(Item{e.id, completion->id, {Normalized(e), Completion(*completion)}});
      } else if (!tool_keys_seen_.count(key)) {
        if (Wanted(e.id)) Close(Item{e.id, e.id, {Normalized(e)}});  // started, never completed
      }  // else a later start of the same tool replaced this one
      tool_keys_seen_.insert(key);
    } else if (type == event_type::kToolCompleted) {
      const std::string key = ToolKey(e);
      if (auto it = tools_.find(key); it != tools_.end()) {
        // Two completions in a row: the later one had no start of its own.
        open_bounds_.erase(open_bounds_.find(it->second->id));
        if (Wanted(it->second->id)) Close(SyntheticTool(*it->second));
      }
      tools_[key] = &e;
      open_bounds_.insert(e.id);
      tool_keys_seen_.insert(key);
    } else if (type == event_type::kInputRequested) {
      if (pending_inputs_.count(e.input_id)) return;  // still waiting: sent after the page instead
      if (auto it = inputs_.find(e.input_id); it != inputs_.end()) {
        const Event* resolved = it->second;
        open_bounds_.erase(open_bounds_.find(resolved->id));
        inputs_.erase(it);
        if (Wanted(e.id)) Close(Item{e.id, resolved->id, {Normalized(e), Normalized(*resolved)}});
      }  // else resolved never (or by an earlier request of the same id): not shown
    } else if (type == event_type::kInputResolved) {
      if (auto it = inputs_.find(e.input_id); it != inputs_.end()) {
        open_bounds_.erase(open_bounds_.find(it->second->id));
        if (Wanted(it->second->id)) Close(Item{it->second->id, it->second->id, {Normalized(*it->second)}});
      }
      inputs_[e.input_id] = &e;
      open_bounds_.insert(e.id);
    } else if (!Wanted(e.id)) {
      return;  // newer than the page asked for: nothing to build
    } else if (type == event_type::kFileDiff) {
      Event ev = Normalized(e);
      ev.diff = BoundedDiff(ev.diff);
      Close(Item{e.id, e.id, {std::move(ev)}});
    } else if (type == event_type::kRuntimeRecovered || type == event_type::kError ||
               type == event_type::kTurnInterrupting) {
      Event ev = e;
      ev.text = B(ev.text, kNoticeBytes);
      Close(Item{e.id, e.id, {Normalized(std::move(ev))}});
    } else if (type == event_type::kTurnCompleted) {
      if (e.status == status_value::kInterrupted) Close(Item{e.id, e.id, {Normalized(e)}});
    }
  }

  static Event Completion(const Event& c) {
    Event ev = Normalized(c);
    ev.output = B(ev.output, kToolOutputBytes);
    return ev;
  }

  static Item SyntheticTool(const Event& c) {
    Event start;
    start.id = c.id;
    start.type = std::string(event_type::kToolStarted);
    start.tool_id = c.tool_id;
    start.tool_name = c.tool_name;
    start.status = std::string(status_value::kRunning);
    return Item{c.id, c.id, {Normalized(std::move(start)), Completion(c)}};
  }

  void FinishGroup(const std::string& turn) {
    auto it = groups_.find(turn);
    if (it == groups_.end()) return;
    Group g = std::move(it->second);
    groups_.erase(it);
    open_bounds_.erase(open_bounds_.find(g.bound()));
    if (!Wanted(g.bound())) return;  // its first event is newer than the page asked for
    if (g.deltas.empty()) {
      // An assistant.message on its own; an empty one shows nothing.
      if (g.message->text.empty()) return;
      Event ev = *g.message;
      ev.text = B(ev.text, kMessageBytes);
      Close(Item{ev.id, ev.id, {Normalized(std::move(ev))}});
      return;
    }
    const Event& first = *g.deltas.back();
    Event ev = first;
    ev.id = g.last;
    ev.type = std::string(!g.message && g.keep_streaming ? event_type::kAssistantDelta : event_type::kAssistantMessage);
    if (g.message && !g.message->text.empty()) {
      ev.text = B(g.message->text, kMessageBytes);
    } else {
      BoundedText text(kMessageBytes, kHistoryMarker);
      for (auto d = g.deltas.rbegin(); d != g.deltas.rend(); ++d) text.Write((*d)->text);
      ev.text = text.String();
    }
    Close(Item{first.id, g.last, {Normalized(std::move(ev))}});
  }

  // Items starting at or after `before` are not on the page: they are tracked, never built.
  bool Wanted(std::int64_t first) const { return before_ == 0 || first < before_; }
  void Close(Item item) { closed_.push(std::move(item)); }

  // Takes closed items, newest first, for as long as no open item could still turn out newer.
  void Drain(bool all) {
    while (!closed_.empty() && !done_) {
      if (!all && !open_bounds_.empty() && closed_.top().first < *open_bounds_.rbegin()) return;
      Item item = closed_.top();
      closed_.pop();
      if (before_ > 0 && item.first >= before_) continue;
      std::vector<std::shared_ptr<const std::string>> lines;
      std::size_t size = 0;
      for (const auto& ev : item.events) {
        lines.push_back(EncodeShared(ev));
        size += lines.back()->size();
      }
      if (count_ >= max_items_ || (count_ > 0 && bytes_ + size > max_bytes_)) {
        done_ = true;  // an older item exists and does not fit: the cursor points before the oldest kept
        return;
      }
      ++count_;
      bytes_ += size;
      oldest_first_ = item.first;
      included_.push_back(std::move(lines));
    }
  }

  const Journal& j_;
  const std::int64_t before_;
  const std::size_t max_items_;
  const std::size_t max_bytes_;
  std::string pending_turn_;
  std::string active_turn_;
  std::unordered_set<std::string> pending_inputs_;

  std::unordered_map<std::string, Group> groups_;           // open assistant groups, per turn
  std::unordered_map<std::string, const Event*> tools_;     // completions waiting for their start
  std::unordered_set<std::string> tool_keys_seen_;          // tools with a later start or completion
  std::unordered_map<std::string, const Event*> inputs_;    // resolutions waiting for their request
  std::unordered_set<std::string> seen_turns_;              // turns with a later (walked) event
  std::multiset<std::int64_t> open_bounds_;                 // the newest first id each open item may get

  std::priority_queue<Item> closed_;
  std::vector<std::vector<std::shared_ptr<const std::string>>> included_;  // newest first
  std::size_t count_ = 0;
  std::size_t bytes_ = 0;
  std::int64_t oldest_first_ = 0;
  std::size_t walked_ = 0;
  bool done_ = false;
};

}  // namespace

CondensedPage BuildCondensedPage(const Journal& journal, std::int64_t before, std::size_t max_items,
                                 std::size_t max_bytes) {
  if (max_items == 0 || max_bytes == 0) return {};
  return Walker(journal, before, max_items, max_bytes).Run();
}

std::vector<Event> PendingInputEvents(const Journal& journal) {
  std::vector<Event> out;
  for (const auto& in : journal.state().open_inputs) {
    if (in.input_id.empty()) continue;
    const JournalEntry* entry = journal.Find(in.event_id);
    if (!entry || entry->event.type != event_type::kInputRequested) continue;
    Event ev = Normalized(entry->event);
    ev.input_id = entry->event.input_id;
    ev.questions = entry->event.questions;
    out.push_back(std::move(ev));
  }
  std::sort(out.begin(), out.end(), [](const Event& a, const Event& b) { return a.id < b.id; });
  return out;
}

HistoryState CurrentHistoryState(const Journal& journal) {
  // The runtime derives this from the retained journal alone; so does this, from the same window.
  const SessionState& st = journal.state();
  HistoryState hs;
  if (st.active) {
    hs.active_turn_id = st.active->id;
    hs.turn_interrupting = st.interrupting;
    if (const JournalEntry* started = journal.Find(st.active_started_id)) {
      hs.active_turn_started = started->event.timestamp;
    } else {
      // turn.started scrolled out of the window: the turn's first retained activity says when.
      for (const auto& entry : journal.retained()) {
        const Event& e = entry.event;
        if (e.turn_id != st.active->id || e.type == event_type::kUserMessage ||
            e.type == event_type::kUserMessageUpdated || e.type == event_type::kUserMessageRemoved ||
            e.type == event_type::kTurnCompleted)
          continue;
        hs.active_turn_started = e.timestamp;
        break;
      }
    }
  }
  for (const auto& in : st.open_inputs)
    if (!in.input_id.empty() && journal.Find(in.event_id)) hs.waiting_for_input = true;
  if (!st.queued.empty()) {
    const TurnRecord& q = st.queued.front();
    const TurnIndex* idx = journal.Turn(q.id);
    if (idx && !idx->prompts.empty())
      hs.pending_turn = PendingTurn{q.id, B(q.text, kMessageBytes), std::max<std::int64_t>(1, q.revision)};
  }
  if (const JournalEntry* diff = journal.Find(st.last_file_diff_id)) hs.file_diff = BoundedDiff(diff->event.diff);
  return hs;
}

PromptsAnswer BuildPrompts(const Journal& journal, const std::string& request_id, std::string_view cursor_text) {
  constexpr std::int64_t kDefaultItems = 20;
  constexpr std::int64_t kDefaultBytes = 128 * 1024;
  HistoryCursor cursor{"", 0, kDefaultItems, kDefaultBytes};
  if (!cursor_text.empty()) {
    auto decoded = DecodeHistoryCursor(cursor_text);
    if (!decoded) return {{}, "invalid Session history cursor"};
    cursor = *decoded;
  }
  if (!cursor.journal_id.empty() && cursor.journal_id != journal.id())
    return {{}, "Session prompt history cursor expired; reload prompts"};
  cursor.journal_id = journal.id();

  // One prompt per turn (its first event, with the latest text), or per prompt without a turn.
  struct Prompt {
    Event event;
    bool alive = true;
  };
  std::vector<Prompt> prompts;
  std::unordered_map<std::string, std::size_t> turns;
  for (const auto& entry : journal.retained()) {
    const Event& e = entry.event;
    auto it = turns.find(e.turn_id);
    if (e.type == event_type::kUserMessage || e.type == event_type::kUserMessageUpdated) {
      if (!e.turn_id.empty() && it != turns.end()) {
        prompts[it->second].event.text = e.text;
        prompts[it->second].event.attachments = e.attachments;
        continue;
      }
      if (!e.turn_id.empty()) turns[e.turn_id] = prompts.size();
      prompts.push_back(Prompt{e});
    } else if (e.type == event_type::kUserMessageRemoved || e.type == event_type::kTurnCompleted) {
      if (it != turns.end() && (e.type == event_type::kUserMessageRemoved || e.status == status_value::kMerged)) {
        prompts[it->second].alive = false;
        turns.erase(it);
      }
    }
  }
  std::vector<const Event*> eligible;
  for (const auto& p : prompts)
    if (p.alive && (cursor.before_event_id == 0 || p.event.id < cursor.before_event_id)) eligible.push_back(&p.event);
  // The same page rule as history: newest first, within both limits, at least one.
  std::size_t start = eligible.size();
  std::size_t bytes = 0;
  while (start > 0 && eligible.size() - start < static_cast<std::size_t>(cursor.item_limit)) {
    const std::size_t size = EncodeEvent(*eligible[start - 1]).size() + 1;
    if (start < eligible.size() && bytes + size > static_cast<std::size_t>(cursor.byte_limit)) break;
    --start;
    bytes += size;
  }
  std::string next;
  if (start > 0 && start < eligible.size()) {
    cursor.before_event_id = eligible[start]->id;
    next = EncodeHistoryCursor(cursor);
  }
  // Go's Event{type, requestId, historyCursor, prompts} and Prompt{id, text, timestamp, attachments}.
  std::string line = "{\"type\":\"prompts\"";
  if (!request_id.empty()) {
    line += ",\"requestId\":";
    detail::AppendGoJsonString(line, request_id);
  }
  if (!next.empty()) {
    line += ",\"historyCursor\":";
    detail::AppendGoJsonString(line, next);
  }
  if (start < eligible.size()) {
    line += ",\"prompts\":[";
    for (std::size_t i = start; i < eligible.size(); ++i) {
      const Event& e = *eligible[i];
      if (i > start) line.push_back(',');
      line += "{\"id\":" + std::to_string(e.id) + ",\"text\":";
      detail::AppendGoJsonString(line, e.text);
      if (!e.timestamp.empty()) {
        line += ",\"timestamp\":";
        detail::AppendGoJsonString(line, e.timestamp);
      }
      if (e.attachments.is_array() && !e.attachments.empty()) {
        line += ",\"attachments\":";
        detail::AppendGoJsonValue(line, e.attachments);
      }
      line.push_back('}');
    }
    line.push_back(']');
  }
  line += "}\n";
  return {std::move(line), {}};
}

std::string EncodeHistoryCursor(const HistoryCursor& c) {
  std::string json = "{\"journalId\":";
  detail::AppendGoJsonString(json, c.journal_id);
  json += ",\"beforeEventId\":" + std::to_string(c.before_event_id);
  json += ",\"itemLimit\":" + std::to_string(c.item_limit);
  json += ",\"byteLimit\":" + std::to_string(c.byte_limit) + "}";
  return Base64UrlEncode(json);
}

std::optional<HistoryCursor> DecodeHistoryCursor(std::string_view text) {
  std::string json;
  if (!Base64UrlDecode(text, &json)) return std::nullopt;
  Json j = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  HistoryCursor c;
  // Go matches the keys case-insensitively and ignores unknown ones.
  auto lower = [](std::string s) {
    for (auto& ch : s)
      if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
    return s;
  };
  auto as_int = [](const Json& v, std::int64_t* out) {
    if (v.is_null()) return true;
    if (v.is_number_unsigned()) {
      if (v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) return false;
      *out = static_cast<std::int64_t>(v.get<std::uint64_t>());
      return true;
    }
    if (!v.is_number_integer()) return false;
    *out = v.get<std::int64_t>();
    return true;
  };
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string k = lower(it.key());
    const Json& v = it.value();
    if (k == "journalid") {
      if (v.is_null()) continue;
      if (!v.is_string()) return std::nullopt;
      c.journal_id = v.get<std::string>();
    } else if (k == "beforeeventid") {
      if (!as_int(v, &c.before_event_id)) return std::nullopt;
    } else if (k == "itemlimit") {
      if (!as_int(v, &c.item_limit)) return std::nullopt;
    } else if (k == "bytelimit") {
      if (!as_int(v, &c.byte_limit)) return std::nullopt;
    }
  }
  if (c.journal_id.empty() || c.before_event_id <= 0 || c.item_limit <= 0 ||
      c.item_limit > static_cast<std::int64_t>(kHistoryMaxItems) || c.byte_limit <= 0 ||
      c.byte_limit > static_cast<std::int64_t>(kHistoryMaxBytes))
    return std::nullopt;
  return c;
}

}  // namespace sessionturn::runtime
