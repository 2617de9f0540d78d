#include "sessionturn/context.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <asio.hpp>

#include "context_gate.hpp"

namespace sessionturn {

std::string_view ToString(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::debug: return "debug";
    case LogLevel::info: return "info";
    case LogLevel::warning: return "warning";
    case LogLevel::error: return "error";
  }
  return "unknown";
}

LogSink StderrLogSink() {
  return [](LogLevel level, std::string_view message) {
    // One fprintf per line keeps concurrent lines whole.
    std::fprintf(stderr, "sessionturn: %.*s: %.*s\n", static_cast<int>(ToString(level).size()),
                 ToString(level).data(), static_cast<int>(message.size()), message.data());
  };
}

namespace {
thread_local const Context* tls_worker_of = nullptr;
}

struct Context::Impl {
  ContextOptions options;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::vector<std::thread> workers;
  std::mutex stop_mu;
  bool stopped = false;               // joined (under stop_mu)
  std::atomic<bool> joined{false};
  std::atomic<bool> stopping{false};  // Stop() was called
  std::shared_ptr<detail::ContextGate> gate;

  explicit Impl(ContextOptions o)
      : options(std::move(o)), io(options.threads < 1 ? 1 : options.threads),
        gate(std::make_shared<detail::ContextGate>(io)) {}
};

Context::Context(ContextOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  if (impl_->options.threads < 1) impl_->options.threads = 1;
  if (!impl_->options.log_sink) impl_->options.log_sink = StderrLogSink();
  impl_->guard.emplace(impl_->io.get_executor());
  impl_->workers.reserve(static_cast<std::size_t>(impl_->options.threads));
  for (int i = 0; i < impl_->options.threads; ++i) {
    impl_->workers.emplace_back([this] {
      tls_worker_of = this;
      for (;;) {
        try {
          impl_->io.run();
          break;
        } catch (const std::exception& e) {
          // A handler threw: log it and keep serving; one bad callback must not stop every turn.
          Log(LogLevel::error, std::string("unhandled exception in a Context handler: ") + e.what());
        } catch (...) {
          Log(LogLevel::error, "unhandled non-standard exception in a Context handler");
        }
      }
      tls_worker_of = nullptr;
    });
  }
}

Context::~Context() { Stop(); }

asio::io_context& Context::io() noexcept { return impl_->io; }

void Context::Post(std::function<void()> fn) { asio::post(impl_->io, std::move(fn)); }

bool Context::InWorkerThread() const noexcept { return tls_worker_of == this; }

int Context::threads() const noexcept { return impl_->options.threads; }

bool Context::ShouldLog(LogLevel level) const noexcept {
  return static_cast<int>(level) >= static_cast<int>(impl_->options.min_level);
}

void Context::Log(LogLevel level, std::string_view message) const {
  if (!ShouldLog(level)) return;
  try {
    impl_->options.log_sink(level, message);
  } catch (...) {
    // A throwing sink must not take the library down with it.
  }
}

void Context::Stop() {
  std::lock_guard<std::mutex> lock(impl_->stop_mu);
  if (impl_->stopped) return;
  impl_->stopping.store(true);
  impl_->gate->Close();
  impl_->guard.reset();
  impl_->io.stop();
  if (InWorkerThread()) return;  // cannot join ourselves; the owner's Stop()/destructor will
  for (auto& t : impl_->workers) {
    if (t.joinable()) t.join();
  }
  impl_->stopped = true;
  impl_->joined.store(true);
}

namespace detail {

bool ContextGate::Post(std::function<void()> fn) {
  std::lock_guard lock(mu_);
  if (io_ == nullptr) return false;
  asio::post(*io_, std::move(fn));
  return true;
}

void ContextGate::Close() {
  std::lock_guard lock(mu_);
  io_ = nullptr;
}

std::shared_ptr<ContextGate> GateOf(Context& context) { return context.impl_->gate; }

}  // namespace detail

bool Context::Stopped() const noexcept { return impl_->stopping.load(); }

bool Context::Joined() const noexcept { return impl_->joined.load(); }

}  // namespace sessionturn
