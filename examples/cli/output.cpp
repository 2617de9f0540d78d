// Tables, JSON, ages and exit codes (output.hpp).
#include "output.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "args.hpp"

namespace sessionturn_cli {

int ExitCodeFor(const st::Error& error) {
  switch (error.code) {
    case st::Errc::invalid_argument: return kExitUsage;
    case st::Errc::connection_failed:
    case st::Errc::connection_lost: return kExitUnreachable;
    case st::Errc::timeout: return kExitTimeout;
    case st::Errc::rejected: return kExitRejected;
    default: return kExitTurnFailed;
  }
}

int SessionExitCode(const st::Error& error) {
  switch (error.code) {
    case st::Errc::invalid_argument: return kExitUsage;
    case st::Errc::timeout: return kExitTimeout;
    case st::Errc::failed:
    case st::Errc::unavailable:
    case st::Errc::connection_failed:
    case st::Errc::connection_lost:
    case st::Errc::unauthorized:
    case st::Errc::forbidden: return kExitUnreachable;
    default: return kExitTurnFailed;
  }
}

void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 3, ' ');
    }
    std::fprintf(stdout, "%s\n", line.c_str());
  }
}

void PrintJson(const st::Json& value) {
  std::cout << value.dump(2, ' ', false, st::Json::error_handler_t::replace) << std::endl;
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

std::string AgeSince(std::chrono::system_clock::time_point then) {
  if (then == std::chrono::system_clock::time_point{}) return "-";
  const auto elapsed = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now() - then);
  const long long secs = std::max<long long>(0, elapsed.count());
  if (secs < 120) return std::to_string(secs) + "s";
  if (secs < 2 * 3600) return std::to_string(secs / 60) + "m";
  if (secs < 48 * 3600) return std::to_string(secs / 3600) + "h";
  return std::to_string(secs / 86400) + "d";
}

std::string FormatTimestamp(std::chrono::system_clock::time_point t) {
  if (t == std::chrono::system_clock::time_point{}) return "-";
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

std::string AgeOfTimestamp(const std::string& stamp) {
  std::tm tm{};
  const char* end = stamp.empty() ? nullptr : ::strptime(stamp.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) return "-";
  return AgeSince(std::chrono::system_clock::from_time_t(::timegm(&tm)));
}

}  // namespace sessionturn_cli
