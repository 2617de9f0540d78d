// Posting to a Context from a thread it does not own (the credential refresher), where the Context
// may stop or be destroyed while that thread works: the gate outlives the Context and is closed by
// Context::Stop(), so a post either reaches a live event loop or is refused.
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include "sessionturn/context.hpp"

namespace asio {
class io_context;
}

namespace sessionturn::detail {

class ContextGate {
 public:
  explicit ContextGate(asio::io_context& io) : io_(&io) {}
  // Posts `fn` to the event loop unless the Context was stopped; false (fn not run) when it was.
  // The caller then drops `fn` as the stopped loop would have: operations in flight never report.
  bool Post(std::function<void()> fn);
  // Refuses every later Post; once it returned, no Post is touching the event loop.
  void Close();

 private:
  std::mutex mu_;
  asio::io_context* io_;  // null once closed
};

std::shared_ptr<ContextGate> GateOf(Context& context);

}  // namespace sessionturn::detail
