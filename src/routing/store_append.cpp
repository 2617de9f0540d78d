// Rows appended within a transaction (store_sqlite.hpp, Db::Append): kept until the next statement
// runs (or until a table has a full run), then written a run of rows at a time, one multi-row INSERT
// per run.
#include <algorithm>
#include <string>

#include "routing/store_sqlite.hpp"

namespace sessionturn::routing {

AppendTable::AppendTable(std::string_view op, std::string_view insert_into, int columns) : op_(op), columns_(columns) {
  std::string row = "(";
  for (int c = 0; c < columns; ++c) row += c == 0 ? "?" : ", ?";
  row += ")";
  for (std::size_t i = 0; i < std::size(kRuns); ++i) {
    std::string& sql = sql_[i];
    sql.reserve(insert_into.size() + 8 + kRuns[i] * (row.size() + 2));
    sql.append(insert_into).append(" VALUES ");
    for (std::size_t r = 0; r < kRuns[i]; ++r) sql.append(r == 0 ? "" : ", ").append(row);
  }
}

const std::string& AppendTable::Sql(std::size_t rows) const {
  for (std::size_t i = 0; i < std::size(kRuns); ++i) {
    if (kRuns[i] == rows) return sql_[i];
  }
  return sql_[std::size(kRuns) - 1];  // never: Db writes runs of kRuns only
}

Status Db::Append(const AppendTable& table, std::vector<SqlValue> row) {
  if (row.size() != static_cast<std::size_t>(table.columns())) {
    return Fail(Errc::internal, "router store " + path_ + ": " + std::string(table.op()) + ": a row of " +
                                    std::to_string(row.size()) + " values for " + std::to_string(table.columns()) +
                                    " columns");
  }
  // Outside a transaction (or in one SQLite rolled back, which Query refuses): written, or refused, now.
  if (!in_transaction_ || RolledBackUnderUs()) return WriteRun(table, std::span(&row, 1));
  auto it = std::find_if(appended_.begin(), appended_.end(), [&](const Appended& a) { return a.table == &table; });
  if (it == appended_.end()) it = appended_.insert(appended_.end(), Appended{&table, {}});
  it->rows.push_back(std::move(row));
  ++appended_rows_;
  ++appended_ever_;
  // A full run goes now: what waits stays small (and in the cache), however long the burst.
  if (it->rows.size() < AppendTable::kRuns[0] || writing_appended_) return {};
  return WriteAppended(table.op(), &*it);
}

void Db::DropAppended() noexcept {
  for (Appended& a : appended_) a.rows.clear();
  appended_rows_ = 0;
}

Status Db::WriteRun(const AppendTable& table, std::span<const std::vector<SqlValue>> rows) {
  auto q = Query(table.op(), table.Sql(rows.size()));
  if (!q) return Fail(q.error());
  return q->ExecRows(rows);
}

Status Db::WriteRows(Appended& a) {
  std::span<const std::vector<SqlValue>> rows(a.rows);
  while (!rows.empty()) {
    std::size_t run = 1;
    for (std::size_t r : AppendTable::kRuns) {
      if (r <= rows.size()) {
        run = r;
        break;
      }
    }
    if (auto st = WriteRun(*a.table, rows.first(run)); !st) return st;
    rows = rows.subspan(run);
  }
  appended_rows_ -= a.rows.size();
  a.rows.clear();
  return {};
}

Status Db::WriteAppended(std::string_view op, Appended* only) {
  const std::size_t waiting = only ? only->rows.size() : appended_rows_;
  const std::int64_t changes_before = sqlite3_total_changes64(db_);
  writing_appended_ = true;  // its own statements write nothing first
  Status st;
  if (only != nullptr) {
    st = WriteRows(*only);
  } else {
    for (Appended& a : appended_) {
      if (st = WriteRows(a); !st) break;
    }
  }
  writing_appended_ = false;
  appended_changes_ += sqlite3_total_changes64(db_) - changes_before;
  if (st) return st;
  // Some of them may be in the transaction: it must not commit without the rest, and the rest go
  // with its rollback.
  DropAppended();
  std::string why = st.error().message;
  if (const std::string prefix = "router store " + path_ + ": "; why.starts_with(prefix)) why.erase(0, prefix.size());
  const std::string rows = std::to_string(waiting) + (waiting == 1 ? " row" : " rows");
  Spoil("writing the " + rows + " appended before " + std::string(op) + " failed: " + why);
  return Fail(Errc::io_error, "router store " + path_ + ": " + std::string(op) + ": writing the " + rows +
                                  " appended before it: " + why);
}

Status Stmt::ExecRows(std::span<const std::vector<SqlValue>> rows) {
  copy_text_ = false;
  int index = 1;
  for (const std::vector<SqlValue>& row : rows) {
    for (const SqlValue& v : row) {
      if (const auto* i = std::get_if<std::int64_t>(&v)) {
        BindOne(index, *i);
      } else {
        BindOne(index, std::string_view(std::get<std::string>(v)));
      }
    }
  }
  copy_text_ = true;
  return Run();
}

}  // namespace sessionturn::routing
