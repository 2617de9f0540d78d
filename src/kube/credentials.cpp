// Bearer tokens from a KubeConfig: static tokens, token files that rotate, exec credential plugins
// (client.authentication.k8s.io ExecCredential), cached until they expire. The blocking form runs a
// refresh on the calling thread; the asynchronous one never blocks its caller: it answers from the
// cache, and a refresh (a file read, a plugin run) happens on the configuration's own refresher
// thread, ahead of expiry when the cache still holds a usable token.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/post.hpp>

#include <cerrno>
#include <cstring>
#include <ctime>

#include <nlohmann/json.hpp>

#include "kube/kube_util.hpp"
#include "kube/kubeconfig_impl.hpp"

extern char** environ;

namespace sessionturn {

using nlohmann::json;
using namespace kube_internal;

namespace {

// A plugin may print a lot on stderr; only the end is useful in an error message.
constexpr std::size_t kPluginStderrTail = 1024;
// Bound on what a plugin may print on stdout (an ExecCredential is small).
constexpr std::size_t kPluginStdoutLimit = 1 << 20;
// A credential is not used within this long of its expiry, so a request never carries one that
// expires in flight.
constexpr long long kExpirySlackSeconds = 10;
// The asynchronous path refreshes a credential this long before it expires, in the background,
// while the cached one is still handed out: callers on the loop then never wait for a plugin.
constexpr long long kRefreshAheadSeconds = 60;
// The asynchronous path looks at a token file again after this long (client-go re-reads its token
// file every minute too; kubelet rotates projected tokens long before they expire).
constexpr std::chrono::seconds kTokenFileRecheck{60};

std::string Tail(const std::string& text, std::size_t n) {
  std::string t = text.size() > n ? text.substr(text.size() - n) : text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  return t;
}

long long Now() { return static_cast<long long>(std::time(nullptr)); }

}  // namespace

KubeConfig::Impl::~Impl() {
  if (!refresher.joinable()) return;
  // The refresher holds a reference while it works, so it is done with us; it may be the thread
  // dropping that last reference, which cannot join itself.
  if (refresher.get_id() == std::this_thread::get_id()) {
    refresher.detach();
  } else {
    refresher.join();
  }
}

KubeConfig::Impl::Cached KubeConfig::Impl::Lookup(bool async) const {
  Cached out;
  if (!static_token.empty()) {
    out.token = static_token;
    return out;
  }
  std::lock_guard lock(mu);
  if (!token_file.empty()) {
    if (file_token.empty()) {
      out.refresh = true;
      return out;
    }
    out.token = file_token;
    // The blocking form stats the file on every call (cheap, and it sees a rotation at once).
    out.refresh = !async || std::chrono::steady_clock::now() - file_checked >= kTokenFileRecheck;
    return out;
  }
  if (exec) {
    long long left = exec_expiry - Now();
    if (!exec_cached || (exec_expiry != 0 && left <= kExpirySlackSeconds)) {
      out.refresh = true;
      return out;
    }
    out.token = exec_token;
    if (async && exec_expiry != 0 && left <= kRefreshAheadSeconds && !exec_refresh_started) {
      exec_refresh_started = true;
      out.refresh = true;
    }
    return out;
  }
  out.token = std::string();  // client certificate or nothing: no bearer token
  return out;
}

Result<std::string> KubeConfig::Impl::ReadTokenFile() const {
  struct stat st {};
  if (::stat(token_file.c_str(), &st) != 0) {
    return Fail(Errc::io_error, "cannot read " + token_file + ": " + std::strerror(errno));
  }
  {
    std::lock_guard lock(mu);
    if (file_size == st.st_size && file_mtime.tv_sec == st.st_mtim.tv_sec &&
        file_mtime.tv_nsec == st.st_mtim.tv_nsec && !file_token.empty()) {
      file_checked = std::chrono::steady_clock::now();
      return file_token;
    }
  }
  auto content = ReadFile(token_file);
  if (!content) return Fail(content.error());
  std::string t = *content;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  if (t.empty()) return Fail(Errc::invalid_argument, "token file " + token_file + " is empty");
  std::lock_guard lock(mu);
  file_token = t;
  file_mtime = st.st_mtim;
  file_size = st.st_size;
  file_checked = std::chrono::steady_clock::now();
  return t;
}

Result<std::string> KubeConfig::Impl::RefreshLocked() const {
  if (!token_file.empty()) {
    auto t = ReadTokenFile();
    if (!t) return Fail(t.error().code, describe + ": token file: " + t.error().message);
    return t;
  }
  if (!exec) return std::string();
  {
    // Another refresh may have finished while this one waited for refresh_mu.
    std::lock_guard lock(mu);
    long long left = exec_expiry - Now();
    if (exec_cached && (exec_expiry == 0 || left > kRefreshAheadSeconds)) return exec_token;
  }
  auto cred = RunExec();
  if (!cred) return Fail(cred.error());
  std::lock_guard lock(mu);
  exec_token = cred->token;
  exec_expiry = cred->expiry;
  exec_cached = true;
  exec_refresh_started = false;
  return std::move(cred->token);
}

void KubeConfig::Impl::StartRefresh(const std::shared_ptr<const Impl>& self, std::optional<Waiter> waiter) {
  std::thread finished;
  {
    std::lock_guard lock(self->mu);
    if (waiter) self->waiters.push_back(std::move(*waiter));
    if (self->refreshing) return;
    self->refreshing = true;
    finished = std::move(self->refresher);
    self->refresher = std::thread([self] {
      Result<std::string> token = [&] {
        std::lock_guard refresh(self->refresh_mu);
        return self->RefreshLocked();
      }();
      std::vector<Waiter> waiters;
      {
        std::lock_guard lock(self->mu);
        waiters.swap(self->waiters);
        self->refreshing = false;
      }
      // A background refresh (no waiters) that failed leaves the cached credential in place: it is
      // still usable for a while, and the next lookup near expiry tries again and reports the error.
      // A waiter whose Context stopped is dropped unanswered, as its loop drops pending handlers.
      for (auto& w : waiters) w.gate->Post([h = std::move(w.handler), token] { h(token); });
    });
  }
  // The previous refresher has finished its work (refreshing was false); join it off the lock.
  if (finished.joinable()) {
    if (finished.get_id() == std::this_thread::get_id()) {
      finished.detach();
    } else {
      finished.join();
    }
  }
}

Result<ExecCredential> KubeConfig::Impl::RunExec() const {
  const ExecSpec& spec = *exec;
  json info = {{"apiVersion", spec.api_version}, {"kind", "ExecCredential"}, {"spec", {{"interactive", false}}}};
  if (spec.provide_cluster_info) {
    json cluster = {{"server", server}, {"insecure-skip-tls-verify", tls.insecure_skip_verify}};
    if (!tls.ca_pem.empty()) cluster["certificate-authority-data"] = Base64Encode(tls.ca_pem);
    if (!tls.server_name.empty()) cluster["tls-server-name"] = tls.server_name;
    if (!proxy_url.empty()) cluster["proxy-url"] = proxy_url;
    info["spec"]["cluster"] = cluster;
  }
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    bool overridden = kv.rfind("KUBERNETES_EXEC_INFO=", 0) == 0;
    for (const auto& [k, v] : spec.env) overridden = overridden || kv.rfind(k + "=", 0) == 0;
    if (!overridden) env_strings.emplace_back(kv);
  }
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  env_strings.push_back("KUBERNETES_EXEC_INFO=" + info.dump());
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings{spec.command};
  argv_strings.insert(argv_strings.end(), spec.args.begin(), spec.args.end());
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    return Fail(Errc::io_error, spec.where + ": exec plugin: pipe: " + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // interactiveMode Never/IfAvailable without a terminal: the plugin gets no stdin.
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, spec.command.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return Fail(Errc::io_error, spec.where + ": exec plugin \"" + spec.command + "\" could not be started: " +
                                    std::strerror(rc));
  }
  std::string out, err;
  auto deadline = std::chrono::steady_clock::now() + kExecPluginTimeout;
  bool timed_out = false;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    int n = ::poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
      if (r > 0) {
        std::string& into = i == 0 ? out : err;
        if (into.size() < kPluginStdoutLimit) into.append(buf, static_cast<std::size_t>(r));
      } else if (r == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  if (timed_out) ::kill(pid, SIGKILL);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  std::string tail = Tail(err, kPluginStderrTail);
  if (timed_out) {
    return Fail(Errc::timeout, spec.where + ": exec plugin \"" + spec.command + "\" did not finish within " +
                                   std::to_string(kExecPluginTimeout.count()) + "s");
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    std::string how = WIFEXITED(wstatus) ? "exited with code " + std::to_string(WEXITSTATUS(wstatus))
                                         : "was killed by signal " + std::to_string(WTERMSIG(wstatus));
    return Fail(Errc::unauthorized,
                spec.where + ": exec plugin \"" + spec.command + "\" " + how + (tail.empty() ? "" : ": " + tail));
  }
  json cred = json::parse(out, nullptr, false);
  if (cred.is_discarded() || !cred.is_object()) {
    return Fail(Errc::protocol_error, spec.where + ": exec plugin \"" + spec.command +
                                          "\" did not print an ExecCredential JSON object");
  }
  if (Str(cred, "kind") != "ExecCredential" || Str(cred, "apiVersion") != spec.api_version) {
    return Fail(Errc::protocol_error, spec.where + ": exec plugin printed kind \"" + Str(cred, "kind") +
                                          "\" apiVersion \"" + Str(cred, "apiVersion") + "\", expected ExecCredential " +
                                          spec.api_version);
  }
  json status = cred.value("status", json::object());
  std::string token = status.is_object() ? Str(status, "token") : "";
  if (token.empty()) {
    return Fail(Errc::protocol_error, spec.where + ": exec plugin returned no status.token (client certificates from "
                                                   "plugins are not supported)");
  }
  long long expiry = 0;
  std::string exp_text = Str(status, "expirationTimestamp");
  if (!exp_text.empty()) {
    auto t = ParseRfc3339(exp_text);
    if (!t) return Fail(Errc::protocol_error, spec.where + ": exec plugin status.expirationTimestamp: " + t.error().message);
    expiry = *t;
    if (expiry <= static_cast<long long>(std::time(nullptr))) {
      return Fail(Errc::unauthorized, spec.where + ": exec plugin returned an expired credential (expirationTimestamp " +
                                          exp_text + ")");
    }
  }
  return ExecCredential{std::move(token), expiry};
}


Result<std::string> KubeConfig::BearerToken() const {
  auto cached = impl_->Lookup(/*async=*/false);
  if (cached.token && !cached.refresh) return std::move(*cached.token);
  std::lock_guard refresh(impl_->refresh_mu);
  return impl_->RefreshLocked();
}

void KubeConfig::AsyncBearerToken(Context& context, std::function<void(Result<std::string>)> handler) const {
  auto cached = impl_->Lookup(/*async=*/true);
  if (cached.token) {
    if (cached.refresh) Impl::StartRefresh(impl_, std::nullopt);
    if (context.Stopped()) return handler(std::move(*cached.token));
    asio::post(context.io(), [h = std::move(handler), t = std::move(*cached.token)]() mutable { h(std::move(t)); });
    return;
  }
  Impl::StartRefresh(impl_, Impl::Waiter{detail::GateOf(context), std::move(handler)});
}

bool KubeConfig::InvalidateToken() const {
  std::lock_guard lock(impl_->mu);
  if (impl_->exec) {
    impl_->exec_cached = false;
    return true;
  }
  if (!impl_->token_file.empty()) {
    // Re-read before the next use (no I/O here: this may run on a Context worker after a 401).
    impl_->file_token.clear();
    impl_->file_size = -1;
    impl_->file_checked = {};
    return true;
  }
  return false;
}

}  // namespace sessionturn
