// Status line, prompt input and questions on the terminal (terminal.hpp).
#include "terminal.hpp"

#include <poll.h>
#include <termios.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "args.hpp"

namespace sessionturn_cli {

namespace {

// A prompt read from stdin larger than this is almost certainly a mistake (a binary piped in).
constexpr std::size_t kMaxPromptBytes = 4u << 20;

// Turns terminal echo off while a secret answer is typed (when `fd` is a terminal at all).
class EchoOff {
 public:
  EchoOff(int fd, bool active) : fd_(fd) {
    if (!active || fd_ < 0 || isatty(fd_) != 1 || tcgetattr(fd_, &saved_) != 0) return;
    termios quiet = saved_;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    on_ = tcsetattr(fd_, TCSANOW, &quiet) == 0;
  }
  ~EchoOff() {
    if (!on_) return;
    tcsetattr(fd_, TCSANOW, &saved_);
    std::fputc('\n', stderr);
  }
  EchoOff(const EchoOff&) = delete;
  EchoOff& operator=(const EchoOff&) = delete;

 private:
  int fd_;
  termios saved_{};
  bool on_ = false;
};

// Reads one line from `fd` (unbuffered, so nothing else's buffering steals input). Gives up (empty
// optional) at end of input or as soon as `abandon()` is true: the turn may end (timeout, Ctrl-C,
// the runtime resolving the question) while the user is still typing.
std::optional<std::string> ReadAnswerLine(int fd, std::string& buffer, const std::function<bool()>& abandon) {
  for (;;) {
    const auto nl = buffer.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      return line;
    }
    if (abandon()) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(kStatusRefresh.count()));
    if (ready < 0 && errno != EINTR) return std::nullopt;
    if (ready <= 0) continue;
    char chunk[1024];
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (buffer.empty()) return std::nullopt;
      std::string line = std::move(buffer);  // a last line without its newline
      buffer.clear();
      return line;
    }
    buffer.append(chunk, static_cast<std::size_t>(n));
  }
}

void PrintQuestion(const sessionturn::InputQuestion& q) {
  std::fprintf(stderr, "\n%s%s%s\n", q.header.empty() ? "" : q.header.c_str(), q.header.empty() ? "" : ": ",
               q.question.c_str());
  for (std::size_t i = 0; i < q.options.size(); ++i) {
    std::fprintf(stderr, "  %zu) %s%s%s\n", i + 1, q.options[i].label.c_str(),
                 q.options[i].description.empty() ? "" : " - ", q.options[i].description.c_str());
  }
  if (q.options.empty()) {
    std::fprintf(stderr, "Your answer (empty line declines): ");
  } else if (q.multi_select) {
    std::fprintf(stderr, "Numbers separated by commas, or your own answer (empty line declines): ");
  } else {
    std::fprintf(stderr, "A number, or your own answer (empty line declines): ");
  }
  std::fflush(stderr);
}

// Numbers pick options; anything else is free text, taken as it is.
std::vector<std::string> ChosenAnswers(const sessionturn::InputQuestion& q, const std::string& line) {
  bool all_numbers = !q.options.empty();
  std::stringstream parts(line);
  std::string part;
  std::vector<std::string> labels;
  while (all_numbers && std::getline(parts, part, ',')) {
    part = Trim(part);
    char* end = nullptr;
    const long n = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || n < 1 || static_cast<std::size_t>(n) > q.options.size()) {
      all_numbers = false;
      break;
    }
    labels.push_back(q.options[static_cast<std::size_t>(n) - 1].label);
  }
  if (all_numbers && (q.multi_select || labels.size() == 1)) return labels;
  return {line};
}

}  // namespace

void StatusLine::Draw() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_ || stopped_) return;
  if (stdout_is_tty_ && !at_line_start_) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr, "\r\033[K[%.1fs] %s", elapsed, what_.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void StatusLine::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  ClearLocked();
  stopped_ = true;
}

void StatusLine::ClearLocked() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

std::string Trim(std::string s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

std::string ReadAllStdin() {
  std::string text;
  char buffer[65536];
  for (;;) {
    const std::size_t n = std::fread(buffer, 1, sizeof buffer, stdin);
    if (n == 0) break;
    text.append(buffer, n);
    if (text.size() > kMaxPromptBytes) {
      throw UsageError{"the prompt on stdin is larger than " + std::to_string(kMaxPromptBytes >> 20) + " MiB"};
    }
  }
  return text;
}

void AskQuestions(const PendingQuestion& pending, int in_fd, std::string& in_buffer,
                  const std::function<bool()>& abandon, StatusLine& status) {
  status.WriteOutput([] {}, true);
  std::map<std::string, std::vector<std::string>> answers;
  for (const sessionturn::InputQuestion& q : pending.event.questions) {
    PrintQuestion(q);
    std::optional<std::string> got;
    {
      EchoOff echo_off(in_fd, q.secret);
      got = ReadAnswerLine(in_fd, in_buffer, abandon);
    }
    if (abandon()) {
      std::fprintf(stderr, "\n");
      return;  // the turn is over; nothing to answer any more
    }
    const std::string line = Trim(got.value_or(""));
    if (line.empty()) {
      std::fprintf(stderr, "(declined)\n");
      pending.responder.Decline();
      return;
    }
    answers[q.id] = ChosenAnswers(q, line);
  }
  pending.responder.Answer(std::move(answers));
}

}  // namespace sessionturn_cli
