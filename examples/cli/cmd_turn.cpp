// `sessionturn turn`: one turn against a runtime. The reply streams to stdout as it comes (or one
// JSON object at the end), a live status line goes to a terminal's stderr, questions are declined
// or asked on the terminal, and the outcome becomes the exit code.
#include <fcntl.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <iostream>
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
#include "terminal.hpp"

namespace sessionturn_cli {

namespace {

// What the Context worker's callbacks hand to the main thread, which waits, asks and draws.
struct TurnState {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<PendingQuestion> questions;
  std::optional<st::Result<st::TurnResult>> outcome;
  // Touched only by the event callbacks (one worker, in order), read after the turn ended.
  bool streamed_any = false;
  bool accepted = false;
  bool started = false;
  st::TurnRef ref;
};

// `ref`: where the turn stood when it ended without a result (timeout, cancel), so a script can
// follow it later (`watch --since`), or find it in the journal.
void PrintJsonResult(const st::Result<st::TurnResult>& result, const st::TurnRef& ref) {
  st::Json out = st::Json::object();
  if (result) {
    out["requestId"] = result->request_id;
    out["turnId"] = result->turn_id;
    out["lastEventId"] = result->last_event_id;
    out["journalId"] = result->journal_id;
    out["status"] = std::string(st::ToString(result->status));
    out["text"] = result->text;
    out["message"] = result->error_message;
    out["declinedQuestions"] = result->questions_declined;
    out["answeredQuestions"] = result->questions_answered;
    out["shared"] = result->shared;
    out["reconnects"] = result->reconnects;
  } else {
    // No turn result: the status is the kind of error, so one JSON shape serves every outcome. The
    // turn id stays once the runtime accepted the prompt: the turn may still be in its journal.
    const st::Error& error = result.error();
    out["requestId"] = ref.request_id;
    out["turnId"] = ref.turn_id;
    out["lastEventId"] = ref.last_event_id;
    out["journalId"] = ref.journal_id;
    out["status"] = error.code == st::Errc::timeout    ? "timeout"
                    : error.code == st::Errc::rejected ? "rejected"
                                                       : "error";
    out["error"] = std::string(st::ToString(error.code));
    out["text"] = "";
    out["message"] = error.message;
    out["declinedQuestions"] = 0;
    out["answeredQuestions"] = 0;
    out["shared"] = false;
    out["reconnects"] = 0;
  }
  // error_handler_t::replace: a provider's invalid UTF-8 must not turn the result into an exception.
  std::cout << out.dump(-1, ' ', false, st::Json::error_handler_t::replace) << std::endl;
}

// The status line follows the turn; deltas stream to stdout unless the output is JSON.
void FollowEvents(st::TurnOptions& options, TurnState& state, StatusLine& status, bool json) {
  options.on_accepted = [&state](const st::TurnRef& accepted_ref) { state.ref = accepted_ref; };
  options.on_event = [&state, &status, json](const st::Event& e) {
    if (e.id > state.ref.last_event_id) state.ref.last_event_id = e.id;
    if (e.Is(st::event_type::kUserMessage) || e.Is(st::event_type::kUserMessageUpdated)) {
      if (!state.accepted) {
        state.accepted = true;
        if (!state.started) status.Set("queued behind another turn");
      }
    } else if (e.Is(st::event_type::kTurnStarted)) {
      state.started = true;
      status.Set("working");
    } else if (e.Is(st::event_type::kToolStarted)) {
      status.Set("running tool " + (e.tool_name.empty() ? e.tool_id : e.tool_name));
    } else if (e.Is(st::event_type::kToolCompleted) || e.Is(st::event_type::kInputResolved)) {
      status.Set("working");
    } else if (e.Is(st::event_type::kInputRequested)) {
      status.Set("waiting for an answer");
    } else if (e.Is(st::event_type::kAssistantDelta) && !json && !e.text.empty()) {
      state.streamed_any = true;
      status.WriteOutput(
          [&] {
            std::fwrite(e.text.data(), 1, e.text.size(), stdout);
            std::fflush(stdout);
          },
          e.text.back() == '\n');
    }
  };
}

// The main thread waits for the outcome, asks questions and keeps the status line ticking. Answers
// come from the terminal when stdin carried the prompt, else from stdin (so a script can pipe them in).
void AwaitOutcome(const Args& args, TurnState& state, StatusLine& status) {
  int answers_fd = STDIN_FILENO;
  if (args.ask && *args.prompt == "-") answers_fd = ::open("/dev/tty", O_RDONLY | O_CLOEXEC);  // -1: decline all
  std::string answers_buffer;
  auto turn_over = [&state] {
    std::lock_guard<std::mutex> lock(state.mu);
    return state.outcome.has_value();
  };
  std::unique_lock<std::mutex> lock(state.mu);
  while (!state.outcome) {
    if (!state.questions.empty()) {
      PendingQuestion q = std::move(state.questions.front());
      state.questions.pop_front();
      lock.unlock();
      if (answers_fd >= 0) {
        AskQuestions(q, answers_fd, answers_buffer, turn_over, status);
      } else {
        q.responder.Decline();
      }
      lock.lock();
      continue;
    }
    state.cv.wait_for(lock, kStatusRefresh);
    lock.unlock();
    status.Draw();
    lock.lock();
  }
  lock.unlock();
  status.Stop();
  if (answers_fd > STDIN_FILENO) ::close(answers_fd);
}

int Report(const Args& args, const TurnState& state) {
  const st::Result<st::TurnResult>& result = *state.outcome;
  if (args.json) {
    PrintJsonResult(result, state.ref);
  } else if (result) {
    // Deltas are what the user saw; without any, print the final reply.
    if (!state.streamed_any && !result->text.empty()) std::fwrite(result->text.data(), 1, result->text.size(), stdout);
    if (state.streamed_any || !result->text.empty()) std::fputc('\n', stdout);
    std::fflush(stdout);
    if (result->status != st::TurnStatus::completed) {
      std::fprintf(stderr, "sessionturn: turn %s %s%s%s\n", result->turn_id.c_str(),
                   std::string(st::ToString(result->status)).c_str(), result->error_message.empty() ? "" : ": ",
                   result->error_message.c_str());
    }
  } else {
    std::fprintf(stderr, "sessionturn: %s\n", result.error().ToString().c_str());
  }
  if (!result) return ExitCodeFor(result.error());
  return result->status == st::TurnStatus::completed ? kExitCompleted : kExitTurnFailed;
}

CLI::Validator QuestionMode() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        return value == "ask" || value == "decline" ? std::string() : "wants decline or ask, not \"" + value + "\"";
      },
      "");
}

}  // namespace

CLI::App* AddTurn(CLI::App& app, Args& args) {
  CLI::App* turn = app.add_subcommand("turn", "Submit one turn and stream the reply");
  SetSynopsis(*turn, "sessionturn turn (--socket PATH | --session NAME [BACKEND] | --exec CMD [ARG...]) [options] PROMPT");
  AddConnectionOptions(*turn, args);
  turn->add_option("--timeout", args.timeout_seconds,
                   "bound for the whole turn (default 3600); then the turn is abandoned")
      ->check(PositiveSeconds())
      ->type_name("SECONDS");
  turn->add_option_function<std::string>(
          "--questions", [&args](const std::string& mode) { args.ask = mode == "ask"; },
          "decline (default) or ask: show each question with numbered options and read the answer (a number, "
          "numbers for multi-select, or free text; an empty line declines) from stdin, or from the terminal "
          "when PROMPT is '-'")
      ->check(QuestionMode())
      ->type_name("MODE");
  turn->add_flag("--no-reconnect", args.no_reconnect, "fail instead of reconnecting when the stream drops");
  turn->add_flag("--allow-commands", args.allow_commands,
                 "let a prompt starting with '!' or '/goal' reach the runtime as a command");
  AddJsonFlag(*turn, args, "print one JSON object at the end instead of streaming the reply");
  turn->add_option("PROMPT", args.prompt_args, "the prompt; '-' reads it from stdin (after --, it may start with '-')")
      ->type_name("");
  return turn;
}

void CheckTurn(Args& args) {
  CheckConnection(args);
  if (args.prompt_args.size() > 1) throw UsageError{"more than one PROMPT given (quote the prompt as one argument)"};
  if (args.prompt_args.empty()) throw UsageError{"no PROMPT given ('-' reads it from stdin)"};
  args.prompt = args.prompt_args.front();
}

int RunTurn(const Args& args) {
  std::string prompt = *args.prompt;
  if (prompt == "-") prompt = ReadAllStdin();
  if (Trim(prompt).empty()) throw UsageError{"the prompt is empty"};

  StatusLine status(!args.json && isatty(STDERR_FILENO) == 1);
  // Before the driver, so it outlives every callback the driver may still run while it goes.
  TurnState state;
  st::ContextOptions context_options;
  context_options.threads = 1;
  st::Context context(context_options);
  Connection connection = Connect(context, args);
  st::Driver driver(context, connection.connector);

  // Shared with the detached signal watcher, which may outlive this frame.
  auto cancel = std::make_shared<st::CancellationSource>();
  SetSignalHandler([cancel] { cancel->Cancel(); });

  st::TurnOptions options;
  if (args.timeout_seconds > 0) {
    options.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(args.timeout_seconds * 1000));
  }
  options.cancel = cancel->Token();
  options.reconnect.enabled = !args.no_reconnect;
  options.allow_commands = args.allow_commands;
  options.request_id = st::NewRequestId();
  state.ref.request_id = options.request_id;
  status.Set("connecting to " + ConnectionName(args));
  FollowEvents(options, state, status, args.json);
  if (args.ask) {
    options.questions = st::QuestionPolicy::ask;
    options.on_question = [&state](const st::Event& e, st::Responder responder) {
      std::lock_guard<std::mutex> lock(state.mu);
      state.questions.push_back(PendingQuestion{e, std::move(responder)});
      state.cv.notify_all();
    };
  }
  driver.AsyncSubmitTurn(prompt, options, [&state](st::Result<st::TurnResult> r) {
    std::lock_guard<std::mutex> lock(state.mu);
    state.outcome = std::move(r);
    state.cv.notify_all();
  });
  AwaitOutcome(args, state, status);
  return Report(args, state);
}

}  // namespace sessionturn_cli
