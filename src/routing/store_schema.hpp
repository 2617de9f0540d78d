// The store's schema versions (docs/router-store.md, "Versions"): PRAGMA user_version is the number of
// schema steps applied, and opening a store applies the steps it lacks, each in its own transaction.
#pragma once

#include <span>
#include <string_view>

#include "routing/store_sqlite.hpp"

namespace sessionturn::routing {

// One step from version `version - 1` to `version`.
struct SchemaStep {
  int version;
  std::string_view what;  // for errors: "v1: the first schema"
  std::string_view sql;   // may hold several statements
};

// This build's steps, in order: kSchemaSteps[i].version == i + 1.
std::span<const SchemaStep> SchemaSteps();
int SchemaVersion();  // the last step's version

Result<int> ReadSchemaVersion(Db& db);
// Applies the steps past the file's version. A file of a version past the last step is refused (an
// older build must not write to a schema it does not know), naming both versions.
Status Migrate(Db& db, std::span<const SchemaStep> steps);

}  // namespace sessionturn::routing
