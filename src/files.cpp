// files.hpp: atomic replacement of a file, finding a program.
#include "files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

namespace sessionturn::files {
namespace {

namespace fs = std::filesystem;

Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Fail(Errc::io_error, Errno("cannot write " + path, errno));
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

}  // namespace

std::string Errno(const std::string& what, int err) { return what + ": " + std::strerror(err); }

std::string RandomSuffix() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 12; ++i) out += kDigits[rng() % 16];
  return out;
}

void FsyncDir(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

Status WriteFileAtomic(const std::string& path, std::string_view content, bool durable) {
  const std::string dir = fs::path(path).parent_path().string();
  const std::string temp = path + ".tmp-" + RandomSuffix();
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Fail(errno == ENOENT ? Errc::not_found : Errc::io_error, Errno("cannot create " + temp, errno));
  Status st = WriteAll(fd, content, temp);
  if (st && durable && ::fsync(fd) != 0) st = Fail(Errc::io_error, Errno("cannot fsync " + temp, errno));
  ::close(fd);
  if (st && ::rename(temp.c_str(), path.c_str()) != 0) {
    st =
        Fail(errno == ENOENT ? Errc::not_found : Errc::io_error, Errno("cannot rename " + temp + " to " + path, errno));
  }
  if (!st) {
    ::unlink(temp.c_str());
    return st;
  }
  if (durable) FsyncDir(dir);
  return {};
}

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::optional<std::string> FindOnPath(std::string_view name) {
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "";
  while (!rest.empty()) {
    auto colon = rest.find(':');
    std::string dir(rest.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    if (dir.empty()) continue;
    std::string candidate = dir + "/" + std::string(name);
    if (IsExecutableFile(candidate)) return candidate;
  }
  return std::nullopt;
}

}  // namespace sessionturn::files
