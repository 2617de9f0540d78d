// The retry helper every API client shares: Retry-After in both of its forms, jittered exponential
// backoff, a deadline it never passes, and the usual decision of what may be retried.
#include <curl/curl.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "sessionturn/http.hpp"

namespace sessionturn {

namespace {

// Delay-seconds beyond this are not a plan to come back: clamp rather than overflow. (The caller's
// max_backoff caps what is actually waited anyway.)
constexpr long long kMaxRetryAfterSeconds = 24LL * 3600;

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// An HTTP-date in any of the three forms RFC 9110 §5.6.7 requires recipients to accept. libcurl's
// date parser reads all three (and a few more lenient ones); we only hand it what looks like a date.
std::optional<std::time_t> ParseHttpDate(std::string_view value) {
  if (value.size() < 20 || value.size() > 64) return std::nullopt;
  if (!((value[0] >= 'A' && value[0] <= 'Z') || (value[0] >= 'a' && value[0] <= 'z'))) return std::nullopt;
  std::string text(value);
  std::time_t t = curl_getdate(text.c_str(), nullptr);
  if (t == -1) return std::nullopt;
  return t;
}

}  // namespace

std::optional<std::chrono::milliseconds> ParseRetryAfter(std::string_view value,
                                                         std::chrono::system_clock::time_point now) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  if (value.empty()) return std::nullopt;
  if (AllDigits(value)) {
    long long seconds = 0;
    for (char c : value) {
      seconds = seconds * 10 + (c - '0');
      if (seconds > kMaxRetryAfterSeconds) {
        seconds = kMaxRetryAfterSeconds;
        break;
      }
    }
    return std::chrono::milliseconds(seconds * 1000);
  }
  auto date = ParseHttpDate(value);
  if (!date) return std::nullopt;
  auto when = std::chrono::system_clock::from_time_t(*date);
  if (when <= now) return std::chrono::milliseconds(0);
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(when - now);
  return std::min(wait, std::chrono::milliseconds(kMaxRetryAfterSeconds * 1000));
}

namespace {

// Seeds for budgets made without one: a per-thread sequence seeded once from std::random_device
// (which costs a system call or a file read: too much for every call of an API client).
std::uint64_t FreshSeed() {
  thread_local std::uint64_t next = [] {
    std::random_device device;
    return (static_cast<std::uint64_t>(device()) << 32) ^ device();
  }();
  next += 0x9E3779B97F4A7C15ULL;
  return next;
}

}  // namespace

RetryBudget::RetryBudget(RetryPolicy policy, std::chrono::steady_clock::time_point deadline, std::uint64_t seed)
    : policy_(policy), deadline_(deadline), random_state_(seed != 0 ? seed : FreshSeed()) {
  policy_.max_attempts = std::max(1, policy_.max_attempts);
  policy_.initial_backoff = std::max(std::chrono::milliseconds(0), policy_.initial_backoff);
  policy_.max_backoff = std::max(policy_.initial_backoff, policy_.max_backoff);
  if (!(policy_.jitter >= 0.0)) policy_.jitter = 0.0;  // NaN too
  policy_.jitter = std::min(policy_.jitter, 1.0);
}

double RetryBudget::NextUnit() {
  // splitmix64 (Steele, Lea, Flood 2014): statistically fine for spreading retries, and tiny.
  std::uint64_t z = (random_state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

std::chrono::milliseconds RetryBudget::Backoff(int failures) {
  // initial * 2^(failures-1), capped; the shift is bounded so that it cannot overflow.
  const int doublings = std::clamp(failures - 1, 0, 30);
  const double base = std::min(static_cast<double>(policy_.initial_backoff.count()) * std::ldexp(1.0, doublings),
                               static_cast<double>(policy_.max_backoff.count()));
  if (policy_.jitter <= 0.0 || base <= 0.0) return std::chrono::milliseconds(static_cast<long long>(base));
  const double low = base * (1.0 - policy_.jitter);
  return std::chrono::milliseconds(std::llround(low + (base - low) * NextUnit()));
}

std::optional<std::chrono::milliseconds> RetryBudget::NextDelay(std::optional<std::chrono::milliseconds> retry_after,
                                                                std::chrono::steady_clock::time_point now) {
  if (attempts_ >= policy_.max_attempts) return std::nullopt;
  std::chrono::milliseconds wait = retry_after ? std::clamp(*retry_after, std::chrono::milliseconds(0), policy_.max_backoff)
                                               : Backoff(attempts_);
  // The next attempt must start before the deadline, with the wait behind it; one that could only
  // start at the deadline would fail at once, so report the failure we have instead.
  if (now + wait >= deadline_) return std::nullopt;
  ++attempts_;
  return wait;
}

bool ShouldRetry(const Result<HttpResponse>& outcome, bool idempotent) {
  if (!outcome) {
    switch (outcome.error().code) {
      case Errc::connection_failed: return true;  // nothing was sent
      case Errc::connection_lost:
      case Errc::timeout: return idempotent;
      default: return false;  // cancelled, too large, invalid: trying again changes nothing
    }
  }
  const int s = outcome->status;
  if (s == 429) return idempotent;
  if (s >= 500 && s != 501 && s != 505) return idempotent;
  return false;
}

std::optional<std::chrono::milliseconds> RetryAfterOf(const HttpResponse& response) {
  std::string value = response.Header("Retry-After");
  if (value.empty()) return std::nullopt;
  return ParseRetryAfter(value);
}

}  // namespace sessionturn
