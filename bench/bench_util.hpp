// Small helpers shared by the benchmarks: percentiles, RSS, fd limits, CPU time.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace bench {

using Clock = std::chrono::steady_clock;

inline double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto idx = static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(idx, v.size() - 1)];
}

// Current resident set size in KiB (VmRSS), and the peak (VmHWM).
inline long RssKiB(const char* field = "VmRSS:") {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(std::string(field).size()));
  }
  return -1;
}

// CPU time (user + system) of this process so far, all its threads, in ms.
inline double ProcessCpuMs() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto ms = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) * 1e3 + static_cast<double>(tv.tv_usec) / 1e3; };
  return ms(ru.ru_utime) + ms(ru.ru_stime);
}

// CPU time (user + system) of another live process so far, in ms (/proc/PID/stat fields 14 and 15);
// -1 when it cannot be read.
inline double OtherProcessCpuMs(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return -1;
  std::vector<std::string> fields;
  std::string field;
  for (std::size_t i = close + 2; i <= stat.size(); ++i) {
    if (i == stat.size() || stat[i] == ' ') {
      fields.push_back(field);
      field.clear();
    } else {
      field.push_back(stat[i]);
    }
  }
  // fields[0] is field 3 (state): utime is field 14, stime field 15.
  if (fields.size() < 13) return -1;
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  return (std::stod(fields[11]) + std::stod(fields[12])) * 1e3 / ticks;
}

inline void RaiseFdLimit(rlim_t want) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  rl.rlim_cur = std::min(std::max(rl.rlim_cur, want), rl.rlim_max);
  setrlimit(RLIMIT_NOFILE, &rl);
}

}  // namespace bench
