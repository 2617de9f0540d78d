// `sessionturn watch`: the runtime's events as they happen, one per line (human or JSON), until
// Ctrl-C or until the runtime is gone for good.
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>

#include <sessionturn/context.hpp>
#include <sessionturn/driver.hpp>
#include <sessionturn/protocol.hpp>

#include "commands.hpp"
#include "connect.hpp"
#include "options.hpp"
#include "output.hpp"
#include "signals.hpp"

namespace sessionturn_cli {

namespace {

// "[12] assistant.message turn-3: the text (cut at 200 bytes, on one line)".
std::string HumanEvent(const st::Event& e) {
  std::string out = e.id > 0 ? "[" + std::to_string(e.id) + "] " : "[-] ";
  out += e.type;
  if (!e.turn_id.empty()) out += " " + e.turn_id;
  if (!e.status.empty()) out += " (" + e.status + ")";
  if (!e.tool_name.empty()) out += " tool=" + e.tool_name;
  std::string text = e.text;
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  if (!text.empty()) out += ": " + text;
  return out;
}

CLI::Validator EventId() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || errno != 0 || v < 0) {
          return "wants an event id (a non-negative integer), not \"" + value + "\"";
        }
        return {};
      },
      "");
}

}  // namespace

CLI::App* AddWatch(CLI::App& app, Args& args) {
  CLI::App* watch = app.add_subcommand("watch", "Print the Session's events as they happen, until Ctrl-C");
  SetSynopsis(*watch, "sessionturn watch (--socket PATH | --session NAME [BACKEND] | --exec CMD [ARG...]) [--since ID] [--json]");
  AddConnectionOptions(*watch, args);
  watch->add_option_function<std::int64_t>(
          "--since", [&args](std::int64_t id) { args.since = id; },
          "start after event ID (default: from the start of the retained journal)")
      ->check(EventId())
      ->type_name("ID");
  AddJsonFlag(*watch, args, "print each event as its JSON line");
  return watch;
}

int RunWatch(const Args& args) {
  st::Context context;
  Connection connection = Connect(context, args);
  st::Driver driver(context, connection.connector);
  // Shared with the detached signal watcher and the driver's handlers, which may outlive this frame.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<st::Status> ended;
    bool stop_requested = false;
  };
  auto state = std::make_shared<State>();

  st::WatchOptions options;
  options.since = args.since.value_or(0);
  auto handle = driver.Watch(
      options,
      [&args](const st::Event& e) {
        // Without a journal id the runtime answers `since > 0` with a full replay (PROTOCOL.md §4):
        // the cut is ours to make.
        if (args.since && e.id > 0 && e.id <= *args.since) return;
        const std::string line = args.json ? (e.line.empty() ? st::EncodeEvent(e) : e.line) : HumanEvent(e);
        std::fwrite(line.data(), 1, line.size(), stdout);
        std::fputc('\n', stdout);
        std::fflush(stdout);
      },
      [state](st::Status s) {
        std::lock_guard<std::mutex> lock(state->mu);
        state->ended = std::move(s);
        state->cv.notify_all();
      });
  SetSignalHandler([state] {
    std::lock_guard<std::mutex> lock(state->mu);
    state->stop_requested = true;
    state->cv.notify_all();
  });
  {
    // A watch has no deadline of its own: it runs until Ctrl-C or until the runtime is gone for good.
    std::unique_lock<std::mutex> lock(state->mu);
    state->cv.wait(lock, [&] { return state->ended.has_value() || state->stop_requested; });
  }
  handle.Stop();
  std::unique_lock<std::mutex> lock(state->mu);
  if (!state->ended || *state->ended) return kExitCompleted;
  std::fprintf(stderr, "sessionturn: watch ended: %s\n", state->ended->error().ToString().c_str());
  return ExitCodeFor(state->ended->error());
}

}  // namespace sessionturn_cli
