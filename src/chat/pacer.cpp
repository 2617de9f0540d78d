// Per-chat send pacing (chat/pacer.hpp).
#include "chat/pacer.hpp"

#include <algorithm>

namespace sessionturn::chat {

namespace {
// Chats remembered at most before idle ones are forgotten (a bot in many chats must not grow forever).
constexpr std::size_t kMaxRememberedChats = 4096;
}  // namespace

Pacer::Pacer(asio::io_context& io, Strand strand, Options options)
    : state_(std::make_shared<State>(State{io, std::move(strand), std::move(options), {}})) {}

void Pacer::Paced(const std::string& chat, std::function<void()> send, std::function<void()> waited) {
  asio::post(state_->strand, [state = state_, chat, send = std::move(send), waited = std::move(waited)]() mutable {
    const auto now = Clock::now();
    if (state->pace.size() > kMaxRememberedChats) {
      std::erase_if(state->pace, [&](const auto& kv) {
        return kv.second.blocked_until < now &&
               (kv.second.slots.empty() || kv.second.slots.back() + std::chrono::minutes(1) < now);
      });
    }
    Pace& p = state->pace[chat];
    auto at = std::max(now, p.blocked_until);
    if (!p.slots.empty()) at = std::max(at, p.slots.back() + state->options.interval);
    const std::size_t per_minute = state->options.per_minute;
    const bool bounded = per_minute > 0 && (!state->options.minute_bound_applies ||
                                            state->options.minute_bound_applies(chat));
    if (bounded && p.slots.size() >= per_minute) {
      at = std::max(at, p.slots[p.slots.size() - per_minute] + std::chrono::minutes(1));
    }
    p.slots.push_back(at);
    while (p.slots.size() > std::max<std::size_t>(per_minute, 1)) p.slots.pop_front();
    if (at <= now) {
      send();
      return;
    }
    if (waited) waited();
    Wait(state, chat, at, std::move(send));
  });
}

// Runs `send` at `at`, or later when a 429 put the chat on hold meanwhile (a send already waiting
// must not go out inside the platform's retry_after).
void Pacer::Wait(const std::shared_ptr<State>& state, const std::string& chat, Clock::time_point at,
                 std::function<void()> send) {
  auto timer = std::make_shared<asio::steady_timer>(state->io, at);
  timer->async_wait(asio::bind_executor(state->strand, [state, chat, timer, send = std::move(send)](
                                                           const asio::error_code&) mutable {
    auto it = state->pace.find(chat);
    if (it != state->pace.end() && it->second.blocked_until > Clock::now()) {
      return Wait(state, chat, it->second.blocked_until, std::move(send));
    }
    send();
  }));
}

void Pacer::Penalize(const std::string& chat, std::chrono::milliseconds retry_after) {
  asio::post(state_->strand, [state = state_, chat, retry_after] {
    Pace& p = state->pace[chat];
    p.blocked_until = std::max(p.blocked_until, Clock::now() + retry_after);
  });
}

}  // namespace sessionturn::chat
