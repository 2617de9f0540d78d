// The terminal side of the CLI: the one-line live status on stderr, the prompt read from stdin, and
// the agent's questions asked and answered on the terminal (or stdin, for scripts).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>

#include <sessionturn/driver.hpp>
#include <sessionturn/protocol.hpp>

namespace sessionturn_cli {

// The one-line live status on a terminal's stderr. Drawn only while stdout's cursor is at the start
// of a line (or stdout is not this terminal), so it never tears the streamed reply. Thread-safe.
class StatusLine {
 public:
  explicit StatusLine(bool enabled) : enabled_(enabled), start_(std::chrono::steady_clock::now()) {}

  void Set(std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    what_ = std::move(what);
  }
  // Runs `write` (which prints reply text) with the status line out of the way.
  template <typename F>
  void WriteOutput(F&& write, bool ends_line) {
    std::lock_guard<std::mutex> lock(mu_);
    ClearLocked();
    write();
    at_line_start_ = ends_line;
  }
  void Draw();
  void Stop();
  bool enabled() const { return enabled_; }

 private:
  void ClearLocked();

  const bool enabled_;
  const bool stdout_is_tty_ = isatty(STDOUT_FILENO) == 1;
  const std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::string what_ = "connecting";
  bool drawn_ = false;
  bool at_line_start_ = true;
  bool stopped_ = false;
};

std::string Trim(std::string s);

// All of stdin (the prompt given as '-'). Throws UsageError past kMaxPromptBytes.
std::string ReadAllStdin();

// A question handed from a Context worker (which must not block) to the main thread (which may).
struct PendingQuestion {
  sessionturn::Event event;
  sessionturn::Responder responder;
};

// Asks every question of one input.requested on `in_fd` (the terminal or stdin) and answers or
// declines through the responder. An empty answer (or end of input) declines the whole request:
// the runtime resolves an input only once every question has an answer. Gives up as soon as
// `abandon()` is true (the turn ended while the user was typing). `in_buffer` keeps what was read
// past a line for the next question.
void AskQuestions(const PendingQuestion& pending, int in_fd, std::string& in_buffer,
                  const std::function<bool()>& abandon, StatusLine& status);

}  // namespace sessionturn_cli
