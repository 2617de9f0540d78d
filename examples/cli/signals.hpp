// Ctrl-C for the CLI: SIGINT/SIGTERM are blocked in every thread and taken by one watcher thread
// with sigwait, so the handling is ordinary code (cancel the turn, stop the watch) rather than
// async-signal-safe contortions.
#pragma once

#include <functional>

namespace sessionturn_cli {

// Blocks SIGINT/SIGTERM in the calling thread (and every thread it starts later) and ignores
// SIGPIPE. Call from main before any thread exists.
void BlockTerminationSignals();

// Starts the watcher thread (once, from main, after BlockTerminationSignals). The first signal runs
// the handler set with SetSignalHandler, or, when none is set (while the CLI waits for something
// that has no cancellation of its own), ends the process at once with kExitTurnFailed, as a
// cancelled turn does. A second signal exits at once (the user insists).
void StartSignalWatcher();

// What the first signal does from now on. The handler runs on the watcher thread, which may outlive
// the caller's frame: capture shared state, not references.
void SetSignalHandler(std::function<void()> on_first);

}  // namespace sessionturn_cli
