// KubeConfig's state, shared by the file that loads configurations (kubeconfig.cpp) and the one
// that turns them into bearer tokens (credentials.cpp: token files, exec plugins, the cache and its
// off-the-loop refresher).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "context_gate.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/kube.hpp"
#include "ws/websocket_tls.hpp"

namespace sessionturn {

namespace kube_internal {

struct ExecSpec {
  std::string api_version;
  std::string command;
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  std::string interactive_mode;
  bool provide_cluster_info = false;
  std::string where;  // "user U in kubeconfig F" for messages
};

struct ExecCredential {
  std::string token;
  long long expiry = 0;  // seconds since epoch; 0: no expiry given
};

}  // namespace kube_internal

struct KubeConfig::Impl {
  std::string server;
  std::string namespace_name = "default";
  std::string context_name;
  std::string proxy_url;
  std::string describe;
  KubeTls tls;
  KubeAuthKind auth = KubeAuthKind::none;

  std::string static_token;
  std::string token_file;  // tokenFile or the service-account token
  std::optional<kube_internal::ExecSpec> exec;

  // Guards the cache below; held only for short looks and updates, never while a file is read or a
  // plugin runs, so a Context worker asking for a cached token never waits on a refresh.
  mutable std::mutex mu;
  // Token file cache: re-read when its mtime or size changes (kubelet rotates projected tokens),
  // looked at again at most every kTokenFileRecheck by the asynchronous path.
  mutable std::string file_token;
  mutable struct timespec file_mtime {};
  mutable off_t file_size = -1;
  mutable std::chrono::steady_clock::time_point file_checked{};
  // Exec credential cache.
  mutable std::string exec_token;
  mutable long long exec_expiry = 0;  // seconds since epoch; 0: no expiry given
  mutable bool exec_cached = false;
  // A background refresh of the cached credential was started: at most one per credential, so one
  // whose whole lifetime is inside the refresh-ahead window does not refresh on every lookup.
  mutable bool exec_refresh_started = false;

  // Serializes refreshes (blocking BearerToken() and the refresher): one plugin run at a time.
  mutable std::mutex refresh_mu;
  // The credential executor of AsyncBearerToken: at most one thread per configuration, started
  // when a refresh is needed and gone when it is done (a refresh is rare: a token file every
  // kTokenFileRecheck at most, a plugin once per credential lifetime). Under mu.
  struct Waiter {
    // The waiter's Context may stop, or be destroyed, while the refresher runs a plugin.
    std::shared_ptr<detail::ContextGate> gate;
    std::function<void(Result<std::string>)> handler;
  };
  mutable std::vector<Waiter> waiters;
  mutable bool refreshing = false;
  mutable std::thread refresher;

  // Held here rather than process-wide so that no TLS material outlives its configuration.
  std::shared_ptr<ws::TlsContextCache> exec_tls_contexts = std::make_shared<ws::TlsContextCache>();

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl();

  // What the cache can answer now, without I/O. `token` is set when it holds a usable one;
  // `refresh` when a refresh should run (in the background when `token` is set).
  struct Cached {
    std::optional<std::string> token;
    bool refresh = false;
  };
  Cached Lookup(bool async) const;
  // Reads the token file or runs the plugin now and updates the cache. Blocking; refresh_mu held.
  Result<std::string> RefreshLocked() const;
  Result<kube_internal::ExecCredential> RunExec() const;
  Result<std::string> ReadTokenFile() const;

  // Starts the refresher unless it runs; `waiter` (optional) gets the refreshed token.
  static void StartRefresh(const std::shared_ptr<const Impl>& self, std::optional<Waiter> waiter);
};

}  // namespace sessionturn
