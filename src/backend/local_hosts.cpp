// Where the LocalBackend's runtimes run (local_backend.hpp, RuntimeHost): a detached
// sessionturn-local-runtime process per Session (the default; it outlives the embedding process), or
// a testing::LocalRuntime inside this process (in-process mode: tests and benchmarks with thousands of
// Sessions), which this host then holds to the same idle policy and records as the program does.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pthread.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/local_backend.hpp"
#include "backend/local_process.hpp"
#include "sessionturn/testing/local_runtime.hpp"

namespace sessionturn::local {
namespace {

// The default workspace is the Session's own; one removed by hand is made again on the next start.
void EnsureWorkspace(const SessionPaths& paths, const SessionRecord& record) {
  if (record.workdir == paths.workspace) ::mkdir(paths.workspace.c_str(), 0700);
}

class ProcessHost final : public RuntimeHost {
 public:
  explicit ProcessHost(HostConfig config) : config_(std::move(config)) {}

  Liveness Check(const SessionPaths& paths, const Result<RuntimeRecord>& record) override {
    Liveness live;
    auto pid = ReadPidFile(paths.pid_file);
    if (!pid) return live;
    live.pid = *pid;
    // Our runtime's command line names its state directory: a pid reused since is not alive here.
    live.alive = RuntimeAlive(live.pid, paths.dir);
    live.serving = live.alive && record && record->pid == live.pid && record->exit.empty();
    return live;
  }

  Result<long> Start(const SessionPaths& paths, const SessionRecord& record) override {
    if (config_.program.empty()) return Fail(Errc::not_found, config_.program_error);
    EnsureWorkspace(paths, record);
    std::vector<std::string> argv = {config_.program,  "serve",
                                     "--socket",       paths.socket,
                                     "--state-dir",    paths.dir,
                                     "--status-file",  paths.status_file,
                                     "--session-name", record.name,
                                     "--provider",     record.provider,
                                     "--idle-exit",    std::to_string(config_.suspend_after.count()),
                                     "--detach",       "--pid-file",
                                     paths.pid_file};
    if (config_.allow_shell) argv.push_back("--allow-shell");
    if (!config_.agent_bin.empty()) argv.insert(argv.end(), {"--agent-bin", config_.agent_bin});
    return StartDetached(argv, record.workdir, paths.log, paths.pid_file);
  }

  bool RequestStop(const SessionPaths& paths, long pid) override { return SignalRuntime(pid, paths.dir, SIGTERM); }
  bool Running(const std::string& dir, long pid) override { return RuntimeAlive(pid, dir); }
  void Kill(const std::string& dir, long pid) override { SignalRuntime(pid, dir, SIGKILL); }
  bool in_process() const override { return false; }

 private:
  HostConfig config_;
};

// Its periodic look (idle policy, activity records) runs on a thread of its own, as each program's
// runs on the program's main thread: file writes and the stop of an idle runtime (which waits for its
// I/O thread) never hold the Context's workers.
class InProcessHost final : public RuntimeHost {
 public:
  InProcessHost(HostConfig config, LogSink log) : config_(std::move(config)), log_(std::move(log)) {
    looker_ = std::thread([this] { LookLoop(); });
  }
  ~InProcessHost() override { StopAll(); }

  Liveness Check(const SessionPaths& paths, const Result<RuntimeRecord>&) override {
    Liveness live;
    std::lock_guard lock(mu_);
    auto it = hosted_.find(paths.dir);
    if (it != hosted_.end()) {
      live.alive = live.serving = true;
      live.pid = static_cast<long>(::getpid());
      live.last_activity = it->second->runtime->Activity().last_turn;
    }
    return live;
  }

  Result<long> Start(const SessionPaths& paths, const SessionRecord& record) override {
    EnsureWorkspace(paths, record);
    auto hosted = std::make_shared<Hosted>();
    auto socket = SocketPath::For(paths.socket);
    if (!socket) return Fail(socket.error());
    hosted->socket = std::move(*socket);
    hosted->status_file = paths.status_file;
    testing::LocalRuntimeOptions o;
    o.socket_path = hosted->socket.path();
    o.state_dir = paths.dir;
    o.provider = record.provider;
    o.allow_shell = config_.allow_shell;
    o.agent_bin = config_.agent_bin;
    o.session_name = record.name;
    o.working_dir = record.workdir;
    o.log_sink = log_;
    auto runtime = testing::LocalRuntime::Start(o);
    if (!runtime) return Fail(Errc::failed, "Session " + record.name + ": " + runtime.error().message);
    hosted->runtime = std::move(*runtime);
    hosted->record.pid = static_cast<long>(::getpid());
    hosted->record.in_process = true;
    hosted->record.started = WallClock::now();
    // The last activity carries over: runtime.json's, or session.json's when that is later (or all there is).
    hosted->record.last_activity = record.last_activity;
    if (auto prev = ReadRuntimeRecord(paths.status_file); prev && prev->last_activity > hosted->record.last_activity)
      hosted->record.last_activity = prev->last_activity;
    if (auto st = WriteRuntimeRecord(paths.status_file, hosted->record, false); !st) {  // as the program's
      hosted->runtime->Stop();
      return Fail(st.error());
    }
    std::lock_guard lock(mu_);
    hosted_[paths.dir] = hosted;
    return hosted->record.pid;
  }

  bool RequestStop(const SessionPaths& paths, long) override {
    std::shared_ptr<Hosted> h = Find(paths.dir);
    return h && End(paths.dir, *h, kExitStopped, std::chrono::milliseconds(-1));
  }
  bool Running(const std::string& dir, long) override { return Find(dir) != nullptr; }
  void Kill(const std::string&, long) override {}  // RequestStop has stopped it already
  bool in_process() const override { return true; }

  void StopAll() override {
    {
      std::lock_guard lock(look_mu_);
      stopping_ = true;
    }
    look_cv_.notify_all();
    if (looker_.joinable()) looker_.join();
    std::map<std::string, std::shared_ptr<Hosted>> all;
    {
      std::lock_guard lock(mu_);
      all = hosted_;
    }
    for (auto& [dir, h] : all) End(dir, *h, kExitStopped, std::chrono::milliseconds(-1));
  }

 private:
  struct Hosted {
    SocketPath socket;  // before the runtime: its path must stay valid until the runtime has stopped
    std::unique_ptr<testing::LocalRuntime> runtime;
    std::string status_file;
    std::mutex op_mu;  // one stop at a time; guards record, recorded and ended
    RuntimeRecord record;
    std::chrono::steady_clock::time_point recorded{};  // when record's last activity was last written
    bool ended = false;
  };

  void LookLoop() {
    ::pthread_setname_np(::pthread_self(), "st-local-host");
    std::unique_lock lock(look_mu_);
    while (!look_cv_.wait_for(lock, kInProcessTick, [this] { return stopping_; })) {
      lock.unlock();
      Look();
      lock.lock();
    }
  }

  void Look() {
    std::vector<std::pair<std::string, std::shared_ptr<Hosted>>> all;
    {
      std::lock_guard lock(mu_);
      all.assign(hosted_.begin(), hosted_.end());
    }
    // The records are written round-robin from where the last look stopped, so none waits forever.
    const auto now = std::chrono::steady_clock::now();
    std::size_t written = 0;
    const std::size_t n = all.size();
    const std::size_t first = n == 0 ? 0 : next_record_ % n;
    for (std::size_t k = 0; k < n; ++k) {
      auto& [dir, h] = all[(first + k) % n];
      const auto activity = h->runtime->Activity();
      {
        std::lock_guard op(h->op_mu);
        if (h->ended) continue;
        if (activity.last_turn > h->record.last_activity && now - h->recorded >= kActivityRecordEvery &&
            written < kActivityRecordsPerTick) {
          h->record.last_activity = activity.last_turn;
          h->recorded = now;
          (void)WriteRuntimeRecord(h->status_file, h->record, false);
          if (++written == kActivityRecordsPerTick) next_record_ = first + k + 1;
        }
      }
      const auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(config_.suspend_after);
      if (idle.count() > 0 && !activity.busy && activity.idle_for >= idle) End(dir, *h, kExitIdle, idle);
    }
  }

  std::shared_ptr<Hosted> Find(const std::string& dir) {
    std::lock_guard lock(mu_);
    auto it = hosted_.find(dir);
    return it == hosted_.end() ? nullptr : it->second;
  }

  // Stops it (only when idle for `idle`, unless that is negative) and records how it ended, as the
  // program does. False when it did not stop (busy, or another stop came first).
  bool End(const std::string& dir, Hosted& h, std::string_view how, std::chrono::milliseconds idle) {
    std::lock_guard op(h.op_mu);
    if (h.ended) return false;
    if (idle.count() >= 0) {
      if (!h.runtime->StopIfIdle(idle)) return false;
    } else {
      h.runtime->Stop();
    }
    h.ended = true;
    // The last activity as of the end (Look writes it only now and then).
    const auto last_turn = h.runtime->Activity().last_turn;
    if (last_turn > h.record.last_activity) h.record.last_activity = last_turn;
    h.record.exit = std::string(how);
    h.record.exited = WallClock::now();
    (void)WriteRuntimeRecord(h.status_file, h.record);
    std::lock_guard lock(mu_);
    hosted_.erase(dir);
    return true;
  }

  HostConfig config_;
  LogSink log_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Hosted>> hosted_;  // by Session directory
  std::size_t next_record_ = 0;                            // Look's round-robin start (looker_ only)
  std::mutex look_mu_;
  std::condition_variable look_cv_;
  bool stopping_ = false;  // StopAll: the looker ends
  std::thread looker_;     // started by the constructor, joined by StopAll (the destructor's too)
};

}  // namespace

std::unique_ptr<RuntimeHost> MakeProcessHost(HostConfig config) {
  return std::make_unique<ProcessHost>(std::move(config));
}

std::unique_ptr<RuntimeHost> MakeInProcessHost(HostConfig config, LogSink log) {
  return std::make_unique<InProcessHost>(std::move(config), std::move(log));
}

}  // namespace sessionturn::local
