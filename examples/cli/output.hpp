// What the commands print and how an error becomes an exit code: aligned tables, JSON, ages.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <sessionturn/error.hpp>
#include <sessionturn/protocol.hpp>

namespace sessionturn_cli {

// Exit code of an error from a runtime (a turn, a watch, an interrupt).
int ExitCodeFor(const sessionturn::Error& error);

// Exit code of an error from where Sessions live (a cluster, the local backend): a Session that
// failed or that its owner suspended, and a backend we cannot reach or may not use, are "could not
// reach the runtime"; a refusal that names a thing (no such Session, a conflict) is a failed operation.
int SessionExitCode(const sessionturn::Error& error);

// Columns separated by three spaces, each as wide as its widest cell.
void PrintTable(const std::vector<std::vector<std::string>>& rows);
// Indented, invalid UTF-8 replaced (a provider's bytes must not turn output into an exception).
void PrintJson(const sessionturn::Json& value);

std::string OrDash(const std::string& s);
// "45s", "12m", "5h", "3d" (kubectl's AGE) since `then`; "-" for the epoch (not known).
std::string AgeSince(std::chrono::system_clock::time_point then);
// RFC 3339 in UTC, to the second ("2026-12-01T12:00:15Z"); "-" for the epoch (not known).
std::string FormatTimestamp(std::chrono::system_clock::time_point t);
// The same for an RFC 3339 timestamp ("2026-12-01T12:00:15Z"); "-" when it is missing or unreadable.
std::string AgeOfTimestamp(const std::string& stamp);

}  // namespace sessionturn_cli
