// Helpers for tests against the local runtime: a tiny blocking client over a unix socket that sends
// request lines and reads decoded events with a deadline, and a self-removing temporary directory.
// Header-only so any integration test can include it.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <thread>
#include <string>
#include <vector>

#include "sessionturn/protocol.hpp"

namespace sessionturn::test {

using namespace std::chrono_literals;

// Generous: the test machine is a loaded 2-core box.
inline constexpr std::chrono::milliseconds kTestDeadline = 20s;

// A fresh directory under /tmp (short, so socket paths fit sun_path), removed with its contents.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/st-rt-XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    path_ = p ? p : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

class TestClient {
 public:
  TestClient() = default;
  explicit TestClient(const std::string& socket_path, std::chrono::milliseconds timeout = kTestDeadline) {
    Connect(socket_path, timeout);
  }
  ~TestClient() { Close(); }
  TestClient(TestClient&& o) noexcept { *this = std::move(o); }
  TestClient& operator=(TestClient&& o) noexcept {
    if (this != &o) {
      Close();
      fd_ = o.fd_;
      o.fd_ = -1;
      lines_ = std::move(o.lines_);
      framer_ = std::move(o.framer_);
      eof_ = o.eof_;
    }
    return *this;
  }

  // Retries until the socket accepts or the deadline passes (the runtime may be restarting).
  bool Connect(const std::string& socket_path, std::chrono::milliseconds timeout = kTestDeadline) {
    Close();
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
        fd_ = fd;
        eof_ = false;
        return true;
      }
      ::close(fd);
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(20ms);
    }
  }

  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  bool SendLine(const std::string& line) {
    std::string s = line + "\n";
    const char* p = s.data();
    std::size_t left = s.size();
    while (left > 0) {
      ssize_t n = ::send(fd_, p, left, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    return true;
  }
  bool Send(const ClientRequest& r) { return SendLine(EncodeRequest(r)); }

  // The next decoded event; Errc::timeout or Errc::connection_lost (EOF) otherwise.
  Result<Event> Next(std::chrono::milliseconds timeout = kTestDeadline) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      while (!lines_.empty()) {
        std::string line = std::move(lines_.front());
        lines_.pop_front();
        auto ev = DecodeEvent(line);
        if (ev) return ev;
      }
      if (eof_ || fd_ < 0) return Fail(Errc::connection_lost, "the runtime closed the connection");
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return Fail(Errc::timeout, "no event within the deadline");
      pollfd pfd{fd_, POLLIN, 0};
      int pr = ::poll(&pfd, 1, static_cast<int>(left.count()));
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) continue;
      char buf[65536];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        eof_ = true;
        continue;
      }
      framer_.Feed(std::string_view(buf, static_cast<std::size_t>(n)),
                   [&](std::string_view l) { lines_.emplace_back(l); });
    }
  }

  // Reads until an event matches; every event read (the match included) goes to `seen` if given.
  Result<Event> WaitFor(const std::function<bool(const Event&)>& pred,
                        std::chrono::milliseconds timeout = kTestDeadline, std::vector<Event>* seen = nullptr) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      auto ev = Next(std::max(left, std::chrono::milliseconds(0)));
      if (!ev) return ev;
      if (seen) seen->push_back(*ev);
      if (pred(*ev)) return ev;
    }
  }

  Result<Event> WaitType(std::string_view type, std::chrono::milliseconds timeout = kTestDeadline,
                         std::vector<Event>* seen = nullptr) {
    return WaitFor([&](const Event& e) { return e.type == type; }, timeout, seen);
  }

  // Every event up to and including history.end.
  std::vector<Event> ReadHistory(std::chrono::milliseconds timeout = kTestDeadline) {
    std::vector<Event> seen;
    (void)WaitType(event_type::kHistoryEnd, timeout, &seen);
    return seen;
  }

  // Reads (and discards) until the runtime closes the connection. False when the deadline passes first.
  bool WaitClosed(std::chrono::milliseconds timeout = kTestDeadline) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      auto ev = Next(std::max(left, std::chrono::milliseconds(0)));
      if (!ev && ev.error().code == Errc::connection_lost) return true;
      if (!ev) return false;
    }
  }

  void HalfClose() {
    if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool eof_ = false;
  std::deque<std::string> lines_;
  LineFramer framer_;
};

// Predicates for WaitFor.
inline std::function<bool(const Event&)> IsType(std::string_view type) {
  std::string t(type);
  return [t](const Event& e) { return e.type == t; };
}
inline std::function<bool(const Event&)> IsTypeOf(std::string_view type, std::string turn_id) {
  std::string t(type);
  return [t, turn_id](const Event& e) { return e.type == t && e.turn_id == turn_id; };
}
inline std::function<bool(const Event&)> ForRequest(std::string request_id) {
  return [request_id](const Event& e) { return e.request_id == request_id; };
}

// Writes a file (scripts, hand-made journals).
inline void WriteFile(const std::string& path, const std::string& body) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return;
  std::fwrite(body.data(), 1, body.size(), f);
  std::fclose(f);
}

}  // namespace sessionturn::test
