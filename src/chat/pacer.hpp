// Per-chat send pacing for the chat adapters: each chat gets at most one send per interval (and,
// where the platform says so, at most N a minute), and a 429's retry_after holds that chat only. The
// sends wait on timers, in order; none is dropped. Internal to src/chat.
#pragma once
#include <asio.hpp>

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

namespace sessionturn::chat {

class Pacer {
 public:
  using Clock = std::chrono::steady_clock;
  using Strand = asio::strand<asio::io_context::executor_type>;

  struct Options {
    std::chrono::milliseconds interval{1000};  // between two sends to one chat
    std::size_t per_minute = 0;                // 0: no minute bound
    // Which chats the minute bound applies to (Telegram: groups); empty: all.
    std::function<bool(const std::string& chat)> minute_bound_applies;
  };

  Pacer(asio::io_context& io, Strand strand, Options options);

  // Runs `send` on the strand once `chat`'s pace allows it; `waited` (may be empty) runs first, on the
  // strand, when the send has to wait.
  void Paced(const std::string& chat, std::function<void()> send, std::function<void()> waited = {});
  // Holds `chat` for retry_after (a 429).
  void Penalize(const std::string& chat, std::chrono::milliseconds retry_after);

 private:
  struct Pace {
    std::deque<Clock::time_point> slots;  // the latest reserved send times, oldest first
    Clock::time_point blocked_until{};    // a 429's retry_after
  };
  struct State {
    asio::io_context& io;
    Strand strand;
    Options options;
    std::unordered_map<std::string, Pace> pace;  // strand only
  };
  static void Wait(const std::shared_ptr<State>& state, const std::string& chat, Clock::time_point at,
                   std::function<void()> send);
  std::shared_ptr<State> state_;
};

}  // namespace sessionturn::chat
