// bench/decode: decode throughput of a realistic runtime event stream, side by side in one run with
//   (a) a bare memchr line scan over the same bytes (the physical limit of the framing), and
//   (b) the same decode in Python with json.loads per line (bench/py_decode.py, /usr/bin/python3).
//   (c) simdjson's DOM parse of each line alone, nothing taken out of it: the parser's own ceiling on
//       this stream, which bounds what any decoder built on it can reach.
// Usage: bench_decode [--mb 100] [--file PATH] [--no-python] [--repeat 3]
// The stream is generated deterministically: mostly assistant deltas, tool output, user messages,
// questions, status events, with the mix of sizes a coding agent produces.
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <simdjson.h>

#include "sessionturn/protocol.hpp"

using namespace sessionturn;
using Clock = std::chrono::steady_clock;

namespace {

std::string RandomText(std::mt19937& rng, std::size_t n) {
  static const char* kWords[] = {"the", "function", "returns", "an", "error", "when", "socket", "is", "closed",
                                 "let", "me", "check", "file", "src/driver.cpp", "test", "passes", "now", "éà",
                                 "—", "\"quoted\"", "tab\there", "line\nbreak", "{json}", "ok", "🙂"};
  std::string out;
  while (out.size() < n) {
    out += kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
    out += ' ';
  }
  return out;
}

std::string Generate(std::size_t target_bytes) {
  std::mt19937 rng(42);
  std::string out;
  out.reserve(target_bytes + (1 << 20));
  std::int64_t id = 0;
  int turn = 1;
  while (out.size() < target_bytes) {
    Event e;
    e.id = ++id;
    e.timestamp = "2026-11-30T06:14:13.123456Z";
    e.turn_id = "turn-" + std::to_string(turn);
    const unsigned r = rng() % 100;
    if (r < 60) {
      e.type = event_type::kAssistantDelta;
      e.text = RandomText(rng, 8 + rng() % 120);
    } else if (r < 78) {
      e.type = event_type::kToolDelta;
      e.tool_id = "toolu_" + std::to_string(rng() % 100000);
      e.tool_name = "Bash";
      e.output = RandomText(rng, 200 + rng() % 3000);
    } else if (r < 84) {
      e.type = event_type::kToolStarted;
      e.tool_id = "toolu_" + std::to_string(rng() % 100000);
      e.tool_name = "Edit";
      e.text = RandomText(rng, 60);
    } else if (r < 89) {
      e.type = event_type::kAssistantMessage;
      e.text = RandomText(rng, 400 + rng() % 2000);
    } else if (r < 93) {
      e.type = event_type::kUserMessage;
      e.request_id = NewUuid();
      e.revision = 1;
      e.text = "[Slack message from alice]\n" + RandomText(rng, 100 + rng() % 600);
      ++turn;
    } else if (r < 95) {
      e.type = event_type::kInputRequested;
      e.input_id = "input-" + std::to_string(id);
      e.questions.push_back(InputQuestion{"q1", "Deploy", "Which environment should I deploy to?",
                                          {InputOption{"staging", "safe"}, InputOption{"prod", "careful"}},
                                          false, false});
    } else if (r < 98) {
      e.type = event_type::kTurnCompleted;
      e.status = status_value::kCompleted;
    } else {
      e.id = 0;
      e.type = event_type::kRuntimeStatus;
      RuntimeStatus rs;
      rs.session_name = "slack-abc";
      rs.agent_type = "claude-code";
      rs.model = "claude-sonnet";
      rs.usage = Usage{1200, 3400, 4600, 90000, 200000};
      e.runtime = rs;
    }
    out += EncodeEvent(e);
    out += '\n';
  }
  return out;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Figures {
  double mbps = 0;
  std::size_t lines = 0;
};

Figures BestOf(int repeat, std::size_t bytes, const std::function<std::size_t()>& run) {
  Figures best;
  for (int i = 0; i < repeat; ++i) {
    auto t0 = Clock::now();
    std::size_t lines = run();
    double s = Seconds(Clock::now() - t0);
    double mbps = static_cast<double>(bytes) / 1e6 / s;
    if (mbps > best.mbps) best = Figures{mbps, lines};
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t mb = 100;
  int repeat = 3;
  bool python = true;
  std::string file = "/tmp/sessionturn-bench-decode.jsonl";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mb" && i + 1 < argc) {
      mb = std::stoul(argv[++i]);
    } else if (a == "--file" && i + 1 < argc) {
      file = argv[++i];
    } else if (a == "--repeat" && i + 1 < argc) {
      repeat = std::stoi(argv[++i]);
    } else if (a == "--no-python") {
      python = false;
    } else {
      std::fprintf(stderr, "usage: bench_decode [--mb N] [--file PATH] [--repeat N] [--no-python]\n");
      return 2;
    }
  }
  const std::string data = Generate(mb * 1000 * 1000);
  {
    std::ofstream f(file, std::ios::binary);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
  }

  // (a) the floor: a bare memchr scan counting lines.
  Figures scan = BestOf(repeat, data.size(), [&] {
    std::size_t lines = 0;
    const char* p = data.data();
    const char* end = p + data.size();
    while (p < end) {
      const void* nl = std::memchr(p, '\n', static_cast<std::size_t>(end - p));
      if (nl == nullptr) break;
      ++lines;
      p = static_cast<const char*>(nl) + 1;
    }
    return lines;
  });

  // Ours: LineFramer + DecodeEvent per line, fed in 64 KiB chunks as a socket would deliver them.
  std::size_t errors = 0;
  std::int64_t checksum = 0;
  Figures ours = BestOf(repeat, data.size(), [&] {
    LineFramer framer;
    std::size_t lines = 0;
    constexpr std::size_t kChunk = 64 * 1024;
    for (std::size_t off = 0; off < data.size(); off += kChunk) {
      framer.Feed(std::string_view(data).substr(off, kChunk), [&](std::string_view line) {
        auto ev = DecodeEvent(line);
        if (!ev) {
          ++errors;
          return;
        }
        checksum += ev->id + static_cast<std::int64_t>(ev->text.size());
        ++lines;
      });
    }
    return lines;
  });

  // Ours, decoding into one reused Event (DecodeEventInto: what the driver's streams do).
  std::int64_t checksum_into = 0;
  Figures into = BestOf(repeat, data.size(), [&] {
    LineFramer framer;
    Event ev;
    std::size_t lines = 0;
    constexpr std::size_t kChunk = 64 * 1024;
    for (std::size_t off = 0; off < data.size(); off += kChunk) {
      framer.Feed(std::string_view(data).substr(off, kChunk), [&](std::string_view line) {
        if (!DecodeEventInto(line, ev)) {
          ++errors;
          return;
        }
        checksum_into += ev.id + static_cast<std::int64_t>(ev.text.size());
        ++lines;
      });
    }
    return lines;
  });

  // (c) simdjson alone: each line copied into a reused padded buffer (as the decoder parses it in
  // the Event's own line) and parsed, nothing extracted.
  std::size_t parse_errors = 0;
  Figures parse_only = BestOf(repeat, data.size(), [&] {
    LineFramer framer;
    simdjson::dom::parser parser;
    std::string padded;
    std::size_t lines = 0;
    constexpr std::size_t kChunk = 64 * 1024;
    for (std::size_t off = 0; off < data.size(); off += kChunk) {
      framer.Feed(std::string_view(data).substr(off, kChunk), [&](std::string_view line) {
        padded.assign(line);
        padded.append(simdjson::SIMDJSON_PADDING, '\0');
        simdjson::dom::element root;
        if (parser.parse(padded.data(), line.size(), false).get(root)) {
          ++parse_errors;
          return;
        }
        ++lines;
      });
    }
    return lines;
  });

  std::printf("decode benchmark: %.1f MB stream, %zu lines (best of %d)\n", static_cast<double>(data.size()) / 1e6,
              scan.lines, repeat);
  std::printf("  memchr line scan (floor)      : %9.1f MB/s\n", scan.mbps);
  std::printf("  sessionturn LineFramer+Decode : %9.1f MB/s  (%zu events, %zu errors)\n", ours.mbps, ours.lines,
              errors);
  std::printf("  ... into one reused Event      : %9.1f MB/s  (%zu events; target >= 1500 MB/s)\n", into.mbps,
              into.lines);
  std::printf("  simdjson parse alone (ceiling) : %9.1f MB/s  (%zu lines, %zu errors; reused Event at %.0f %% of it)\n",
              parse_only.mbps, parse_only.lines, parse_errors, 100.0 * into.mbps / parse_only.mbps);
  std::printf("  ratio ours / scan             : %9.3f  (scan is %.1fx faster; reused Event: %.1fx)\n",
              ours.mbps / scan.mbps, scan.mbps / ours.mbps, scan.mbps / into.mbps);
  if (python) {
    std::string cmd = std::string(SESSIONTURN_PYTHON) + " " + SESSIONTURN_SOURCE_DIR + "/bench/py_decode.py " + file;
    FILE* p = popen(cmd.c_str(), "r");
    double py = 0;
    if (p != nullptr) {
      char buf[256];
      while (std::fgets(buf, sizeof buf, p) != nullptr) {
        if (std::sscanf(buf, "python_mbps %lf", &py) == 1) break;
      }
      pclose(p);
    }
    if (py > 0) {
      std::printf("  python json.loads per line    : %9.1f MB/s\n", py);
      std::printf("  ratio ours / python           : %9.2fx  (reused Event: %.2fx; target >= 10x)\n", ours.mbps / py,
                  into.mbps / py);
    } else {
      std::printf("  python comparison failed to run (%s)\n", cmd.c_str());
    }
  }
  std::printf("  (checksum %lld, %lld)\n", static_cast<long long>(checksum), static_cast<long long>(checksum_into));
  if (checksum_into != checksum) {
    std::fprintf(stderr, "the two decodes disagree\n");
    return 1;
  }
  std::remove(file.c_str());
  return errors == 0 && parse_errors == 0 ? 0 : 1;
}
