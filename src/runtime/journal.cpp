#include "runtime/journal.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

namespace sessionturn::runtime {
namespace {

namespace fs = std::filesystem;

std::int64_t NumberAfter(const std::string& id, std::string_view prefix) {
  if (id.rfind(prefix, 0) != 0 || id.size() == prefix.size()) return 0;
  std::int64_t n = 0;
  for (std::size_t i = prefix.size(); i < id.size(); ++i) {
    char c = id[i];
    if (c < '0' || c > '9' || n > (INT64_MAX - 9) / 10) return 0;
    n = n * 10 + (c - '0');
  }
  return n;
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

SessionCommand::Kind KindOf(const Event& e) {
  if (!e.session_command) return SessionCommand::Kind::message;
  const std::string_view t = TrimUnicodeSpace(e.text);
  return !t.empty() && t.front() == '!' ? SessionCommand::Kind::shell : SessionCommand::Kind::goal;
}

}  // namespace

std::string FormatTimestamp(std::int64_t unix_nanos) {
  std::int64_t secs = unix_nanos / 1000000000;
  std::int64_t nanos = unix_nanos % 1000000000;
  if (nanos < 0) {
    nanos += 1000000000;
    --secs;
  }
  const std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out(buf, n);
  if (nanos != 0) {
    char frac[16];
    std::snprintf(frac, sizeof frac, ".%09lld", static_cast<long long>(nanos));
    std::string f(frac);
    while (f.back() == '0') f.pop_back();
    out += f;
  }
  out += 'Z';
  return out;
}

std::string NowTimestamp() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return FormatTimestamp(static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec);
}

std::int64_t TurnIndex::anchor() const {
  for (auto it = prompts.rbegin(); it != prompts.rend(); ++it)
    if (it->second) return it->first;
  return prompts.empty() ? 0 : prompts.front().first;
}

std::shared_ptr<const std::string> EncodeShared(const Event& event) {
  auto s = EncodeEvent(event);
  s.push_back('\n');
  return std::make_shared<const std::string>(std::move(s));
}

void SessionState::Apply(const Event& e) {
  const std::string& t = e.type;
  next_turn_number = std::max(next_turn_number, NumberAfter(e.turn_id, "turn-") + 1);
  next_input_number = std::max(next_input_number, NumberAfter(e.input_id, "input-") + 1);
  if (t == event_type::kUserMessage) {
    if (e.turn_id.empty()) return;  // a command run outside any turn
    TurnRecord turn;
    turn.id = e.turn_id;
    turn.text = e.text;
    turn.revision = e.revision > 0 ? e.revision : 1;
    turn.kind = KindOf(e);
    queued.push_back(std::move(turn));
  } else if (t == event_type::kUserMessageUpdated) {
    if (auto* turn = FindQueued(e.turn_id)) {
      turn->text = e.text;
      turn->revision = e.revision > 0 ? e.revision : 1;
      turn->kind = KindOf(e);
    }
  } else if (t == event_type::kUserMessageRemoved) {
    std::erase_if(queued, [&](const TurnRecord& r) { return r.id == e.turn_id; });
  } else if (t == event_type::kTurnStarted) {
    auto it = std::find_if(queued.begin(), queued.end(), [&](const TurnRecord& r) { return r.id == e.turn_id; });
    TurnRecord turn;
    if (it != queued.end()) {
      turn = std::move(*it);
      queued.erase(it);
    } else {
      turn.id = e.turn_id;
    }
    active = std::move(turn);
    active_started = e.timestamp;
    active_started_id = e.id;
    interrupting = false;
    ++turns_started;
  } else if (t == event_type::kTurnInterrupting) {
    if (active && active->id == e.turn_id) interrupting = true;
  } else if (t == event_type::kInputRequested) {
    OpenInput in;
    in.input_id = e.input_id;
    in.turn_id = e.turn_id;
    in.questions = e.questions;
    in.event_id = e.id;
    std::erase_if(open_inputs, [&](const OpenInput& o) { return o.input_id == e.input_id; });
    open_inputs.push_back(std::move(in));
  } else if (t == event_type::kInputResolved) {
    std::erase_if(open_inputs, [&](const OpenInput& in) { return in.input_id == e.input_id; });
  } else if (t == event_type::kFileDiff) {
    last_file_diff_id = e.id;
  } else if (t == event_type::kTurnCompleted) {
    if (active && active->id == e.turn_id) {
      active.reset();
      interrupting = false;
    } else {
      std::erase_if(queued, [&](const TurnRecord& r) { return r.id == e.turn_id; });
    }
    std::erase_if(open_inputs, [&](const OpenInput& in) { return in.turn_id == e.turn_id; });
  }
}

TurnRecord* SessionState::FindQueued(const std::string& turn_id) {
  for (auto& r : queued)
    if (r.id == turn_id) return &r;
  return nullptr;
}

OpenInput* SessionState::FindInput(const std::string& input_id) {
  for (auto& in : open_inputs)
    if (in.input_id == input_id) return &in;
  return nullptr;
}

Journal::~Journal() { Close(); }

Result<std::unique_ptr<Journal>> Journal::Open(const std::string& state_dir, std::size_t retained,
                                               std::vector<std::string>* warnings) {
  std::unique_ptr<Journal> j(new Journal());
  j->dir_ = state_dir;
  j->max_retained_ = std::max<std::size_t>(retained, 1);
  if (state_dir.empty()) {
    j->id_ = NewUuid();
    return j;
  }
  if (auto st = j->Load(warnings); !st) return Fail(st.error());
  return j;
}

Status Journal::Load(std::vector<std::string>* warnings) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return Fail(Errc::io_error, "cannot create state directory " + dir_ + ": " + ec.message());
  ::chmod(dir_.c_str(), 0700);
  const std::string lock_path = dir_ + "/lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) return Fail(Errc::io_error, Errno("cannot open " + lock_path));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd_);
    lock_fd_ = -1;
    return Fail(Errc::io_error, "state directory " + dir_ + " is in use by another runtime");
  }
  const std::string id_path = dir_ + "/journal.json";
  const std::string events_path = dir_ + "/events.jsonl";

  id_.clear();
  last_id_ = 0;
  retained_.clear();
  turns_.clear();
  state_ = SessionState{};

  if (std::ifstream in(id_path); in) {
    std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Json j = Json::parse(body, nullptr, false);
    if (j.is_object() && j.contains("journalId") && j["journalId"].is_string()) id_ = j["journalId"].get<std::string>();
    if (id_.empty()) return Fail(Errc::io_error, id_path + " has no journalId: remove the state directory or fix it");
  }
  if (id_.empty()) {
    id_ = NewUuid();
    std::ofstream out(id_path, std::ios::trunc);
    out << Json{{"journalId", id_}}.dump() << "\n";
    out.flush();
    if (!out) return Fail(Errc::io_error, "cannot write " + id_path);
    ::chmod(id_path.c_str(), 0600);
  }

  std::string body;
  if (std::ifstream in(events_path, std::ios::binary); in) {
    body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::size_t pos = 0;
  std::size_t line_no = 0;
  while (pos < body.size()) {
    std::size_t nl = body.find('\n', pos);
    if (nl == std::string::npos) {
      // A torn last write (the runtime died mid-line): cut it off so the next append starts a clean line.
      if (warnings) warnings->push_back(events_path + ":" + std::to_string(line_no + 1) + ": skipped (torn last line)");
      if (::truncate(events_path.c_str(), static_cast<off_t>(pos)) != 0)
        return Fail(Errc::io_error, Errno("cannot cut the torn last line of " + events_path));
      break;
    }
    ++line_no;
    std::string_view line(body.data() + pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    auto ev = DecodeEvent(line);
    if (!ev || ev->id <= last_id_) {
      // A hand edit or a damaged record: skip it rather than refuse to start.
      if (warnings)
        warnings->push_back(events_path + ":" + std::to_string(line_no) + ": skipped (" +
                            (ev ? std::string("id does not increase") : ev.error().message) + ")");
      continue;
    }
    ev->line.clear();
    last_id_ = ev->id;
    state_.Apply(*ev);
    auto bytes = std::make_shared<const std::string>(std::string(line) + "\n");
    Retain(JournalEntry{std::move(*ev), std::move(bytes)});
  }
  fd_ = ::open(events_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0) return Fail(Errc::io_error, Errno("cannot open " + events_path));
  return {};
}

void Journal::Retain(JournalEntry entry) {
  IndexAdd(entry.event);
  retained_.push_back(std::move(entry));
  while (retained_.size() > max_retained_) {
    IndexRemove(retained_.front().event);
    retained_.pop_front();
  }
}

void Journal::IndexAdd(const Event& e) {
  if (e.turn_id.empty()) return;
  TurnIndex& t = turns_[e.turn_id];
  ++t.events;
  if (e.type == event_type::kUserMessage || e.type == event_type::kUserMessageUpdated)
    t.prompts.emplace_back(e.id, e.type == event_type::kUserMessage);
  else if (e.type == event_type::kUserMessageRemoved)
    t.hidden = true;
  else if (e.type == event_type::kTurnCompleted)
    t.hidden = e.status == status_value::kMerged;
}

void Journal::IndexRemove(const Event& e) {
  if (e.turn_id.empty()) return;
  auto it = turns_.find(e.turn_id);
  if (it == turns_.end()) return;
  TurnIndex& t = it->second;
  if (!t.prompts.empty() && t.prompts.front().first == e.id) t.prompts.pop_front();
  if (--t.events == 0) turns_.erase(it);
}

const JournalEntry* Journal::Find(std::int64_t id) const {
  if (retained_.empty() || id < retained_.front().event.id || id > retained_.back().event.id) return nullptr;
  // Retained ids are consecutive except after a reload that skipped damaged lines: check, then search.
  const auto guess = static_cast<std::size_t>(id - retained_.front().event.id);
  if (guess < retained_.size() && retained_[guess].event.id == id) return &retained_[guess];
  auto it = std::lower_bound(retained_.begin(), retained_.end(), id,
                             [](const JournalEntry& e, std::int64_t v) { return e.event.id < v; });
  return it != retained_.end() && it->event.id == id ? &*it : nullptr;
}

const TurnIndex* Journal::Turn(const std::string& turn_id) const {
  auto it = turns_.find(turn_id);
  return it == turns_.end() ? nullptr : &it->second;
}

Result<const JournalEntry*> Journal::Append(Event event) {
  event.id = last_id_ + 1;
  if (event.timestamp.empty()) event.timestamp = NowTimestamp();
  event.line.clear();
  auto bytes = EncodeShared(event);
  if (fd_ >= 0) {
    const char* p = bytes->data();
    std::size_t left = bytes->size();
    while (left > 0) {
      ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Fail(Errc::io_error, Errno("journal write failed: " + dir_ + "/events.jsonl"));
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  last_id_ = event.id;
  state_.Apply(event);
  Retain(JournalEntry{std::move(event), std::move(bytes)});
  return &retained_.back();
}

void Journal::Sync() {
  if (fd_ >= 0) ::fdatasync(fd_);
}

Status Journal::Reload(std::vector<std::string>* warnings) {
  if (dir_.empty()) return {};
  Close();
  return Load(warnings);
}

void Journal::Close() {
  if (fd_ >= 0) {
    ::fdatasync(fd_);
    ::close(fd_);
    fd_ = -1;
  }
  if (lock_fd_ >= 0) {
    ::close(lock_fd_);  // releases the flock
    lock_fd_ = -1;
  }
}

}  // namespace sessionturn::runtime
