// The retry helper: Retry-After in seconds and as an HTTP date, jittered backoff within its bounds,
// attempts, a deadline that is never passed, and the default retry decision.
#include <catch2/catch.hpp>

#include <set>

#include "sessionturn/http.hpp"

using namespace sessionturn;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

// Sun, 06 Nov 1994 08:49:37 GMT, the RFC's example date.
const std::chrono::system_clock::time_point kRfcDate = std::chrono::system_clock::from_time_t(784111777);

HttpResponse WithStatus(int status) {
  HttpResponse r;
  r.status = status;
  return r;
}

}  // namespace

TEST_CASE("retry: Retry-After as delay-seconds", "[http][retry]") {
  CHECK(ParseRetryAfter("120") == milliseconds(120'000));
  CHECK(ParseRetryAfter("0") == milliseconds(0));
  CHECK(ParseRetryAfter(" 3\t") == milliseconds(3'000));
  // Absurdly large values are clamped, not overflowed.
  auto huge = ParseRetryAfter("99999999999999999999999");
  REQUIRE(huge);
  CHECK(*huge == milliseconds(24LL * 3600 * 1000));
  CHECK_FALSE(ParseRetryAfter(""));
  CHECK_FALSE(ParseRetryAfter("-1"));
  CHECK_FALSE(ParseRetryAfter("1.5"));
  CHECK_FALSE(ParseRetryAfter("soon"));
  CHECK_FALSE(ParseRetryAfter("12 seconds"));
}

TEST_CASE("retry: Retry-After as an HTTP date, in all three forms", "[http][retry]") {
  const auto now = kRfcDate - seconds(10);
  CHECK(ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", now) == milliseconds(10'000));  // IMF-fixdate
  CHECK(ParseRetryAfter("Sunday, 06-Nov-94 08:49:37 GMT", now) == milliseconds(10'000));  // RFC 850
  CHECK(ParseRetryAfter("Sun Nov  6 08:49:37 1994", now) == milliseconds(10'000));        // asctime
  // A date that has passed means "now".
  CHECK(ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", kRfcDate + seconds(5)) == milliseconds(0));
  CHECK(ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", kRfcDate) == milliseconds(0));
  // Sub-second precision of `now` is kept: 9.5 s to go.
  CHECK(ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", now + milliseconds(500)) == milliseconds(9'500));
  CHECK_FALSE(ParseRetryAfter("Someday, 99 Foo 1994 99:99:99 GMT", now));
  CHECK_FALSE(ParseRetryAfter("Sun, 06 Nov", now));
}

TEST_CASE("retry: RetryAfterOf reads the header case-insensitively", "[http][retry]") {
  HttpResponse r = WithStatus(429);
  CHECK_FALSE(RetryAfterOf(r));
  r.headers.emplace_back("retry-after", "7");
  CHECK(RetryAfterOf(r) == milliseconds(7'000));
}

TEST_CASE("retry: backoff doubles, is capped, and its jitter stays within bounds", "[http][retry]") {
  RetryPolicy p;
  p.initial_backoff = milliseconds(100);
  p.max_backoff = milliseconds(1000);
  p.jitter = 0.5;
  const auto far = std::chrono::steady_clock::now() + std::chrono::hours(1);
  // Base per failure: 100, 200, 400, 800, 1000 (capped), 1000.
  const long long bases[] = {100, 200, 400, 800, 1000, 1000};
  std::set<long long> first_delays;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    RetryBudget b(p, far, seed);
    for (int failures = 1; failures <= 6; ++failures) {
      auto d = b.Backoff(failures).count();
      INFO("seed " << seed << ", failures " << failures << ": " << d << " ms");
      CHECK(d >= bases[failures - 1] / 2);
      CHECK(d <= bases[failures - 1]);
      if (failures == 1) first_delays.insert(d);
    }
  }
  // The jitter spreads clients out: many distinct values, not one.
  CHECK(first_delays.size() > 20);

  // Same seed, same sequence (reproducible tests elsewhere).
  RetryBudget a(p, far, 42), b(p, far, 42);
  for (int i = 1; i <= 5; ++i) CHECK(a.Backoff(i) == b.Backoff(i));

  p.jitter = 0.0;
  RetryBudget exact(p, far);
  CHECK(exact.Backoff(1) == milliseconds(100));
  CHECK(exact.Backoff(4) == milliseconds(800));
  CHECK(exact.Backoff(40) == milliseconds(1000));  // no overflow for absurd counts
  p.jitter = 7.0;  // clamped to 1: anywhere in [0, base]
  RetryBudget wide(p, far, 3);
  for (int i = 0; i < 50; ++i) {
    auto d = wide.Backoff(2).count();
    CHECK(d >= 0);
    CHECK(d <= 200);
  }
}

TEST_CASE("retry: attempts are counted and end", "[http][retry]") {
  RetryPolicy p;
  p.max_attempts = 3;
  p.initial_backoff = milliseconds(10);
  p.jitter = 0;
  RetryBudget b(p, std::chrono::steady_clock::now() + std::chrono::hours(1));
  CHECK(b.attempts() == 1);
  CHECK(b.NextDelay() == milliseconds(10));
  CHECK(b.attempts() == 2);
  CHECK(b.NextDelay() == milliseconds(20));
  CHECK(b.attempts() == 3);
  CHECK_FALSE(b.NextDelay());
  CHECK(b.attempts() == 3);

  p.max_attempts = 1;  // never retry
  RetryBudget once(p, std::chrono::steady_clock::now() + std::chrono::hours(1));
  CHECK_FALSE(once.NextDelay());
  p.max_attempts = -4;  // treated as 1
  RetryBudget negative(p, std::chrono::steady_clock::now() + std::chrono::hours(1));
  CHECK_FALSE(negative.NextDelay());
}

TEST_CASE("retry: the deadline is never passed, and Retry-After is honoured up to the cap", "[http][retry]") {
  RetryPolicy p;
  p.max_attempts = 10;
  p.initial_backoff = milliseconds(200);
  p.max_backoff = milliseconds(5000);
  p.jitter = 0;
  const auto now = std::chrono::steady_clock::now();
  {
    RetryBudget b(p, now + milliseconds(700), 1);
    CHECK(b.NextDelay({}, now) == milliseconds(200));                     // starts at now+200 < deadline
    CHECK(b.NextDelay({}, now + milliseconds(250)) == milliseconds(400));  // at 650 < 700
    CHECK_FALSE(b.NextDelay({}, now + milliseconds(660)));                 // 800 more would pass it
  }
  {
    RetryBudget b(p, now + seconds(10), 1);
    CHECK(b.NextDelay(milliseconds(1500), now) == milliseconds(1500));  // the server's word, no jitter
    CHECK(b.NextDelay(milliseconds(60'000), now) == milliseconds(5000));  // capped by max_backoff
    CHECK(b.NextDelay(milliseconds(0), now) == milliseconds(0));
  }
  {
    // A Retry-After that reaches the deadline: report now instead of sleeping into a certain failure.
    RetryBudget b(p, now + seconds(2), 1);
    CHECK_FALSE(b.NextDelay(milliseconds(2000), now));
    CHECK(b.attempts() == 1);
  }
  {
    RetryBudget b(p, now - milliseconds(1), 1);  // already past
    CHECK_FALSE(b.NextDelay(milliseconds(0), now));
  }
}

TEST_CASE("retry: ShouldRetry retries a create only when nothing was sent", "[http][retry]") {
  using R = Result<HttpResponse>;
  const R not_sent = Fail(Errc::connection_failed, "cannot connect");
  const R lost = Fail(Errc::connection_lost, "reset after sending");
  const R timed_out = Fail(Errc::timeout, "waiting for the response");
  for (bool idempotent : {true, false}) {
    INFO("idempotent " << idempotent);
    CHECK(ShouldRetry(not_sent, idempotent));
    CHECK(ShouldRetry(lost, idempotent) == idempotent);
    CHECK(ShouldRetry(timed_out, idempotent) == idempotent);
    CHECK(ShouldRetry(R(WithStatus(429)), idempotent) == idempotent);
    CHECK(ShouldRetry(R(WithStatus(500)), idempotent) == idempotent);
    CHECK(ShouldRetry(R(WithStatus(503)), idempotent) == idempotent);
    CHECK_FALSE(ShouldRetry(R(WithStatus(501)), idempotent));
    CHECK_FALSE(ShouldRetry(R(WithStatus(200)), idempotent));
    CHECK_FALSE(ShouldRetry(R(WithStatus(404)), idempotent));
    CHECK_FALSE(ShouldRetry(R(WithStatus(409)), idempotent));
    CHECK_FALSE(ShouldRetry(R(Fail(Errc::cancelled, "x")), idempotent));
    CHECK_FALSE(ShouldRetry(R(Fail(Errc::too_large, "x")), idempotent));
    CHECK_FALSE(ShouldRetry(R(Fail(Errc::invalid_argument, "x")), idempotent));
  }
}
