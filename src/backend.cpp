// The parts of backend.hpp every backend shares: the blocking forms, names and selectors.
#include "sessionturn/backend.hpp"

#include <cstdlib>

#include "blocking.hpp"

namespace sessionturn {

std::string_view ToString(SessionPhase phase) noexcept {
  switch (phase) {
    case SessionPhase::pending: return "Pending";
    case SessionPhase::ready: return "Ready";
    case SessionPhase::suspended: return "Suspended";
    case SessionPhase::failed: return "Failed";
  }
  return "Unknown";
}

std::string_view ToString(SuspendReason reason) noexcept {
  switch (reason) {
    case SuspendReason::none: return "";
    case SuspendReason::idle: return "idle";
    case SuspendReason::owner: return "owner";
  }
  return "";
}

namespace {
// A bound for the blocking forms of operations that carry no deadline of their own: every one of
// them is a few requests or file operations, each with its own timeout well inside this.
constexpr std::chrono::milliseconds kOperationBound = std::chrono::minutes(5);

std::chrono::milliseconds Until(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return left.count() > 0 ? left : std::chrono::milliseconds(0);
}
}  // namespace

Result<EnsureResult> SessionBackend::Ensure(const std::string& name, const SessionSpec& spec) {
  return blocking::Call<EnsureResult>(GetContext(), kOperationBound, "SessionBackend::Ensure",
                                      [&](BackendHandler<EnsureResult> h) { AsyncEnsure(name, spec, std::move(h)); });
}

Result<ReadyTarget> SessionBackend::WaitReady(const std::string& name, std::chrono::steady_clock::time_point deadline,
                                              ReadyProgress progress, CancellationToken cancel) {
  return blocking::Call<ReadyTarget>(GetContext(), Until(deadline), "SessionBackend::WaitReady",
                                     [&](BackendHandler<ReadyTarget> h) {
                                       AsyncWaitReady(name, deadline, std::move(progress), std::move(cancel),
                                                      std::move(h));
                                     });
}

Result<SessionInfo> SessionBackend::Get(const std::string& name) {
  return blocking::Call<SessionInfo>(GetContext(), kOperationBound, "SessionBackend::Get",
                                     [&](BackendHandler<SessionInfo> h) { AsyncGet(name, std::move(h)); });
}

Result<std::vector<SessionInfo>> SessionBackend::List(const std::string& selector) {
  return blocking::Call<std::vector<SessionInfo>>(
      GetContext(), kOperationBound, "SessionBackend::List",
      [&](BackendHandler<std::vector<SessionInfo>> h) { AsyncList(selector, std::move(h)); });
}

Result<SessionInfo> SessionBackend::Suspend(const std::string& name) {
  return blocking::Call<SessionInfo>(GetContext(), kOperationBound, "SessionBackend::Suspend",
                                     [&](BackendHandler<SessionInfo> h) { AsyncSuspend(name, std::move(h)); });
}

Result<SessionInfo> SessionBackend::Resume(const std::string& name) {
  return blocking::Call<SessionInfo>(GetContext(), kOperationBound, "SessionBackend::Resume",
                                     [&](BackendHandler<SessionInfo> h) { AsyncResume(name, std::move(h)); });
}

Status SessionBackend::Delete(const std::string& name) {
  return blocking::CallStatus(GetContext(), kOperationBound, "SessionBackend::Delete",
                              [&](BackendStatusHandler h) { AsyncDelete(name, std::move(h)); });
}

Result<SessionInfo> SessionBackend::Annotate(const std::string& name,
                                             const std::map<std::string, std::optional<std::string>>& annotations) {
  return blocking::Call<SessionInfo>(GetContext(), kOperationBound, "SessionBackend::Annotate",
                                     [&](BackendHandler<SessionInfo> h) { AsyncAnnotate(name, annotations, std::move(h)); });
}

Status ValidateSessionName(std::string_view name) {
  // A DNS label (RFC 1123), the rule for Kubernetes object names and for our directory names.
  constexpr std::size_t kMaxName = 63;
  auto bad = [&](const std::string& why) {
    return Fail(Errc::invalid_argument, "Session name \"" + std::string(name.substr(0, 80)) + "\" " + why +
                                            " (a DNS label: 1-63 of a-z, 0-9 and '-', starting and ending with a "
                                            "letter or digit)");
  };
  if (name.empty()) return Fail(Errc::invalid_argument, "the Session name is empty");
  if (name.size() > kMaxName) return bad("is " + std::to_string(name.size()) + " characters long");
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
      return bad(std::string("contains '") + c + "'");
    }
  }
  if (name.front() == '-' || name.back() == '-') return bad("starts or ends with '-'");
  return {};
}

Result<std::map<std::string, std::string>> ParseLabelSelector(std::string_view selector) {
  std::map<std::string, std::string> out;
  while (!selector.empty()) {
    auto comma = selector.find(',');
    std::string_view term = selector.substr(0, comma);
    selector = comma == std::string_view::npos ? std::string_view() : selector.substr(comma + 1);
    auto eq = term.find('=');
    std::string_view key = term.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? std::string_view() : term.substr(eq + 1);
    if (!value.empty() && value.front() == '=') value.remove_prefix(1);  // "a==b" is equality too
    if (eq == std::string_view::npos || key.empty() || key.back() == '!') {
      return Fail(Errc::invalid_argument, "label selector term \"" + std::string(term) +
                                              "\" is not key=value (only equality terms are supported)");
    }
    out[std::string(key)] = std::string(value);
  }
  return out;
}

bool MatchesSelector(const std::map<std::string, std::string>& labels,
                     const std::map<std::string, std::string>& selector) {
  for (const auto& [key, value] : selector) {
    auto it = labels.find(key);
    if (it == labels.end() || it->second != value) return false;
  }
  return true;
}

std::string DefaultStateDir() {
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg != nullptr && *xdg == '/') {
    return std::string(xdg) + "/sessionturn";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && *home != '\0' ? home : ".") + "/.local/state/sessionturn";
}

}  // namespace sessionturn
