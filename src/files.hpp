// Small file-system pieces shared by the layers that keep state on disk (the local runtime's
// providers, the local backend): atomic replacement of a file, and finding a program.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "sessionturn/error.hpp"

namespace sessionturn::files {

// "what: <strerror(err)>".
std::string Errno(const std::string& what, int err);
// 12 random hex digits, for temporary names beside a file.
std::string RandomSuffix();

// Writes `content` to `path` so that readers see the old file or the new one, never a part: a temp file
// beside it, rename over. `durable`: fsync the file before and the directory after the rename, so it
// also survives a machine crash. Created 0600. Errc::not_found when the directory is missing.
Status WriteFileAtomic(const std::string& path, std::string_view content, bool durable = true);

// fsync(2) of a directory (after a rename into it); errors ignored: the rename itself happened.
void FsyncDir(const std::string& dir);

// A regular file we may execute.
bool IsExecutableFile(const std::string& path);
// `name` (no '/') in the directories of $PATH, first match; nullopt when none has it.
std::optional<std::string> FindOnPath(std::string_view name);

}  // namespace sessionturn::files
