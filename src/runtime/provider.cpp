#include "runtime/provider.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <asio.hpp>

extern char** environ;

namespace sessionturn::runtime {
namespace {

// How many burst deltas are emitted before the run yields the I/O thread, so subscribers' writes
// interleave with a flood instead of queueing behind all of it.
constexpr std::int64_t kBurstSlice = 64;  // well under the 256-event subscriber bound
// How long flood:N waits before looking again at a subscriber that is more than half its bound behind.
constexpr std::chrono::microseconds kFloodPacing{200};
// How often a command whose output streams have closed is polled for its exit status.
constexpr std::chrono::milliseconds kReapPoll{5};
// How much of a command's stderr is kept for the failure message.
constexpr std::size_t kStderrTailBytes = 4096;

enum class StepKind { delta, message, tool_start, tool_delta, tool_complete, question, error, fail, sleep, status,
                      usage, diff, burst, stall };

struct Step {
  StepKind kind = StepKind::delta;
  std::string text;
  std::string id;
  std::string name;
  std::string output;
  std::string status;
  std::int64_t count = 0;
  std::chrono::milliseconds ms{0};
  Json json;
  std::vector<InputQuestion> questions;
};

std::string ReplaceAll(std::string s, std::string_view from, const std::string& to) {
  std::size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

// Script texts may say {prompt}, {turn} (the turn id) and {n} (the Session's turn count).
std::string Expand(const std::string& s, const TurnInput& in) {
  if (s.find('{') == std::string::npos) return s;
  std::string out = ReplaceAll(s, "{prompt}", in.text);
  out = ReplaceAll(out, "{turn}", in.turn_id);
  return ReplaceAll(out, "{n}", std::to_string(in.number));
}

// Cuts `s` into about `parts` pieces without splitting a UTF-8 sequence.
std::vector<std::string> SplitUtf8(const std::string& s, std::size_t parts) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 1; i <= parts && start < s.size(); ++i) {
    std::size_t end = i == parts ? s.size() : std::max(start + 1, s.size() * i / parts);
    while (end < s.size() && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) ++end;
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end;
  }
  return out;
}

std::string Str(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Result<Step> ParseStep(const Json& j, const std::string& where) {
  if (!j.is_object()) return Fail(Errc::invalid_argument, where + ": a step must be an object");
  std::string type = Str(j, "type");
  Step s;
  s.text = Str(j, "text");
  s.id = Str(j, "id");
  s.name = Str(j, "name");
  s.output = Str(j, "output");
  s.status = Str(j, "status");
  if (type == "delta") s.kind = StepKind::delta;
  else if (type == "message") s.kind = StepKind::message;
  else if (type == "tool.start") s.kind = StepKind::tool_start;
  else if (type == "tool.delta") s.kind = StepKind::tool_delta;
  else if (type == "tool.complete") {
    s.kind = StepKind::tool_complete;
    if (s.status.empty()) s.status = std::string(status_value::kCompleted);
  } else if (type == "question") {
    s.kind = StepKind::question;
    s.id = Str(j, "inputId");
    auto it = j.find("questions");
    if (it == j.end() || !it->is_array() || it->empty())
      return Fail(Errc::invalid_argument, where + ": a question step needs a non-empty \"questions\" array");
    Json ev = {{"type", "input.requested"}, {"questions", *it}};
    auto decoded = DecodeEvent(ev.dump());
    if (!decoded) return Fail(Errc::invalid_argument, where + ": questions: " + decoded.error().message);
    s.questions = decoded->questions;
    // Question ids as the real runtime's providers make them: question-1, question-2, ...
    for (std::size_t i = 0; i < s.questions.size(); ++i)
      if (TrimUnicodeSpace(s.questions[i].id).empty()) s.questions[i].id = "question-" + std::to_string(i + 1);
    for (std::size_t i = 0; i < s.questions.size(); ++i)
      for (std::size_t k = 0; k < i; ++k)
        if (s.questions[i].id == s.questions[k].id)
          return Fail(Errc::invalid_argument, where + ": question id \"" + s.questions[i].id + "\" is repeated");
  } else if (type == "error") s.kind = StepKind::error;
  else if (type == "fail") s.kind = StepKind::fail;
  else if (type == "sleep") {
    s.kind = StepKind::sleep;
    auto it = j.find("ms");
    if (it == j.end() || !it->is_number_integer() || it->get<std::int64_t>() < 0)
      return Fail(Errc::invalid_argument, where + ": a sleep step needs \"ms\" (a non-negative integer)");
    s.ms = std::chrono::milliseconds(it->get<std::int64_t>());
  } else if (type == "status" || type == "usage") {
    s.kind = type == "status" ? StepKind::status : StepKind::usage;
    const char* key = type == "status" ? "runtime" : "usage";
    auto it = j.find(key);
    if (it == j.end() || !it->is_object())
      return Fail(Errc::invalid_argument, where + ": a " + type + " step needs an object \"" + key + "\"");
    s.json = *it;
  } else if (type == "diff") {
    s.kind = StepKind::diff;
    auto it = j.find("diff");
    if (it == j.end()) return Fail(Errc::invalid_argument, where + ": a diff step needs \"diff\"");
    s.json = *it;
  } else if (type == "burst") {
    s.kind = StepKind::burst;
    auto it = j.find("count");
    if (it == j.end() || !it->is_number_integer() || it->get<std::int64_t>() < 0)
      return Fail(Errc::invalid_argument, where + ": a burst step needs \"count\" (a non-negative integer)");
    s.count = it->get<std::int64_t>();
    if (s.text.empty()) s.text = "x";
  } else if (type == "stall") s.kind = StepKind::stall;
  else
    return Fail(Errc::invalid_argument, where + ": unknown step type \"" + type +
                                            "\" (delta, message, tool.start, tool.delta, tool.complete, question, "
                                            "error, fail, sleep, status, usage, diff, burst, stall)");
  return s;
}

// Runs a list of steps, one per I/O-thread handler.
class StepRun : public TurnRun, public std::enable_shared_from_this<StepRun> {
 public:
  StepRun(std::shared_ptr<TurnHost> host, TurnInput input, std::vector<Step> steps)
      : host_(std::move(host)), input_(std::move(input)), steps_(std::move(steps)), timer_(host_->io()) {}

  void Start() override { Post(); }

  void Interrupt() override {
    interrupted_ = true;
    if (stalled_ || killed_) return;
    // Wake it wherever it waits (a sleep, a question, a pause): the next step ends the turn. A second
    // Next() (from the cancelled timer or a resume) then finds the host dead and does nothing.
    timer_.cancel();
    waiting_input_ = false;
    Post();
  }

  void Kill() override {
    killed_ = true;
    timer_.cancel();
  }

  void InputResolved(const std::string& input_id, bool cancelled,
                     const std::map<std::string, std::vector<std::string>>& answers) override {
    if (!waiting_input_ || input_id != input_id_ || killed_) return;
    waiting_input_ = false;
    std::string text;
    if (cancelled) {
      text = "The question was declined.";
    } else {
      text = "Answers:";
      for (const auto& [qid, vals] : answers) {
        text += " " + qid + "=";
        for (std::size_t i = 0; i < vals.size(); ++i) text += (i ? "," : "") + vals[i];
      }
    }
    Emit(event_type::kAssistantMessage, [&](Event& e) { e.text = text; });
    Post();
  }

 private:
  void Post() {
    asio::post(host_->io(), [self = shared_from_this()] { self->Next(); });
  }

  std::string X(const std::string& s) const { return expand_ ? Expand(s, input_) : s; }

  template <typename Fill>
  void Emit(std::string_view type, Fill fill) {
    Event e;
    e.type = std::string(type);
    fill(e);
    host_->Emit(std::move(e));
  }

  void Next() {
    if (killed_ || stalled_ || waiting_input_) return;
    if (interrupted_) {
      host_->Done(std::string(status_value::kInterrupted), {});
      return;
    }
    if (host_->Paused()) {
      host_->WhenResumed([self = shared_from_this()] { self->Next(); });
      return;
    }
    if (index_ >= steps_.size()) {
      host_->Done(std::string(status_value::kCompleted), {});
      return;
    }
    const Step& s = steps_[index_];
    switch (s.kind) {
      case StepKind::delta:
        Emit(event_type::kAssistantDelta, [&](Event& e) { e.text = X(s.text); });
        break;
      case StepKind::message:
        Emit(event_type::kAssistantMessage, [&](Event& e) { e.text = X(s.text); });
        break;
      case StepKind::tool_start:
        Emit(event_type::kToolStarted, [&](Event& e) {
          e.tool_id = s.id;
          e.tool_name = s.name;
          e.text = X(s.text);
          e.status = std::string(status_value::kRunning);
        });
        break;
      case StepKind::tool_delta:
        Emit(event_type::kToolDelta, [&](Event& e) {
          e.tool_id = s.id;
          e.output = X(s.output);
        });
        break;
      case StepKind::tool_complete:
        Emit(event_type::kToolCompleted, [&](Event& e) {
          e.tool_id = s.id;
          e.tool_name = s.name;
          e.output = X(s.output);
          e.status = s.status;
        });
        break;
      case StepKind::question: {
        ++index_;
        waiting_input_ = true;
        input_id_ = host_->Ask(s.id, s.questions);  // an empty id: the runtime picks input-N
        return;  // InputResolved (or Interrupt) continues
      }
      case StepKind::error:
        Emit(event_type::kError, [&](Event& e) {
          e.text = X(s.text);
          e.status = std::string(status_value::kFailed);
        });
        break;
      case StepKind::fail:
        host_->Done(std::string(status_value::kFailed), X(s.text));
        return;
      case StepKind::sleep: {
        ++index_;
        timer_.expires_after(s.ms);
        timer_.async_wait([self = shared_from_this()](const asio::error_code&) { self->Next(); });
        return;
      }
      case StepKind::status:
      case StepKind::usage: {
        Json ev = {{"type", "runtime.status"}};
        ev["runtime"] = s.kind == StepKind::status ? s.json : Json{{"usage", s.json}};
        auto decoded = DecodeEvent(ev.dump());
        if (decoded) {
          decoded->line.clear();
          host_->Emit(std::move(*decoded));
        }
        break;
      }
      case StepKind::diff:
        Emit(event_type::kFileDiff, [&](Event& e) { e.diff = s.json; });
        break;
      case StepKind::burst: {
        if (paced_ && host_->Backlog() > host_->BacklogBound() / 2) {
          // flood:N measures what the fan-out sustains, not how fast it drops readers: wait for the
          // slowest subscriber to drain below half its bound.
          timer_.expires_after(kFloodPacing);
          timer_.async_wait([self = shared_from_this()](const asio::error_code&) { self->Next(); });
          return;
        }
        std::int64_t n = std::min(kBurstSlice, s.count - burst_done_);
        for (std::int64_t i = 0; i < n; ++i) Emit(event_type::kAssistantDelta, [&](Event& e) { e.text = s.text; });
        burst_done_ += n;
        if (burst_done_ < s.count) {
          Post();
          return;
        }
        burst_done_ = 0;
        break;
      }
      case StepKind::stall:
        // Ignores interrupts on purpose: the runtime's interrupt timeout must kill it.
        stalled_ = true;
        return;
    }
    ++index_;
    if (pace_.count() > 0 && s.kind == StepKind::delta) {
      timer_.expires_after(pace_);
      timer_.async_wait([self = shared_from_this()](const asio::error_code&) { self->Next(); });
    } else {
      Post();
    }
  }

 public:
  std::chrono::milliseconds pace_{0};  // pause after each delta (the echo provider's pacing)
  bool expand_ = true;                 // expand {prompt}/{turn}/{n} in step texts (scripts only)
  bool paced_ = false;                 // bursts wait for the slowest subscriber (flood:N only)

 private:
  std::shared_ptr<TurnHost> host_;
  TurnInput input_;
  std::vector<Step> steps_;
  asio::steady_timer timer_;
  std::size_t index_ = 0;
  std::int64_t burst_done_ = 0;
  bool interrupted_ = false;
  bool killed_ = false;
  bool stalled_ = false;
  bool waiting_input_ = false;
  std::string input_id_;
};

class EchoProvider : public Provider {
 public:
  std::string Kind() const override { return "echo"; }
  std::shared_ptr<TurnRun> NewRun(std::shared_ptr<TurnHost> host, TurnInput input) override {
    std::string reply = "echo #" + std::to_string(input.number) + ": " + input.text;
    std::vector<Step> steps;
    for (auto& piece : SplitUtf8(reply, 3)) {
      Step s;
      s.kind = StepKind::delta;
      s.text = std::move(piece);
      steps.push_back(std::move(s));
    }
    Step m;
    m.kind = StepKind::message;
    m.text = reply;
    steps.push_back(std::move(m));
    auto delay = input.echo_delay;
    auto run = std::make_shared<StepRun>(std::move(host), std::move(input), std::move(steps));
    run->pace_ = delay;
    run->expand_ = false;  // the prompt is data, not a template
    return run;
  }
};

class ScriptProvider : public Provider {
 public:
  std::string Kind() const override { return "script"; }
  std::shared_ptr<TurnRun> NewRun(std::shared_ptr<TurnHost> host, TurnInput input) override {
    std::size_t n = turns_.size();
    std::size_t k = static_cast<std::size_t>(std::max<std::int64_t>(input.number, 1)) - 1;
    std::size_t pick = cycle_ ? k % n : std::min(k, n - 1);
    return std::make_shared<StepRun>(std::move(host), std::move(input), turns_[pick]);
  }
  std::vector<std::vector<Step>> turns_;
  bool cycle_ = false;
};

class FloodProvider : public Provider {
 public:
  std::string Kind() const override { return "flood"; }
  std::shared_ptr<TurnRun> NewRun(std::shared_ptr<TurnHost> host, TurnInput input) override {
    std::vector<Step> steps(2);
    steps[0].kind = StepKind::burst;
    steps[0].count = count_;
    steps[0].text = "x";
    steps[1].kind = StepKind::message;
    steps[1].text = "flood of " + std::to_string(count_) + " deltas done";
    auto run = std::make_shared<StepRun>(std::move(host), std::move(input), std::move(steps));
    run->paced_ = true;
    return run;
  }
  std::int64_t count_ = 0;
};

// One process per turn: `/bin/sh -c CMD` in its own process group, prompt on stdin (a memfd), stdout
// streamed line by line, stderr's tail kept for the failure message.
class CommandRun : public TurnRun, public std::enable_shared_from_this<CommandRun> {
 public:
  CommandRun(std::shared_ptr<TurnHost> host, TurnInput input, std::string command)
      : host_(std::move(host)),
        input_(std::move(input)),
        command_(std::move(command)),
        out_(host_->io()),
        err_(host_->io()),
        reap_timer_(host_->io()) {}

  ~CommandRun() override { KillProcess(); }

  void Start() override {
    if (auto st = Spawn(); !st) {
      Finish(std::string(status_value::kFailed), st.error().message);
      return;
    }
    ReadOut();
    ReadErr();
  }

  void Interrupt() override {
    interrupted_ = true;
    if (pid_ > 0) ::kill(-pid_, SIGTERM);
  }

  void Kill() override {
    killed_ = true;
    KillProcess();
  }

  void InputResolved(const std::string&, bool, const std::map<std::string, std::vector<std::string>>&) override {}

 private:
  Status Spawn() {
    int stdin_fd = ::memfd_create("sessionturn-prompt", MFD_CLOEXEC);
    if (stdin_fd < 0) return Fail(Errc::io_error, std::string("cannot create the prompt file: ") + std::strerror(errno));
    std::size_t off = 0;
    while (off < input_.text.size()) {
      ssize_t n = ::write(stdin_fd, input_.text.data() + off, input_.text.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      off += static_cast<std::size_t>(n);
    }
    ::lseek(stdin_fd, 0, SEEK_SET);
    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
      ::close(stdin_fd);
      return Fail(Errc::io_error, std::string("pipe: ") + std::strerror(errno));
    }
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
      ::close(stdin_fd);
      ::close(out_pipe[0]);
      ::close(out_pipe[1]);
      return Fail(Errc::io_error, std::string("pipe: ") + std::strerror(errno));
    }
    std::vector<std::string> env;
    for (char** e = environ; e && *e; ++e) {
      std::string_view kv(*e);
      if (kv.starts_with("SESSIONTURN_SESSION=") || kv.starts_with("SESSIONTURN_TURN=") ||
          kv.starts_with("SESSIONTURN_STATE_DIR="))
        continue;
      env.emplace_back(kv);
    }
    env.push_back("SESSIONTURN_SESSION=" + input_.session_name);
    env.push_back("SESSIONTURN_TURN=" + input_.turn_id);
    env.push_back("SESSIONTURN_STATE_DIR=" + input_.state_dir);
    auto pid = SpawnInGroup({"/bin/sh", "-c", command_}, stdin_fd, out_pipe[1], err_pipe[1], env, input_.working_dir);
    ::close(stdin_fd);
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    if (!pid) {
      ::close(out_pipe[0]);
      ::close(err_pipe[0]);
      return Fail(pid.error());
    }
    pid_ = *pid;
    out_.assign(out_pipe[0]);
    err_.assign(err_pipe[0]);
    return {};
  }

  void ReadOut() {
    if (killed_) return;
    if (host_->Paused()) {
      host_->WhenResumed([self = shared_from_this()] { self->ReadOut(); });
      return;
    }
    out_.async_read_some(asio::buffer(out_buf_), [self = shared_from_this()](const asio::error_code& ec, std::size_t n) {
      if (self->killed_) return;
      if (n > 0) {
        self->framer_.Feed(std::string_view(self->out_buf_.data(), n), [&](std::string_view line) { self->Line(line); });
      }
      if (ec) {
        self->out_done_ = true;
        self->MaybeReap();
        return;
      }
      self->ReadOut();
    });
  }

  void ReadErr() {
    err_.async_read_some(asio::buffer(err_buf_), [self = shared_from_this()](const asio::error_code& ec, std::size_t n) {
      if (self->killed_) return;
      self->stderr_tail_.append(self->err_buf_.data(), n);
      if (self->stderr_tail_.size() > kStderrTailBytes)
        self->stderr_tail_.erase(0, self->stderr_tail_.size() - kStderrTailBytes);
      if (ec) {
        self->err_done_ = true;
        self->MaybeReap();
        return;
      }
      self->ReadErr();
    });
  }

  void Line(std::string_view line) {
    std::string text(line);
    text.push_back('\n');
    collected_ += text;
    Event e;
    e.type = std::string(event_type::kAssistantDelta);
    e.text = std::move(text);
    host_->Emit(std::move(e));
  }

  void MaybeReap() {
    if (!out_done_ || !err_done_ || pid_ <= 0) return;
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == 0) {
      reap_timer_.expires_after(kReapPoll);
      reap_timer_.async_wait([self = shared_from_this()](const asio::error_code&) {
        if (!self->killed_) self->MaybeReap();
      });
      return;
    }
    pid_ = 0;
    // A partial last line (no trailing newline) still counts.
    if (framer_.Buffered() > 0) framer_.Feed("\n", [&](std::string_view line) { Line(line); });
    if (interrupted_) {
      Finish(std::string(status_value::kInterrupted), {});
      return;
    }
    bool ok = r > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    std::string why;
    if (!ok) {
      std::string tail(TrimUnicodeSpace(stderr_tail_));
      if (r < 0) why = "command could not be waited for";
      else if (WIFEXITED(status)) why = "command exited with status " + std::to_string(WEXITSTATUS(status));
      else if (WIFSIGNALED(status)) why = "command was killed by signal " + std::to_string(WTERMSIG(status));
      if (!tail.empty()) why = tail;
    }
    Finish(ok ? std::string(status_value::kCompleted) : std::string(status_value::kFailed), why);
  }

  void Finish(std::string status, std::string why) {
    std::string text(TrimUnicodeSpace(collected_));
    if (status == status_value::kCompleted && !text.empty()) {
      Event e;
      e.type = std::string(event_type::kAssistantMessage);
      e.text = text;
      host_->Emit(std::move(e));
    }
    host_->Done(std::move(status), std::move(why));
  }

  void KillProcess() {
    reap_timer_.cancel();
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = 0;
    }
    asio::error_code ignored;
    out_.close(ignored);
    err_.close(ignored);
  }

  std::shared_ptr<TurnHost> host_;
  TurnInput input_;
  std::string command_;
  asio::posix::stream_descriptor out_;
  asio::posix::stream_descriptor err_;
  asio::steady_timer reap_timer_;
  std::array<char, 16384> out_buf_{};
  std::array<char, 4096> err_buf_{};
  LineFramer framer_{kMaxLineBytes};
  std::string collected_;
  std::string stderr_tail_;
  pid_t pid_ = 0;
  bool out_done_ = false;
  bool err_done_ = false;
  bool interrupted_ = false;
  bool killed_ = false;
};

class CommandProvider : public Provider {
 public:
  std::string Kind() const override { return "command"; }
  std::shared_ptr<TurnRun> NewRun(std::shared_ptr<TurnHost> host, TurnInput input) override {
    return std::make_shared<CommandRun>(std::move(host), std::move(input), command_);
  }
  std::string command_;
};

Result<std::shared_ptr<Provider>> ParseScript(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Fail(Errc::invalid_argument, "cannot read script " + path + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  Json j = Json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return Fail(Errc::invalid_argument, "script " + path + " is not valid JSON");
  if (!j.is_object() || !j.contains("turns") || !j["turns"].is_array() || j["turns"].empty())
    return Fail(Errc::invalid_argument, "script " + path + " needs an object with a non-empty \"turns\" array");
  auto p = std::make_shared<ScriptProvider>();
  if (auto it = j.find("repeat"); it != j.end()) {
    if (*it == "cycle") p->cycle_ = true;
    else if (*it != "last")
      return Fail(Errc::invalid_argument, "script " + path + ": \"repeat\" must be \"last\" or \"cycle\"");
  }
  std::size_t t = 0;
  for (const auto& turn : j["turns"]) {
    ++t;
    const Json* steps = &turn;
    if (turn.is_object() && turn.contains("steps")) steps = &turn["steps"];
    if (!steps->is_array())
      return Fail(Errc::invalid_argument, "script " + path + ": turn " + std::to_string(t) + " must be an array of steps");
    std::vector<Step> out;
    std::size_t k = 0;
    for (const auto& step : *steps) {
      ++k;
      auto s = ParseStep(step, "script " + path + ": turn " + std::to_string(t) + " step " + std::to_string(k));
      if (!s) return Fail(s.error());
      out.push_back(std::move(*s));
    }
    p->turns_.push_back(std::move(out));
  }
  return std::shared_ptr<Provider>(std::move(p));
}

}  // namespace

Result<std::shared_ptr<Provider>> Provider::Parse(const std::string& spec, const ProviderOptions& options) {
  if (spec == "claude-code") return NewClaudeProvider({}, options);
  if (spec.rfind("claude-code:", 0) == 0) return NewClaudeProvider(std::string_view(spec).substr(12), options);
  if (spec == "echo") return std::shared_ptr<Provider>(std::make_shared<EchoProvider>());
  if (spec.rfind("script:", 0) == 0) {
    std::string path = spec.substr(7);
    if (path.empty()) return Fail(Errc::invalid_argument, "provider \"script:\" needs a file: script:FILE");
    return ParseScript(path);
  }
  if (spec.rfind("command:", 0) == 0) {
    auto p = std::make_shared<CommandProvider>();
    p->command_ = spec.substr(8);
    if (TrimUnicodeSpace(p->command_).empty())
      return Fail(Errc::invalid_argument, "provider \"command:\" needs a command: command:CMD");
    return std::shared_ptr<Provider>(std::move(p));
  }
  if (spec.rfind("flood:", 0) == 0) {
    auto p = std::make_shared<FloodProvider>();
    try {
      std::size_t used = 0;
      p->count_ = std::stoll(spec.substr(6), &used);
      if (used != spec.size() - 6 || p->count_ < 0) throw std::invalid_argument("bad");
    } catch (const std::exception&) {
      return Fail(Errc::invalid_argument, "provider \"" + spec + "\": flood:N needs a non-negative integer N");
    }
    return std::shared_ptr<Provider>(std::move(p));
  }
  return Fail(Errc::invalid_argument,
              "unknown provider \"" + spec + "\": use echo, script:FILE, command:CMD, flood:N or claude-code[:OPTIONS]");
}

}  // namespace sessionturn::runtime
