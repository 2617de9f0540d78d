// A ChatAdapter that records what the Router sends, for the router tests: posts and edits land in
// memory (ids "m1", "m2", ...), handlers run on the Context like a real adapter's, and faults are
// injected per call kind (fail the next N posts, fail every edit, answer edits with 429s).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "sessionturn/context.hpp"
#include "sessionturn/routing.hpp"

namespace router_test {

using namespace sessionturn;
using namespace std::chrono_literals;

struct SentOp {
  std::string kind;  // "post" or "edit"
  ThreadRef where;
  std::string message_id;
  std::string text;
  std::vector<std::vector<Button>> buttons;
  bool ok = true;
};

class RecordingAdapter : public ChatAdapter {
 public:
  // Message ids are `id_prefix` + 1, 2, ...: two adapters of one test (a bot and its restart) differ.
  RecordingAdapter(Context& context, ChatCapabilities caps, std::string id_prefix = "m")
      : context_(context), caps_(std::move(caps)), id_prefix_(std::move(id_prefix)) {}

  ChatCapabilities Capabilities() const override { return caps_; }

  void AsyncPost(const ThreadRef& where, OutboundMessage message, ChatHandler<std::string> handler) override {
    std::unique_lock lock(mu_);
    SentOp op{"post", where, {}, message.text, message.buttons, true};
    Result<std::string> out = Fail(Errc::unavailable, "injected: post failed");
    if (fail_posts > 0) {
      --fail_posts;
      op.ok = false;
    } else {
      op.message_id = id_prefix_ + std::to_string(++next_id_);
      texts_[op.message_id] = message.text;
      out = op.message_id;
    }
    ops_.push_back(op);
    cv_.notify_all();
    if (on_send) {
      lock.unlock();
      on_send(op);
      lock.lock();
    }
    const bool hold = (hold_button_posts && !message.buttons.empty()) ||
                      (!hold_posts_with.empty() && message.text.find(hold_posts_with) != std::string::npos);
    if (hold) {  // the platform shows it; the answer comes later
      held_.push_back([handler = std::move(handler), out = std::move(out)]() mutable { handler(std::move(out)); });
      return;
    }
    const bool twice = complete_posts_twice;
    lock.unlock();
    if (twice) {
      // A broken adapter: the same handler called twice, from two jobs that may run at once on the
      // Context's two threads.
      auto shared = std::make_shared<ChatHandler<std::string>>(std::move(handler));
      context_.Post([shared, out]() mutable { (*shared)(std::move(out)); });
      context_.Post([shared, out = std::move(out)]() mutable { (*shared)(std::move(out)); });
      return;
    }
    context_.Post([handler = std::move(handler), out = std::move(out)]() mutable { handler(std::move(out)); });
  }

  // Answers the posts held by hold_button_posts and hold_posts_with.
  void ReleaseHeld() {
    std::vector<std::function<void()>> held;
    {
      std::lock_guard lock(mu_);
      held.swap(held_);
    }
    for (auto& h : held) context_.Post(std::move(h));
  }

  void AsyncEdit(const ThreadRef& where, const std::string& message_id, OutboundMessage message,
                 ChatStatusHandler handler) override {
    std::unique_lock lock(mu_);
    SentOp op{"edit", where, message_id, message.text, message.buttons, true};
    Status out;
    if (fail_edits) {
      op.ok = false;
      out = Fail(Errc::invalid_argument, "injected: edit refused");
    } else if (rate_limited_edits > 0) {
      --rate_limited_edits;
      op.ok = false;
      Error e(Errc::unavailable, "injected: 429 Too Many Requests", 429);
      e.retry_after = 30ms;
      out = tl::unexpected<Error>(e);
    } else {
      texts_[message_id] = message.text;
    }
    ops_.push_back(op);
    cv_.notify_all();
    lock.unlock();
    if (on_send) on_send(op);
    context_.Post([handler = std::move(handler), out]() mutable { handler(out); });
  }

  void AsyncTyping(const ThreadRef& where, ChatStatusHandler handler) override {
    {
      std::lock_guard lock(mu_);
      typing_.push_back({where, std::chrono::steady_clock::now()});
    }
    context_.Post([handler = std::move(handler)]() mutable { handler(Status{}); });
  }
  std::size_t TypingCalls() {
    std::lock_guard lock(mu_);
    return typing_.size();
  }
  // When the typing indicator was asked for in `thread`, in order.
  std::vector<std::chrono::steady_clock::time_point> TypingTimesIn(const std::string& thread) {
    std::lock_guard lock(mu_);
    std::vector<std::chrono::steady_clock::time_point> out;
    for (const auto& [where, at] : typing_)
      if (where.thread == thread) out.push_back(at);
    return out;
  }

  // Waits until `pred` (called under the lock with the ops so far) holds.
  bool WaitFor(const std::function<bool(const std::vector<SentOp>&)>& pred, std::chrono::milliseconds timeout = 30s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return pred(ops_); });
  }
  // The message whose text contains `needle` now, or "".
  std::string FindMessage(const std::string& needle) {
    std::lock_guard lock(mu_);
    for (const auto& [id, text] : texts_) {
      if (text.find(needle) != std::string::npos) return id;
    }
    return {};
  }
  bool WaitForText(const std::string& needle, std::chrono::milliseconds timeout = 30s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      for (const auto& [id, text] : texts_) {
        if (text.find(needle) != std::string::npos) return true;
      }
      return false;
    });
  }
  std::string Text(const std::string& id) {
    std::lock_guard lock(mu_);
    auto it = texts_.find(id);
    return it == texts_.end() ? std::string() : it->second;
  }
  std::vector<SentOp> Ops() {
    std::lock_guard lock(mu_);
    return ops_;
  }
  // Every call so far, one line each: for a failing test's INFO.
  std::string Dump() {
    std::lock_guard lock(mu_);
    std::string out;
    for (const auto& op : ops_) {
      out += op.kind + " " + op.message_id + (op.ok ? "" : " (failed)") + ": " + op.text + "\n";
    }
    return out;
  }

  // How many messages (posted, or edited into) contain `needle` now.
  int CountMessagesWith(const std::string& needle) {
    std::lock_guard lock(mu_);
    int n = 0;
    for (const auto& [id, text] : texts_) n += text.find(needle) != std::string::npos ? 1 : 0;
    return n;
  }

  // Faults (set before the calls they affect).
  int fail_posts = 0;          // the next N posts fail
  bool fail_edits = false;     // every edit fails
  int rate_limited_edits = 0;  // the next N edits get a 429 (retry after 30 ms)
  bool hold_button_posts = false;  // posts with buttons answer only at ReleaseHeld()
  std::string hold_posts_with;     // so do posts whose text holds this (set before the calls)
  bool complete_posts_twice = false;  // every post's handler is called twice (an adapter's bug)
  // Called with each post and edit as it is sent (on the caller's thread, before the platform's
  // answer): a test looks at what the bot had stored by then. Set before the calls.
  std::function<void(const SentOp&)> on_send;

 private:
  Context& context_;
  const ChatCapabilities caps_;
  const std::string id_prefix_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<SentOp> ops_;
  std::vector<std::pair<ThreadRef, std::chrono::steady_clock::time_point>> typing_;
  std::map<std::string, std::string> texts_;
  std::vector<std::function<void()>> held_;
  int next_id_ = 0;
};

}  // namespace router_test
