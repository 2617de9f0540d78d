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

std::int64_t TurnNumber(const std::string& turn_id) {
  constexpr std::string_view kPrefix = "turn-";
  if (turn_id.rfind(kPrefix, 0) != 0) return 0;
  std::int64_t n = 0;
  for (std::size_t i = kPrefix.size(); i < turn_id.size(); ++i) {
    char c = turn_id[i];
    if (c < '0' || c > '9') return 0;
    n = n * 10 + (c - '0');
  }
  return n;
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

std::string NowTimestamp() {
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(now);
  auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%06lldZ", static_cast<long long>(micros));
  return buf;
}

std::shared_ptr<const std::string> EncodeShared(const Event& event) {
  auto s = EncodeEvent(event);
  s.push_back('\n');
  return std::make_shared<const std::string>(std::move(s));
}

void SessionState::Apply(const Event& e) {
  const std::string& t = e.type;
  if (t == event_type::kUserMessage) {
    TurnRecord turn;
    turn.id = e.turn_id;
    turn.text = e.text;
    turn.revision = e.revision > 0 ? e.revision : 1;
    turn.shell = e.session_command && !TrimUnicodeSpace(e.text).empty() && TrimUnicodeSpace(e.text).front() == '!';
    next_turn_number = std::max(next_turn_number, TurnNumber(e.turn_id) + 1);
    queued.push_back(std::move(turn));
  } else if (t == event_type::kUserMessageUpdated) {
    if (auto* turn = FindQueued(e.turn_id)) {
      turn->text = e.text;
      turn->revision = e.revision;
      std::string_view trimmed = TrimUnicodeSpace(e.text);
      turn->shell = !trimmed.empty() && trimmed.front() == '!';
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
    interrupting = false;
    ++turns_started;
  } else if (t == event_type::kTurnInterrupting) {
    if (active && active->id == e.turn_id) interrupting = true;
  } else if (t == event_type::kInputRequested) {
    OpenInput in;
    in.input_id = e.input_id;
    in.turn_id = e.turn_id;
    in.questions = e.questions;
    open_inputs.push_back(std::move(in));
  } else if (t == event_type::kRequestAccepted) {
    // Partial answers are not journaled with their content; nothing to fold.
  } else if (t == event_type::kInputResolved) {
    std::erase_if(open_inputs, [&](const OpenInput& in) { return in.input_id == e.input_id; });
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
  retained_.push_back(std::move(entry));
  while (retained_.size() > max_retained_) retained_.pop_front();
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
