// bench/router's ChatAdapter: every post and edit is timestamped per thread and completes at once
// (its handler posted to the Context, as a real adapter's lands there), with no delay. One slot per
// chat thread holds the message in flight there; the bench arms it before HandleMessage.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench_util.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/routing.hpp"

namespace bench {

// The echo provider's reply starts so ("echo #N: <prompt>"); the router's receipts and progress
// start with an icon, so an edit that starts so carries the final reply (a progress edit may show
// the reply's start too, but behind "Working…").
inline constexpr std::string_view kFinalPrefix = "echo #";

// What happened to the message in flight in one thread.
struct ThreadSlot {
  std::string token;  // in the message's text, so in its echo; empty: nothing in flight
  Clock::time_point sent{};
  std::optional<Clock::time_point> placeholder;  // the first post in the thread after `sent`
  std::optional<Clock::time_point> final_reply;  // the post or edit carrying the echo with `token`
  int finals = 0;                                // finals seen for `token` (must end as 1)
};

class BenchAdapter : public sessionturn::ChatAdapter {
 public:
  // `chats`: the chat id of each thread, in order (each thread is alone in its chat).
  BenchAdapter(sessionturn::Context& context, sessionturn::ChatCapabilities caps, const std::vector<std::string>& chats)
      : context_(context), caps_(std::move(caps)), slots_(chats.size()) {
    for (std::size_t i = 0; i < chats.size(); ++i) index_.emplace(chats[i], i);
  }

  sessionturn::ChatCapabilities Capabilities() const override { return caps_; }

  void AsyncPost(const sessionturn::ThreadRef& where, sessionturn::OutboundMessage message,
                 sessionturn::ChatHandler<std::string> handler) override {
    const auto now = Clock::now();
    std::string id;
    {
      std::lock_guard lock(mu_);
      id = "m" + std::to_string(++next_id_);
      ++posts_;
      if (ThreadSlot* s = Find(where)) {
        if (!s->placeholder && !s->token.empty()) s->placeholder = now;
        Saw(*s, message.text, now);
      }
    }
    context_.Post([handler = std::move(handler), id = std::move(id)]() mutable { handler(std::move(id)); });
  }

  void AsyncEdit(const sessionturn::ThreadRef& where, const std::string&, sessionturn::OutboundMessage message,
                 sessionturn::ChatStatusHandler handler) override {
    const auto now = Clock::now();
    {
      std::lock_guard lock(mu_);
      ++edits_;
      if (ThreadSlot* s = Find(where)) Saw(*s, message.text, now);
    }
    context_.Post([handler = std::move(handler)]() mutable { handler(sessionturn::Status{}); });
  }

  // Before HandleMessage: the message with `token` is in flight in thread `i` from `sent` on.
  void Arm(std::size_t i, std::string token, Clock::time_point sent) {
    std::lock_guard lock(mu_);
    slots_[i] = ThreadSlot{std::move(token), sent, {}, {}, 0};
  }
  ThreadSlot Slot(std::size_t i) {
    std::lock_guard lock(mu_);
    return slots_[i];
  }
  // Final replies seen since the start, and those that were wrong (a second one for a message, or
  // an echo of another message's text).
  std::uint64_t Finals() {
    std::lock_guard lock(mu_);
    return finals_;
  }
  std::uint64_t WrongFinals() {
    std::lock_guard lock(mu_);
    return wrong_finals_;
  }
  std::uint64_t Posts() {
    std::lock_guard lock(mu_);
    return posts_;
  }
  std::uint64_t Edits() {
    std::lock_guard lock(mu_);
    return edits_;
  }

 private:
  ThreadSlot* Find(const sessionturn::ThreadRef& where) {
    auto it = index_.find(where.chat);
    return it == index_.end() ? nullptr : &slots_[it->second];
  }
  void Saw(ThreadSlot& s, const std::string& text, Clock::time_point now) {
    if (text.compare(0, kFinalPrefix.size(), kFinalPrefix) != 0) return;
    if (s.token.empty() || text.find(s.token) == std::string::npos || ++s.finals > 1) {
      ++wrong_finals_;
      return;
    }
    s.final_reply = now;
    ++finals_;
  }

  sessionturn::Context& context_;
  const sessionturn::ChatCapabilities caps_;
  std::unordered_map<std::string, std::size_t> index_;  // chat id -> slot; not changed after construction
  std::mutex mu_;
  std::vector<ThreadSlot> slots_;
  std::uint64_t next_id_ = 0;
  std::uint64_t posts_ = 0;
  std::uint64_t edits_ = 0;
  std::uint64_t finals_ = 0;
  std::uint64_t wrong_finals_ = 0;
};

}  // namespace bench
