// Holds a Context's only worker in a job until released (or the holder is destroyed): what still
// completes meanwhile did not need that worker. Tests of the blocking verbs that run on the caller's
// thread (issue 14).
#pragma once

#include <chrono>
#include <future>

#include "sessionturn/context.hpp"

namespace sessionturn::testing_support {

class BusyWorker {
 public:
  explicit BusyWorker(Context& context) {
    auto entered = std::make_shared<std::promise<void>>();
    auto held = entered->get_future();
    context.Post([entered, release = release_.get_future().share()] {
      entered->set_value();
      release.wait_for(std::chrono::seconds(120));
    });
    held.wait_for(std::chrono::seconds(30));
  }
  ~BusyWorker() { Release(); }
  BusyWorker(const BusyWorker&) = delete;
  BusyWorker& operator=(const BusyWorker&) = delete;

  void Release() {
    if (!released_) {
      released_ = true;
      release_.set_value();
    }
  }

 private:
  std::promise<void> release_;
  bool released_ = false;
};

}  // namespace sessionturn::testing_support
