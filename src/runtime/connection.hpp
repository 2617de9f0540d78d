// One client connection of the local runtime: reads request lines, writes encoded events, and
// enforces the subscriber bound (a connection with more live events queued than the bound is closed,
// with no marker, as the real runtime does). Runs on the runtime's I/O thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <asio.hpp>

#include "sessionturn/context.hpp"
#include "sessionturn/protocol.hpp"

namespace sessionturn::runtime {

class Conn;

// What a connection needs from the runtime that owns it.
class ConnOwner {
 public:
  virtual ~ConnOwner() = default;
  virtual void OnRequestLine(Conn& c, std::string_view line) = 0;
  // The connection closed (by either side); the owner drops it from its sets.
  virtual void OnClosed(const std::shared_ptr<Conn>& c) = 0;
  virtual void Log(LogLevel level, const std::string& message) const = 0;
  virtual std::size_t SubscriberBound() const = 0;
};

class Conn : public std::enable_shared_from_this<Conn> {
 public:
  using Socket = asio::local::stream_protocol::socket;
  Conn(ConnOwner& owner, Socket socket, std::size_t max_line) : owner_(owner), sock_(std::move(socket)), framer_(max_line) {}

  void Start() { Read(); }
  // Queues an encoded line. Live events count against the subscriber bound; replay and answers to
  // this connection's own requests do not.
  void Send(std::shared_ptr<const std::string> bytes, bool live);
  void Close();

  bool closed() const { return closed_; }
  std::size_t live_queued() const { return live_queued_; }

  bool subscribed = false;
  std::int64_t drop_budget = -1;  // events left before DropAfterEvents closes it; -1: off

 private:
  struct OutItem {
    std::shared_ptr<const std::string> bytes;
    bool live;
  };
  void Read();
  void Write();

  ConnOwner& owner_;
  Socket sock_;
  std::vector<char> rbuf_ = std::vector<char>(64 * 1024);
  LineFramer framer_;
  std::deque<OutItem> out_;
  std::vector<asio::const_buffer> wbufs_;
  std::size_t in_flight_ = 0;
  std::size_t live_queued_ = 0;
  bool writing_ = false;
  bool flush_posted_ = false;
  bool closed_ = false;
  bool close_after_flush_ = false;
};

}  // namespace sessionturn::runtime
