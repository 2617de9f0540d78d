// Metrics: families created on first use with a fixed definition, handles that stay valid, and the
// text exposition read back by a small parser of the format (samples, HELP and TYPE lines, label
// escaping) rather than matched as a whole.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "sessionturn/metrics.hpp"

using namespace sessionturn;

namespace {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::vector<Sample> samples;
  std::map<std::string, std::string> help;  // unescaped
  std::map<std::string, std::string> type;

  // The value of the one sample with this name and exactly these labels; fails when there is none.
  double Value(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    for (const auto& s : samples) {
      if (s.name == name && s.labels == labels) return s.value;
    }
    FAIL("no sample " << name << " with those labels");
    return 0;
  }
};

std::string Unescape(const std::string& text, std::size_t& i, char end) {
  std::string out;
  while (i < text.size() && text[i] != end) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      char c = text[++i];
      out += c == 'n' ? '\n' : c;
    } else {
      out += text[i];
    }
    ++i;
  }
  return out;
}

// The text format 0.0.4, as far as a registry writes it: `# HELP name text`, `# TYPE name type`,
// `name{a="b",c="d"} value` (no timestamps).
Exposition Parse(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      std::size_t space = line.find(' ', 7);
      REQUIRE(space != std::string::npos);
      std::string name = line.substr(7, space - 7);
      std::size_t i = space + 1;
      (line[2] == 'H' ? e.help : e.type)[name] = Unescape(line, i, '\0');
      continue;
    }
    REQUIRE(line[0] != '#');
    Sample s;
    std::size_t i = line.find_first_of("{ ");
    REQUIRE(i != std::string::npos);
    s.name = line.substr(0, i);
    if (line[i] == '{') {
      ++i;
      while (line[i] != '}') {
        std::size_t eq = line.find('=', i);
        REQUIRE(eq != std::string::npos);
        std::string label = line.substr(i, eq - i);
        REQUIRE(line[eq + 1] == '"');
        i = eq + 2;
        s.labels[label] = Unescape(line, i, '"');
        REQUIRE(i < line.size());
        ++i;  // the closing quote
        if (line[i] == ',') ++i;
      }
      ++i;
    }
    REQUIRE(line[i] == ' ');
    std::string value = line.substr(i + 1);
    s.value = value == "+Inf" ? INFINITY : std::stod(value);
    e.samples.push_back(std::move(s));
  }
  return e;
}

}  // namespace

TEST_CASE("metrics: counters and gauges by labels, serialized and read back", "[metrics]") {
  Metrics m;
  auto ok = m.GetCounter("st_messages_total", "Messages accepted.", {{"platform", "telegram"}});
  REQUIRE(ok);
  (*ok)->Increment();
  (*ok)->Increment(2.5);
  (*ok)->Increment(-4);  // ignored: a counter only goes up
  auto slack = m.GetCounter("st_messages_total", "Messages accepted.", {{"platform", "slack"}});
  REQUIRE(slack);
  (*slack)->Increment();
  // The same series is the same handle.
  auto again = m.GetCounter("st_messages_total", "Messages accepted.", {{"platform", "telegram"}});
  REQUIRE(again);
  CHECK(*again == *ok);
  CHECK((*ok)->Value() == 3.5);

  auto gauge = m.GetGauge("st_threads_active", "Threads with a turn running.");
  REQUIRE(gauge);
  (*gauge)->Set(5);
  (*gauge)->Increment();
  (*gauge)->Decrement(3);
  CHECK((*gauge)->Value() == 3);

  auto e = Parse(m.Serialize());
  CHECK(e.Value("st_messages_total", {{"platform", "telegram"}}) == 3.5);
  CHECK(e.Value("st_messages_total", {{"platform", "slack"}}) == 1);
  CHECK(e.Value("st_threads_active") == 3);
  CHECK(e.type["st_messages_total"] == "counter");
  CHECK(e.type["st_threads_active"] == "gauge");
  CHECK(e.help["st_messages_total"] == "Messages accepted.");
  CHECK(Metrics::kContentType == "text/plain; version=0.0.4; charset=utf-8");
}

TEST_CASE("metrics: label values and help text are escaped", "[metrics]") {
  Metrics m;
  const std::string hostile = "a \"quoted\" back\\slash and a\nnewline";
  auto c = m.GetCounter("st_odd_total", "Help with a \\ and a\nsecond line.", {{"chat", hostile}});
  REQUIRE(c);
  (*c)->Increment();
  const std::string text = m.Serialize();
  // Every line is a comment or a sample: the newlines did not split one.
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) CHECK((line.empty() || line[0] == '#' || line.rfind("st_odd_total{", 0) == 0));
  auto e = Parse(text);
  CHECK(e.Value("st_odd_total", {{"chat", hostile}}) == 1);
  CHECK(e.help["st_odd_total"] == "Help with a \\ and a\nsecond line.");
}

TEST_CASE("metrics: histogram buckets are cumulative with sum and count", "[metrics]") {
  Metrics m;
  auto h = m.GetHistogram("st_turn_seconds", "Turn duration.", {0.1, 1, 10}, {{"backend", "local"}});
  REQUIRE(h);
  for (double v : {0.05, 0.5, 0.7, 5.0, 50.0}) (*h)->Observe(v);
  auto e = Parse(m.Serialize());
  auto bucket = [&](const std::string& le) { return e.Value("st_turn_seconds_bucket", {{"backend", "local"}, {"le", le}}); };
  CHECK(bucket("0.1") == 1);
  CHECK(bucket("1") == 3);
  CHECK(bucket("10") == 4);
  CHECK(bucket("+Inf") == 5);
  CHECK(e.Value("st_turn_seconds_count", {{"backend", "local"}}) == 5);
  CHECK(e.Value("st_turn_seconds_sum", {{"backend", "local"}}) == Approx(56.25));
  CHECK(e.type["st_turn_seconds"] == "histogram");
}

TEST_CASE("metrics: a family's definition is fixed at first use", "[metrics]") {
  Metrics m;
  REQUIRE(m.GetCounter("st_a_total", "A.", {{"platform", "x"}, {"status", "ok"}}));
  // Order of the labels does not matter.
  CHECK(m.GetCounter("st_a_total", "A.", {{"status", "fail"}, {"platform", "y"}}));

  auto fewer = m.GetCounter("st_a_total", "A.", {{"platform", "x"}});
  REQUIRE_FALSE(fewer);
  CHECK(fewer.error().code == Errc::invalid_argument);
  CHECK_THAT(fewer.error().message, Catch::Contains("st_a_total") && Catch::Contains("{platform, status}"));

  auto other = m.GetCounter("st_a_total", "A.", {{"platform", "x"}, {"kind", "ok"}});
  REQUIRE_FALSE(other);
  CHECK(other.error().code == Errc::invalid_argument);

  auto as_gauge = m.GetGauge("st_a_total", "A.", {{"platform", "x"}, {"status", "ok"}});
  REQUIRE_FALSE(as_gauge);
  CHECK_THAT(as_gauge.error().message, Catch::Contains("is a counter"));

  auto help = m.GetCounter("st_a_total", "Another.", {{"platform", "x"}, {"status", "ok"}});
  REQUIRE_FALSE(help);
  CHECK_THAT(help.error().message, Catch::Contains("help"));

  REQUIRE(m.GetHistogram("st_h", "H.", {1, 2}));
  auto buckets = m.GetHistogram("st_h", "H.", {1, 3});
  REQUIRE_FALSE(buckets);
  CHECK_THAT(buckets.error().message, Catch::Contains("buckets"));
}

TEST_CASE("metrics: bad names, labels and buckets are refused naming them", "[metrics]") {
  Metrics m;
  auto name = m.GetCounter("bad name", "x");
  REQUIRE_FALSE(name);
  CHECK(name.error().code == Errc::invalid_argument);
  CHECK_THAT(name.error().message, Catch::Contains("'bad name'"));

  auto label = m.GetCounter("st_ok_total", "x", {{"__reserved", "v"}});
  REQUIRE_FALSE(label);
  CHECK_THAT(label.error().message, Catch::Contains("'__reserved'"));

  auto twice = m.GetCounter("st_ok_total", "x", {{"a", "1"}, {"a", "2"}});
  REQUIRE_FALSE(twice);
  CHECK_THAT(twice.error().message, Catch::Contains("given twice"));

  auto unsorted = m.GetHistogram("st_bad_h", "x", {2, 1});
  REQUIRE_FALSE(unsorted);
  CHECK_THAT(unsorted.error().message, Catch::Contains("strictly increasing"));
  // A refused family was not created: it can still be defined properly.
  CHECK(m.GetHistogram("st_bad_h", "x", {1, 2}));
}

TEST_CASE("metrics: handles are used from many threads at once", "[metrics]") {
  Metrics m;
  auto c = m.GetCounter("st_parallel_total", "x");
  REQUIRE(c);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&m, &c, t] {
      for (int i = 0; i < 1000; ++i) {
        (*c)->Increment();
        auto g = m.GetGauge("st_parallel_gauge", "y", {{"thread", std::to_string(t)}});
        if (g) (*g)->Increment();
        if (i % 100 == 0) (void)m.Serialize();
      }
    });
  }
  for (auto& t : threads) t.join();
  auto e = Parse(m.Serialize());
  CHECK(e.Value("st_parallel_total") == 4000);
  for (int t = 0; t < 4; ++t) CHECK(e.Value("st_parallel_gauge", {{"thread", std::to_string(t)}}) == 1000);
}
