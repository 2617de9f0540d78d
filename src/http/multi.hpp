// libcurl's multi-socket interface on a Context (curl's asiohiper pattern): libcurl says which
// sockets it wants watched (CURLMOPT_SOCKETFUNCTION) and when to call it back (TIMERFUNCTION); Asio
// descriptors and one steady timer do the waiting, and every libcurl call runs on one strand.
// Internal to HttpClient.
#pragma once

#include <curl/curl.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <asio.hpp>

#include "http/transfer.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/http.hpp"

namespace sessionturn::http {

// Counts accepted exchanges whose done handler has not returned, for InFlight() and the destructor's
// wait, and the connections opened. Shared with the posted handlers, which may outlive the Multi, and
// by a client's multis (its own on the Context and its lanes': http/lanes.hpp).
struct Tally {
  std::mutex mu;
  std::condition_variable idle;
  std::size_t in_flight = 0;
  std::atomic<std::uint64_t> connections_opened{0};

  void Add() {
    std::lock_guard lock(mu);
    ++in_flight;
  }
  void Done() {
    std::lock_guard lock(mu);
    if (in_flight > 0 && --in_flight == 0) idle.notify_all();
  }
  std::size_t Count() {
    std::lock_guard lock(mu);
    return in_flight;
  }
};

class Multi : public std::enable_shared_from_this<Multi> {
 public:
  using Strand = asio::strand<asio::io_context::executor_type>;

  // On the Context's loop (HttpClient's own).
  Multi(Context& context, HttpClientOptions options);
  // On `io`, a loop its caller runs (a lane), counting into `tally`. `context` is for logging only.
  Multi(Context& context, asio::io_context& io, HttpClientOptions options, std::shared_ptr<Tally> tally);
  ~Multi();
  Multi(const Multi&) = delete;
  Multi& operator=(const Multi&) = delete;

  Context& context() const noexcept { return context_; }
  const HttpClientOptions& options() const noexcept { return options_; }
  const std::shared_ptr<Tally>& tally() const noexcept { return tally_; }
  std::uint64_t ConnectionsOpened() const noexcept {
    return tally_->connections_opened.load(std::memory_order_relaxed);
  }

  // Any thread: hands the transfer to the strand, which starts it (or reports why it cannot).
  void Submit(std::shared_ptr<Transfer> transfer);
  // Any thread: see HttpCall::Cancel.
  void Cancel(const std::shared_ptr<Transfer>& transfer);
  // The owner (HttpClient) is going away: see ~HttpClient for what it guarantees.
  void Close();
  // A lane's multi, from a thread that is not running its loop: closes the cached connections now;
  // an exchange still on it is dropped unreported. Its loop then holds aborted waits to run or drop.
  void CloseIdle();
  // Any thread: closes the multi on its strand, where every exchange on it reports Errc::cancelled
  // (and any submitted later too). Waits for nothing, not even a stream handler running now: a busy
  // lane's, whose caller runs the loop.
  void CancelAll();
  // What every easy handle of this multi needs: the share, our socket open/close callbacks. Strand only.
  void PrepareEasy(CURL* easy);

  // Runs `fn` (a stream's headers or chunk handler) unless the transfer was cancelled or the client
  // closed, holding the delivery lock so that a Cancel() from another thread waits for it to return.
  // Returns false when `fn` did not run or returned false. Strand only (inside libcurl callbacks).
  template <typename Fn>
  bool Deliver(Transfer& transfer, Fn&& fn);

 private:
  struct Socket;

  // libcurl's callbacks (C linkage types; they never throw).
  static int OnSocket(CURL* easy, curl_socket_t fd, int what, void* userp, void* socketp) noexcept;
  static int OnTimer(CURLM* multi, long timeout_ms, void* userp) noexcept;
  static curl_socket_t OnOpenSocket(void* clientp, curlsocktype purpose, curl_sockaddr* address) noexcept;
  static int OnCloseSocket(void* clientp, curl_socket_t fd) noexcept;

  // Strand only.
  void Start(const std::shared_ptr<Transfer>& transfer);
  void SocketAction(curl_socket_t fd, int events);
  void CollectDone();
  void Finish(CURL* easy, CURLcode code);
  void Report(const std::shared_ptr<Transfer>& transfer, Result<HttpResponse> outcome);
  void CloseNow(bool report);
  std::shared_ptr<Socket> SocketFor(curl_socket_t fd);
  void DropSocket(curl_socket_t fd);
  void Watch(curl_socket_t fd, int what);
  void Arm(const std::shared_ptr<Socket>& socket, int direction, bool check_ready);
  void OnReady(const std::shared_ptr<Socket>& socket, int direction, const asio::error_code& ec);
  CURL* AcquireEasy();
  void ReleaseEasy(CURL* easy);

  Context& context_;
  asio::io_context& io_;  // where handlers are posted: the Context's loop, or a lane's
  HttpClientOptions options_;
  std::string user_agent_;
  Strand strand_;
  asio::steady_timer timer_;
  bool timer_armed_ = false;  // strand only, as the two below
  std::chrono::steady_clock::time_point timer_expiry_;
  bool kick_posted_ = false;  // a "timeout now" is posted and has not run yet
  std::shared_ptr<Tally> tally_;

  // Strand only (or the destructor, when nothing else runs).
  CURLM* multi_ = nullptr;
  CURLSH* share_ = nullptr;
  bool closed_ = false;
  std::unordered_map<CURL*, std::shared_ptr<Transfer>> transfers_;
  std::unordered_map<curl_socket_t, std::shared_ptr<Socket>> sockets_;
  std::vector<CURL*> pool_;

  // Delivery: see Deliver().
  std::mutex deliver_mu_;
  std::atomic<std::thread::id> delivering_{};
  std::atomic<bool> closing_{false};
};

template <typename Fn>
bool Multi::Deliver(Transfer& transfer, Fn&& fn) {
  std::lock_guard lock(deliver_mu_);
  if (transfer.Cancelled()) return false;
  if (closing_.load(std::memory_order_acquire)) {
    transfer.SetCancel(Transfer::Cancel::client_closed);
    return false;
  }
  delivering_.store(std::this_thread::get_id(), std::memory_order_release);
  bool keep = false;
  try {
    keep = fn();
  } catch (const std::exception& e) {
    transfer.abort = Error(Errc::internal, transfer.What() + ": a stream handler threw: " + e.what());
  } catch (...) {
    transfer.abort = Error(Errc::internal, transfer.What() + ": a stream handler threw a non-standard exception");
  }
  delivering_.store(std::thread::id(), std::memory_order_release);
  if (!keep && !transfer.abort) transfer.SetCancel(Transfer::Cancel::by_handler);
  return keep;
}

}  // namespace sessionturn::http
