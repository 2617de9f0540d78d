// Test support for the HTTP server: a raw loopback client (plain sockets, so a test can send bytes
// the way no well-behaved client would: slowly, malformed, pipelined) and a reader of responses.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cctype>
#include <chrono>
#include <map>
#include <optional>
#include <string>

namespace sessionturn::testing_http_server {

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-cased names
  std::string body;
  bool Has(const std::string& name) const { return headers.count(name) != 0; }
};

class RawClient {
 public:
  explicit RawClient(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  // False when the server already closed (EPIPE/ECONNRESET).
  bool Send(const std::string& bytes) {
    std::size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<std::size_t>(n);
    }
    return true;
  }

  // Reads one response (headers, then Content-Length bytes of body unless `head`); nullopt when the
  // connection ended or nothing complete came within `bound`.
  std::optional<RawResponse> Read(bool head = false, std::chrono::milliseconds bound = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    for (;;) {
      if (auto r = TryParse(head)) return r;
      if (!Fill(deadline)) return std::nullopt;
    }
  }

  // Waits for the server to close the connection (reading and dropping whatever comes first).
  bool ClosedWithin(std::chrono::milliseconds bound) {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (Fill(deadline)) {
    }
    return eof_;
  }

  bool eof() const { return eof_; }
  const std::string& buffered() const { return in_; }

 private:
  // Reads once; false at EOF, error or deadline.
  bool Fill(std::chrono::steady_clock::time_point deadline) {
    if (eof_) return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    in_.append(buf, static_cast<std::size_t>(n));
    return true;
  }

  std::optional<RawResponse> TryParse(bool head) {
    auto end = in_.find("\r\n\r\n");
    if (end == std::string::npos) return std::nullopt;
    RawResponse r;
    std::string head_text = in_.substr(0, end);
    std::size_t line_end = head_text.find("\r\n");
    std::string status_line = head_text.substr(0, line_end);
    REQUIRE(status_line.rfind("HTTP/1.1 ", 0) == 0);
    r.status = std::stoi(status_line.substr(9, 3));
    std::size_t pos = line_end == std::string::npos ? head_text.size() : line_end + 2;
    while (pos < head_text.size()) {
      std::size_t next = head_text.find("\r\n", pos);
      if (next == std::string::npos) next = head_text.size();
      std::string line = head_text.substr(pos, next - pos);
      auto colon = line.find(':');
      REQUIRE(colon != std::string::npos);
      std::string name = line.substr(0, colon);
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value[0] == ' ') value.erase(0, 1);
      r.headers[name] = value;
      pos = next + 2;
    }
    std::size_t length = 0;
    if (!head && r.status != 100 && r.Has("content-length")) length = std::stoul(r.headers["content-length"]);
    if (in_.size() < end + 4 + length) return std::nullopt;
    r.body = in_.substr(end + 4, length);
    in_.erase(0, end + 4 + length);
    return r;
  }

  int fd_ = -1;
  std::string in_;
  bool eof_ = false;
};

}  // namespace sessionturn::testing_http_server
