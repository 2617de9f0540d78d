#include <catch2/catch.hpp>

#include <set>

#include "sessionturn/error.hpp"

using namespace sessionturn;

TEST_CASE("Errc names are stable and distinct", "[error]") {
  CHECK(ToString(Errc::invalid_argument) == "invalid_argument");
  CHECK(ToString(Errc::timeout) == "timeout");
  CHECK(ToString(static_cast<Errc>(999)) == "unknown");
  std::set<std::string_view> names;
  for (int i = 0; i <= static_cast<int>(Errc::internal); ++i) names.insert(ToString(static_cast<Errc>(i)));
  CHECK(names.size() == static_cast<std::size_t>(Errc::internal) + 1);
}

TEST_CASE("Error::ToString carries code, HTTP status and message", "[error]") {
  Error e(Errc::not_found, "session \"a\" not found", 404);
  CHECK(e.ToString() == "not_found (HTTP 404): session \"a\" not found");
  CHECK(Error(Errc::timeout, "").ToString() == "timeout");
}

TEST_CASE("Fail builds an unexpected Result", "[error]") {
  auto f = []() -> Result<int> { return Fail(Errc::rejected, "no"); };
  auto r = f();
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::rejected);
  CHECK(r.error().message == "no");
}
