// The claude-code provider: one long-lived Claude Code process per Session in bidirectional
// stream-json mode, as kelos-session-runtime runs it (internal/sessionruntime/claude.go). Turns are
// written to its stdin one at a time; its stdout is decoded by claude::StreamDecoder; its questions
// and permission requests become input.requested; an interrupt is a control request. The
// conversation's id is kept in the state directory (claude-session-id) from the moment the agent
// names it, so a crash, an interrupt that had to kill it, a runtime restart or an idle suspension
// all continue with --resume.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

#include <asio.hpp>

#include "chat_secrets.hpp"
#include "files.hpp"
#include "runtime/claude_wire.hpp"
#include "runtime/provider.hpp"
#include "runtime/text.hpp"
#include "sigpipe.hpp"

extern char** environ;

namespace sessionturn::runtime {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kDefaultBinary = "claude";
constexpr std::string_view kSessionIdFile = "claude-session-id";
constexpr std::size_t kStderrTailLines = 12;    // kept for a failure message
constexpr std::size_t kStderrLineBytes = 1024;  // each at most
constexpr std::chrono::milliseconds kReapPoll{10};
// After stdout ends: how long stderr may still bring the last words, and how long the agent may take
// to exit before it is killed.
constexpr std::chrono::milliseconds kStderrGrace{500};
constexpr std::chrono::milliseconds kExitGrace{2000};

using Answers = std::map<std::string, std::vector<std::string>>;

// The binary, resolved once at start so a missing one is an error then, not at the first turn.
Result<std::string> ResolveBinary(const std::string& configured) {
  const std::string name = configured.empty() ? std::string(kDefaultBinary) : configured;
  if (name.find('/') != std::string::npos) {
    if (files::IsExecutableFile(name)) return fs::absolute(name).string();
    return Fail(Errc::invalid_argument, "provider \"claude-code\": the agent binary \"" + name +
                                            "\" is not an executable file (--agent-bin)");
  }
  if (auto found = files::FindOnPath(name)) return fs::absolute(*found).string();
  return Fail(Errc::invalid_argument, "provider \"claude-code\": \"" + name +
                                          "\" was not found on PATH (install Claude Code, or name the binary "
                                          "with --agent-bin PATH)");
}

// A conversation id as the agent makes them (a UUID): anything else in the state file is not passed to
// --resume (a value starting with '-' would be read as a flag).
bool IsUuid(std::string_view s) {
  if (s.size() != 36) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!std::isxdigit(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return true;
}

std::string ReadTrimmed(const std::string& path) {
  std::ifstream in(path);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return std::string(TrimUnicodeSpace(s));
}

class ClaudeProvider;

// One turn: the provider does the work; the run is what the runtime holds.
class ClaudeRun final : public TurnRun, public std::enable_shared_from_this<ClaudeRun> {
 public:
  ClaudeRun(std::weak_ptr<ClaudeProvider> provider, std::shared_ptr<TurnHost> host, TurnInput input)
      : host(std::move(host)), input(std::move(input)), provider_(std::move(provider)) {}
  void Start() override;
  void Interrupt() override;
  void Kill() override;
  void InputResolved(const std::string& input_id, bool cancelled, const Answers& answers) override;

  std::shared_ptr<TurnHost> host;
  TurnInput input;
  bool interrupted = false;

 private:
  std::weak_ptr<ClaudeProvider> provider_;  // the provider holds the active run, not the other way round
};

// The running agent process.
struct Agent {
  explicit Agent(asio::io_context& io) : in(io), out(io), err(io), timer(io) {}
  pid_t pid = 0;   // 0 once reaped
  pid_t pgid = 0;  // its process group (tools it started), killed whatever became of the agent
  bool reap_pending = false;
  asio::posix::stream_descriptor in, out, err;
  asio::steady_timer timer;
  std::array<char, 65536> out_buf{};
  std::array<char, 4096> err_buf{};
  LineFramer framer{kMaxLineBytes};
  std::deque<std::string> writes;
  bool writing = false;
  std::deque<std::string> stderr_lines;
  std::string stderr_partial;
  bool out_done = false;
  bool err_done = false;
  bool saw_line = false;  // it wrote at least one line of its protocol
  bool resumed = false;   // started with --resume
  std::chrono::steady_clock::time_point out_done_at{};
};

// A question the agent asked (AskUserQuestion or a tool permission), by input id.
struct PendingRequest {
  std::string request_id;
  bool permission = false;
  std::string tool;
  Json input;
  std::vector<InputQuestion> questions;
};

class ClaudeProvider final : public Provider, public std::enable_shared_from_this<ClaudeProvider> {
 public:
  ClaudeProvider(claude::Spec spec, std::string binary, ProviderOptions options)
      : spec_(std::move(spec)), binary_(std::move(binary)), log_(std::move(options.log)) {}
  // The runtime calls Stop first, on its I/O thread; this only makes sure no process outlives us.
  ~ClaudeProvider() override {
    if (agent_ && agent_->pgid > 0) ::kill(-agent_->pgid, SIGKILL);
    if (agent_ && agent_->pid > 0) {
      ::kill(agent_->pid, SIGKILL);
      Wait(agent_->pid);
    }
  }

  std::string Kind() const override { return "claude-code"; }
  void Describe(RuntimeStatus& status) const override {
    status.model = spec_.model.empty() ? Kind() : spec_.model;
    if (!spec_.effort.empty()) status.extra["effort"] = spec_.effort;
  }
  std::shared_ptr<TurnRun> NewRun(std::shared_ptr<TurnHost> host, TurnInput input) override {
    return std::make_shared<ClaudeRun>(weak_from_this(), std::move(host), std::move(input));
  }
  void Stop(bool graceful) override;

  void Begin(const std::shared_ptr<ClaudeRun>& run);
  void InterruptTurn(ClaudeRun& run);
  void KillTurn(ClaudeRun& run);
  void Answer(ClaudeRun& run, const std::string& input_id, bool cancelled, const Answers& answers);

 private:
  void Log(LogLevel level, const std::string& message) const {
    if (log_) log_(level, message);
  }
  static void Wait(pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  bool Active(const ClaudeRun& run) const { return active_.get() == &run; }

  Status Spawn(const TurnInput& input);
  void LoadState(const std::string& state_dir);
  void Write(std::string line);
  void WriteNext(const std::shared_ptr<Agent>& agent);
  void ReadOut(const std::shared_ptr<Agent>& agent);
  void ReadErr(const std::shared_ptr<Agent>& agent);
  void OnLine(const std::shared_ptr<Agent>& agent, std::string_view line);
  void OnControlRequest(const claude::ControlRequest& cr);
  void PersistSession();
  void Finish(std::string status, std::string error);
  void DenyPending(const std::string& message);
  void MaybeReap(const std::shared_ptr<Agent>& agent);
  void Exited(const std::shared_ptr<Agent>& agent, int wait_status);
  void ProtocolError(const std::string& what);
  void KillAgent();
  std::string StderrTail(const Agent& agent) const;

  claude::Spec spec_;
  std::string binary_;
  std::function<void(LogLevel, const std::string&)> log_;
  std::shared_ptr<Agent> agent_;
  std::shared_ptr<ClaudeRun> active_;
  claude::StreamDecoder decoder_;
  std::map<std::string, PendingRequest> pending_;  // by input id
  std::int64_t next_control_ = 0;
  // The conversation: known once read from the state directory or named by the agent.
  std::string state_dir_;
  bool state_loaded_ = false;
  std::string session_id_;
  bool session_known_ = false;
  std::string persisted_id_;
  std::set<std::string> allowed_tools_;  // "Allow for this Session", for the runtime's life
};

// ---- turns -----------------------------------------------------------------------------------------

void ClaudeProvider::Begin(const std::shared_ptr<ClaudeRun>& run) {
  active_ = run;
  decoder_.BeginTurn();
  pending_.clear();
  if (agent_ && (agent_->out_done || !agent_->in.is_open())) {
    // It is exiting (its output ended, the reaping has not finished): a new one takes this turn.
    Log(LogLevel::warning, "claude-code: the agent exited between turns; starting it again");
    KillAgent();
  }
  if (agent_) agent_->stderr_lines.clear();  // a failure of this turn shows what it wrote since
  if (!agent_) {
    if (auto st = Spawn(run->input); !st) {
      active_.reset();
      asio::post(run->host->io(), [host = run->host, why = st.error().message] {
        host->Done(std::string(status_value::kFailed), why);
      });
      return;
    }
  }
  Write(claude::UserMessageLine(run->input.text, session_id_));
}

void ClaudeProvider::InterruptTurn(ClaudeRun& run) {
  if (!Active(run) || run.interrupted) return;
  run.interrupted = true;
  // A question the agent waits on would hold the turn open: it is declined first (so the agent reads the
  // answer before the interrupt), and the journal says so now: nobody can answer what the agent was told
  // is gone.
  if (!pending_.empty()) {
    DenyPending("User cancelled the question");
    run.host->CancelInputs();
  }
  Write(claude::InterruptLine("sessionturn-" + std::to_string(++next_control_)));
}

void ClaudeProvider::KillTurn(ClaudeRun& run) {
  if (!Active(run)) return;
  active_.reset();
  pending_.clear();
  // Hung or abandoned mid-turn: the process goes, the next turn resumes the conversation.
  KillAgent();
}

void ClaudeProvider::Answer(ClaudeRun& run, const std::string& input_id, bool cancelled, const Answers& answers) {
  if (!Active(run)) return;
  auto it = pending_.find(input_id);
  if (it == pending_.end()) return;
  PendingRequest p = std::move(it->second);
  pending_.erase(it);
  const std::string& sid = session_id_;
  if (cancelled) {
    Write(claude::ControlSuccessLine(
        p.request_id,
        claude::DenyResponse(p.permission ? "The user declined the permission request" : "User cancelled the question"),
        sid));
  } else if (!p.permission) {
    Write(claude::ControlSuccessLine(p.request_id, claude::AskAllowResponse(p.input, p.questions, answers), sid));
  } else {
    claude::PermissionDecision d = claude::DecidePermission(answers);
    if (!d.allow) {
      Write(claude::ControlSuccessLine(p.request_id, claude::DenyResponse(d.message), sid));
      return;
    }
    // Kept in memory only, like the agent's own session rules: a file next to the workspace could be
    // written by the agent itself (an allowed Write would turn into an allowed Bash after a restart).
    if (d.remember) allowed_tools_.insert(p.tool);
    Write(claude::ControlSuccessLine(p.request_id, claude::PermissionAllowResponse(p.input, d.remember ? p.tool : ""),
                                     sid));
  }
}

void ClaudeProvider::Finish(std::string status, std::string error) {
  auto run = std::move(active_);
  active_.reset();
  DenyPending("The turn ended");
  if (!run) return;
  if (run->interrupted) status = std::string(status_value::kInterrupted), error.clear();
  run->host->Done(std::move(status), std::move(error));
}

void ClaudeProvider::DenyPending(const std::string& message) {
  auto pending = std::move(pending_);
  pending_.clear();
  for (const auto& [id, p] : pending)
    Write(claude::ControlSuccessLine(p.request_id, claude::DenyResponse(message), session_id_));
}

// ---- the process -----------------------------------------------------------------------------------

void ClaudeProvider::LoadState(const std::string& state_dir) {
  if (state_loaded_ && state_dir == state_dir_) return;
  state_loaded_ = true;
  state_dir_ = state_dir;
  if (state_dir_.empty()) return;
  const std::string path = state_dir_ + "/" + std::string(kSessionIdFile);
  if (std::string id = ReadTrimmed(path); IsUuid(id)) {
    session_id_ = persisted_id_ = id;
    session_known_ = true;
  } else if (!id.empty()) {
    Log(LogLevel::warning, "claude-code: " + path + " does not hold a conversation id: a new conversation starts");
  }
}

Status ClaudeProvider::Spawn(const TurnInput& input) {
  LoadState(input.state_dir);
  const bool resume = session_known_;
  if (!resume) session_id_ = NewUuid();  // a conversation the agent never named is not resumable
  std::vector<std::string> argv = {binary_};
  for (auto& a : claude::CommandArgs(spec_, session_id_, resume)) argv.push_back(std::move(a));
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0) return Fail(Errc::io_error, std::string("pipe: ") + std::strerror(errno));
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    ::close(in_pipe[0]), ::close(in_pipe[1]);
    return Fail(Errc::io_error, std::string("pipe: ") + std::strerror(errno));
  }
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1]}) ::close(fd);
    return Fail(Errc::io_error, std::string("pipe: ") + std::strerror(errno));
  }
  std::vector<std::string> env = WithoutChatSecrets(environ);
  auto pid = SpawnInGroup(argv, in_pipe[0], out_pipe[1], err_pipe[1], env, input.working_dir);
  for (int fd : {in_pipe[0], out_pipe[1], err_pipe[1]}) ::close(fd);
  if (!pid) {
    for (int fd : {in_pipe[1], out_pipe[0], err_pipe[0]}) ::close(fd);
    return Fail(Errc::io_error, "claude-code: " + pid.error().message);
  }
  auto agent = std::make_shared<Agent>(active_->host->io());
  agent->pid = agent->pgid = *pid;
  agent->resumed = resume;
  asio::error_code ec;
  agent->in.assign(in_pipe[1], ec);
  if (!ec) agent->out.assign(out_pipe[0], ec);
  if (!ec) agent->err.assign(err_pipe[0], ec);
  if (ec) {
    for (int fd : {in_pipe[1], out_pipe[0], err_pipe[0]}) ::close(fd);  // close() of an unassigned one is ours
    ::kill(-agent->pgid, SIGKILL);
    Wait(agent->pid);
    return Fail(Errc::io_error, "claude-code: cannot watch the agent's pipes: " + ec.message());
  }
  agent_ = agent;
  decoder_.ForgetSession();  // the new process names its conversation afresh
  decoder_.BeginTurn();
  Log(LogLevel::info, "claude-code: started " + binary_ + " (pid " + std::to_string(*pid) + ", " +
                          (resume ? "resuming conversation " : "new conversation ") + session_id_ + ")");
  ReadOut(agent);
  ReadErr(agent);
  return {};
}

void ClaudeProvider::Write(std::string line) {
  if (!agent_ || !agent_->in.is_open()) return;  // gone: its exit ends the turn
  agent_->writes.push_back(std::move(line));
  if (!agent_->writing) WriteNext(agent_);
}

void ClaudeProvider::WriteNext(const std::shared_ptr<Agent>& agent) {
  if (agent->writes.empty()) {
    agent->writing = false;
    return;
  }
  agent->writing = true;
  asio::async_write(agent->in, asio::buffer(agent->writes.front()),
                    [self = weak_from_this(), agent](const asio::error_code& ec, std::size_t) {
                      auto p = self.lock();
                      if (!p || p->agent_ != agent) return;
                      agent->writes.pop_front();
                      if (ec) {
                        // Its stdin closed: it is exiting, and its exit ends the turn with its stderr.
                        agent->writes.clear();
                        agent->writing = false;
                        p->Log(LogLevel::warning, "claude-code: writing to the agent failed: " + ec.message());
                        return;
                      }
                      p->WriteNext(agent);
                    });
}

void ClaudeProvider::ReadOut(const std::shared_ptr<Agent>& agent) {
  if (active_ && active_->host->Paused()) {
    active_->host->WhenResumed([self = weak_from_this(), agent] {
      if (auto p = self.lock(); p && p->agent_ == agent) p->ReadOut(agent);
    });
    return;
  }
  agent->out.async_read_some(asio::buffer(agent->out_buf), [self = weak_from_this(), agent](
                                                                const asio::error_code& ec, std::size_t n) {
    auto p = self.lock();
    if (!p || p->agent_ != agent) return;
    if (n > 0) {
      agent->framer.Feed(
          std::string_view(agent->out_buf.data(), n),
          [&](std::string_view line) {
            if (p->agent_ == agent) p->OnLine(agent, line);
          },
          [&](std::size_t skipped) {
            if (p->agent_ == agent)
              p->ProtocolError("a line longer than " + std::to_string(kMaxLineBytes) + " bytes (" +
                               std::to_string(skipped) + " skipped)");
          });
    }
    if (p->agent_ != agent) return;  // a line ended it
    if (ec) {
      agent->out_done = true;
      agent->out_done_at = std::chrono::steady_clock::now();
      p->MaybeReap(agent);
      return;
    }
    p->ReadOut(agent);
  });
}

void ClaudeProvider::ReadErr(const std::shared_ptr<Agent>& agent) {
  agent->err.async_read_some(asio::buffer(agent->err_buf), [self = weak_from_this(), agent](
                                                                const asio::error_code& ec, std::size_t n) {
    auto p = self.lock();
    if (!p || p->agent_ != agent) return;
    agent->stderr_partial.append(agent->err_buf.data(), n);
    std::size_t nl;
    while ((nl = agent->stderr_partial.find('\n')) != std::string::npos || (ec && !agent->stderr_partial.empty())) {
      std::string line = agent->stderr_partial.substr(0, nl);
      agent->stderr_partial.erase(0, nl == std::string::npos ? std::string::npos : nl + 1);
      if (TrimUnicodeSpace(line).empty()) continue;
      if (line.size() > kStderrLineBytes)
        line.resize(ValidUtf8PrefixLen(std::string_view(line).substr(0, kStderrLineBytes)));
      p->Log(LogLevel::info, "claude-code stderr: " + line);
      agent->stderr_lines.push_back(std::move(line));
      if (agent->stderr_lines.size() > kStderrTailLines) agent->stderr_lines.pop_front();
    }
    if (agent->stderr_partial.size() > kStderrLineBytes) agent->stderr_partial.erase(kStderrLineBytes);
    if (ec) {
      agent->err_done = true;
      p->MaybeReap(agent);
      return;
    }
    p->ReadErr(agent);
  });
}

std::string ClaudeProvider::StderrTail(const Agent& agent) const {
  std::string out;
  for (const auto& l : agent.stderr_lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

void ClaudeProvider::OnLine(const std::shared_ptr<Agent>& agent, std::string_view line) {
  claude::LineOutcome o = decoder_.Feed(line);
  if (!o.protocol_error.empty()) return ProtocolError(o.protocol_error);
  agent->saw_line = true;
  PersistSession();
  if (!o.ignored.empty()) Log(LogLevel::debug, "claude-code: ignored " + o.ignored);
  if (o.control_response_id) {
    if (!o.control_response_error.empty())
      Log(LogLevel::warning, "claude-code: the agent refused request " + *o.control_response_id + ": " +
                                 o.control_response_error);
    return;
  }
  if (o.control_request) return OnControlRequest(*o.control_request);
  if (!active_) {
    if (!o.events.empty() || o.turn_end)
      Log(LogLevel::debug, "claude-code: " + std::to_string(o.events.size()) + " events between turns not journaled");
    return;
  }
  for (auto& e : o.events) active_->host->Emit(std::move(e));
  if (o.turn_end)
    Finish(std::string(o.turn_end->ok ? status_value::kCompleted : status_value::kFailed), o.turn_end->error);
}

void ClaudeProvider::OnControlRequest(const claude::ControlRequest& cr) {
  const std::string& sid = session_id_;
  if (cr.subtype != "can_use_tool")
    return Write(claude::ControlErrorLine(cr.request_id, "unsupported control request: " + cr.subtype, sid));
  if (!active_)
    return Write(claude::ControlSuccessLine(cr.request_id,
                                            claude::DenyResponse("No Session client can answer the question"), sid));
  if (active_->interrupted)  // the user asked it to stop: nothing more is asked of them in this turn
    return Write(claude::ControlSuccessLine(cr.request_id, claude::DenyResponse("User cancelled the question"), sid));
  PendingRequest p{cr.request_id, false, cr.tool_name, cr.input, {}};
  if (cr.tool_name == "AskUserQuestion") {
    auto qs = claude::AskQuestions(cr.input);
    if (!qs) return Write(claude::ControlErrorLine(cr.request_id, qs.error().message, sid));
    p.questions = std::move(*qs);
  } else if (spec_.skip_permissions) {
    // The real runtime's answer: with permissions skipped the agent asks about nothing else.
    return Write(claude::ControlErrorLine(cr.request_id, "unsupported tool request: " + cr.tool_name, sid));
  } else if (allowed_tools_.count(cr.tool_name)) {
    return Write(claude::ControlSuccessLine(cr.request_id, claude::PermissionAllowResponse(cr.input, ""), sid));
  } else {
    p.permission = true;
    p.questions = claude::PermissionQuestion(cr.tool_name, cr.input);
  }
  std::string input_id = active_->host->Ask("claude-" + cr.request_id, p.questions);
  pending_[input_id] = std::move(p);
}

void ClaudeProvider::PersistSession() {
  const std::string& named = decoder_.session_id();
  if (named.empty() || named == persisted_id_) return;
  if (!IsUuid(named)) {
    if (named != session_id_) Log(LogLevel::warning, "claude-code: the agent named a conversation that is not a UUID");
    session_id_ = named;  // used while it runs, never saved for --resume
    return;
  }
  session_id_ = named;
  session_known_ = true;
  if (state_dir_.empty()) {
    persisted_id_ = named;
    return;
  }
  if (auto st = files::WriteFileAtomic(state_dir_ + "/" + std::string(kSessionIdFile), named + "\n"); !st) {
    Log(LogLevel::error, "claude-code: " + st.error().message + ": tried again with the next line; a runtime restart "
                             "before it is saved resumes the conversation saved before, if any");
    return;
  }
  persisted_id_ = named;
}

void ClaudeProvider::ProtocolError(const std::string& what) {
  std::string tail = agent_ ? StderrTail(*agent_) : std::string();
  Log(LogLevel::warning, "claude-code: the agent wrote " + what + "; restarting it");
  KillAgent();
  std::string why = "Claude Code wrote " + what + " (it is restarted for the next turn)";
  if (!tail.empty()) why += "\n" + tail;
  Finish(std::string(status_value::kFailed), why);
}

void ClaudeProvider::MaybeReap(const std::shared_ptr<Agent>& agent) {
  if (agent_ != agent || !agent->out_done || agent->reap_pending) return;
  const auto since = std::chrono::steady_clock::now() - agent->out_done_at;
  int status = 0;
  pid_t r = agent->err_done || since >= kStderrGrace ? ::waitpid(agent->pid, &status, WNOHANG) : 0;
  if (r == 0 && since >= kExitGrace) {
    // Its stdout is gone but it lives on: of no use any more.
    ::kill(-agent->pgid, SIGKILL);
    ::kill(agent->pid, SIGKILL);
    Wait(agent->pid);
    return Exited(agent, -1);
  }
  if (r == 0) {
    // One poll at a time (stdout's and stderr's ends both come here).
    agent->reap_pending = true;
    agent->timer.expires_after(kReapPoll);
    agent->timer.async_wait([self = weak_from_this(), agent](const asio::error_code& ec) {
      agent->reap_pending = false;
      if (ec == asio::error::operation_aborted) return;
      if (auto p = self.lock()) p->MaybeReap(agent);
    });
    return;
  }
  Exited(agent, r > 0 ? status : -1);
}

void ClaudeProvider::Exited(const std::shared_ptr<Agent>& agent, int wait_status) {
  agent->pid = 0;  // reaped; KillAgent still ends what is left of its process group
  std::string why = "Claude Code exited";
  if (wait_status == -1) why = "Claude Code closed its output";
  else if (WIFEXITED(wait_status)) why += " with status " + std::to_string(WEXITSTATUS(wait_status));
  else if (WIFSIGNALED(wait_status)) why = "Claude Code was killed by signal " + std::to_string(WTERMSIG(wait_status));
  const std::string tail = StderrTail(*agent);
  if (!tail.empty()) why += ":\n" + tail;
  if (agent->resumed && !agent->saw_line && tail.find("No conversation found") != std::string::npos) {
    // The saved conversation is gone (deleted, or from another machine): start a new one next time.
    session_known_ = false;
    persisted_id_.clear();
    if (!state_dir_.empty()) ::unlink((state_dir_ + "/" + std::string(kSessionIdFile)).c_str());
    why += "\n(the saved conversation was not found: the next turn starts a new one)";
  }
  KillAgent();
  if (active_) Finish(std::string(status_value::kFailed), why);
  else Log(LogLevel::warning, why + " (between turns; the next turn restarts it)");
}

void ClaudeProvider::KillAgent() {
  auto agent = std::move(agent_);
  agent_.reset();
  if (!agent) return;
  // The whole group: tools the agent started (a dev server, an MCP server) go with it.
  if (agent->pgid > 0) ::kill(-agent->pgid, SIGKILL);
  if (agent->pid > 0) {
    ::kill(agent->pid, SIGKILL);  // in case it left its group
    Wait(agent->pid);
    agent->pid = 0;
  }
  asio::error_code ignored;
  agent->in.close(ignored);
  agent->out.close(ignored);
  agent->err.close(ignored);
  agent->timer.cancel();
}

void ClaudeProvider::Stop(bool graceful) {
  active_.reset();
  pending_.clear();
  // What a runtime keeps in memory goes with it: the session rules, and (with a state directory, which
  // the next start reads again) the conversation id. Without one, the id lives as long as the object, as
  // the in-memory journal does through a simulated restart.
  allowed_tools_.clear();
  if (!state_dir_.empty()) state_loaded_ = session_known_ = false;
  if (agent_ && agent_->pid > 0 && graceful) {
    // End of input: the agent finishes writing its conversation and exits; killed if it does not. Its
    // output is closed too, so it cannot block on a full pipe meanwhile.
    asio::error_code ignored;
    agent_->in.close(ignored);
    agent_->out.close(ignored);
    const auto deadline = std::chrono::steady_clock::now() + kExitGrace;
    int status = 0;
    pid_t r = 0;
    while ((r = ::waitpid(agent_->pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(kReapPoll);
    if (r != 0) agent_->pid = 0;  // exited (or not ours to wait for)
  }
  KillAgent();
}

// ---- ClaudeRun -------------------------------------------------------------------------------------

void ClaudeRun::Start() {
  if (auto p = provider_.lock()) p->Begin(shared_from_this());
}
void ClaudeRun::Interrupt() {
  if (auto p = provider_.lock()) p->InterruptTurn(*this);
}
void ClaudeRun::Kill() {
  if (auto p = provider_.lock()) p->KillTurn(*this);
}
void ClaudeRun::InputResolved(const std::string& input_id, bool cancelled, const Answers& answers) {
  if (auto p = provider_.lock()) p->Answer(*this, input_id, cancelled, answers);
}

}  // namespace

Result<std::shared_ptr<Provider>> NewClaudeProvider(std::string_view options, const ProviderOptions& provider_options) {
  auto spec = claude::ParseSpecOptions(options);
  if (!spec) return Fail(spec.error());
  auto binary = ResolveBinary(provider_options.agent_bin);
  if (!binary) return Fail(binary.error());
  IgnoreSigpipeOnce();  // a write to an agent that just exited must be EPIPE, not the end of the process
  return std::shared_ptr<Provider>(std::make_shared<ClaudeProvider>(std::move(*spec), std::move(*binary), provider_options));
}

}  // namespace sessionturn::runtime
