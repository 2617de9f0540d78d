// The store's SQLite layer (store_sqlite.hpp): the connection, the statement cache, statements and
// transactions.
#include "routing/store_sqlite.hpp"

namespace sessionturn::routing {

std::int64_t ToUnixMs(StoreTime t) noexcept {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

StoreTime FromUnixMs(std::int64_t ms) noexcept {
  return StoreTime(std::chrono::duration_cast<StoreTime::duration>(std::chrono::milliseconds(ms)));
}

Result<std::unique_ptr<Db>> Db::Open(const std::string& path) {
  sqlite3* handle = nullptr;
  // NOMUTEX: the store is used from one thread at a time, so SQLite's own per-call mutex is waste.
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  const int rc = sqlite3_open_v2(path.c_str(), &handle, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string why = handle ? sqlite3_errmsg(handle) : sqlite3_errstr(rc);
    sqlite3_close(handle);
    return Fail(Errc::io_error, "router store " + path + ": cannot open: " + why);
  }
  sqlite3_extended_result_codes(handle, 1);
  return std::unique_ptr<Db>(new Db(path, handle));
}

Db::~Db() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  // Every statement is finalized, so this closes (and, as the last connection, checkpoints the WAL).
  sqlite3_close(db_);
}

Error Db::Failure(std::string_view op) const {
  return Error(Errc::io_error, "router store " + path_ + ": " + std::string(op) + ": " + sqlite3_errmsg(db_));
}

Result<Stmt> Db::Query(std::string_view op, std::string_view sql) {
  if (RolledBackUnderUs()) {
    return Fail(Errc::io_error, "router store " + path_ + ": " + std::string(op) +
                                    ": the open transaction was rolled back by SQLite: " +
                                    spoiled_.value_or("after a failed statement"));
  }
  if (appended_rows_ > 0 && !writing_appended_) {
    if (auto st = WriteAppended(op); !st) return Fail(st.error());
  }
  const TextAt at{sql.data(), sql.size()};
  if (auto known = by_address_.find(at); known != by_address_.end()) {
    // The same text still (a literal always is): its statement.
    if (std::string_view(sqlite3_sql(known->second)) == sql) return Stmt(*this, known->second, op);
  }
  auto it = cache_.find(sql);
  if (it == cache_.end()) {
    sqlite3_stmt* stmt = nullptr;
    // PERSISTENT: these live as long as the connection, which tells SQLite not to take them from its
    // lookaside pool meant for short-lived ones.
    if (sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &stmt, nullptr) !=
        SQLITE_OK)
      return Fail(Failure(op));
    it = cache_.emplace(sql, stmt).first;
  }
  by_address_[at] = it->second;
  return Stmt(*this, it->second, op);
}

Status Db::Exec(std::string_view op, const std::string& sql) {
  if (appended_rows_ > 0 && !writing_appended_) {
    if (auto st = WriteAppended(op); !st) return st;
  }
  char* message = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    std::string why = message ? message : sqlite3_errmsg(db_);
    sqlite3_free(message);
    return Fail(Errc::io_error, "router store " + path_ + ": " + std::string(op) + ": " + why);
  }
  return {};
}

Stmt::~Stmt() {
  if (!stmt_) return;
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

void Stmt::BindOne(int& index, std::string_view text) {
  // Copied (TRANSIENT) unless inside Exec: a caller's temporary may go before the statement steps.
  // An empty view may have a null data(), which SQLite would bind as NULL: a text column gets ''.
  const char* data = text.data() != nullptr ? text.data() : "";
  const int rc =
      sqlite3_bind_text64(stmt_, index++, data, text.size(), copy_text_ ? SQLITE_TRANSIENT : SQLITE_STATIC, SQLITE_UTF8);
  if (rc != SQLITE_OK && bind_error_ == SQLITE_OK) bind_error_ = rc;
}

void Stmt::BindOne(int& index, std::int64_t value) {
  const int rc = sqlite3_bind_int64(stmt_, index++, value);
  if (rc != SQLITE_OK && bind_error_ == SQLITE_OK) bind_error_ = rc;
}

void Stmt::BindOne(int& index, const std::optional<std::string>& text) {
  if (text) {
    BindOne(index, std::string_view(*text));
    return;
  }
  const int rc = sqlite3_bind_null(stmt_, index++);
  if (rc != SQLITE_OK && bind_error_ == SQLITE_OK) bind_error_ = rc;
}

void Stmt::BindOne(int& index, const ThreadRef& t) {
  BindOne(index, t.platform);
  BindOne(index, t.workspace);
  BindOne(index, t.chat);
  BindOne(index, t.thread);
}

void Stmt::BindOne(int& index, const ChatRef& c) {
  BindOne(index, c.platform);
  BindOne(index, c.workspace);
  BindOne(index, c.chat);
}

Result<bool> Stmt::Step() {
  if (bind_error_ != SQLITE_OK) {
    return Fail(Errc::io_error, "router store " + db_->path() + ": " + std::string(op_) +
                                    ": cannot bind a parameter: " + sqlite3_errstr(bind_error_));
  }
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  // A failed statement may have taken its transaction with it (SQLite rolls back on a full disk, an
  // I/O error, no memory): what the store keeps about the file's rows is counted again.
  db_->NoteRollback();
  Error failure = db_->Failure(op_);
  if (db_->RolledBackUnderUs()) db_->Spoil(std::string(op_) + " failed, and SQLite rolled the transaction back");
  return Fail(std::move(failure));
}

Status Stmt::Run() {
  for (;;) {
    auto row = Step();
    if (!row) return Fail(row.error());
    if (!*row) return {};
  }
}

std::string Stmt::Text(int col) const {
  // Bytes first, then the text: column_bytes after column_text could convert, never the other way.
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  const int size = sqlite3_column_bytes(stmt_, col);
  return text ? std::string(text, static_cast<std::size_t>(size)) : std::string();
}

ThreadRef Stmt::Thread(int col) const {
  return ThreadRef{Text(col), Text(col + 1), Text(col + 2), Text(col + 3)};
}

ChatRef Stmt::Chat(int col) const {
  return ChatRef{Text(col), Text(col + 1), Text(col + 2)};
}

Result<Transaction> Transaction::Begin(Db& db, std::string_view op) {
  // Open (a batch), or rolled back by SQLite under it: joined either way, never a new one in its place.
  if (db.in_transaction()) {
    if (db.spoiled()) {
      return Fail(Errc::io_error, "router store " + db.path() + ": " + std::string(op) +
                                      ": the transaction it would join can only be rolled back: " + *db.spoiled());
    }
    return Transaction(db, op, true, db.OwnChanges());
  }
  auto begin = db.Query(op, "BEGIN IMMEDIATE");
  if (!begin) return Fail(begin.error());
  if (auto st = begin->Run(); !st) return Fail(st.error());
  db.ClearSpoiled();
  db.SetInTransaction(true);
  return Transaction(db, op, false, 0);
}

Status Transaction::Commit() {
  if (nested_) {
    db_ = nullptr;  // its writes are the outer transaction's now
    return {};
  }
  if (db_->spoiled()) {
    Error why(Errc::io_error, "router store " + db_->path() + ": " + std::string(op_) +
                                  ": rolled back, not committed: " + *db_->spoiled());
    return Fail(std::move(why));  // the destructor rolls it back
  }
  auto commit = db_->Query(op_, "COMMIT");
  if (!commit) return Fail(commit.error());
  if (auto st = commit->Run(); !st) return st;  // still open: the destructor rolls it back
  db_->SetInTransaction(false);
  db_ = nullptr;
  return {};
}

Transaction::~Transaction() {
  if (!db_) return;  // committed, or moved from
  sqlite3* handle = db_->handle();
  if (nested_) {
    // SQLite may have rolled the outer transaction back by itself (a full disk); or this call wrote,
    // or appended rows (Db::Append), before it failed, and nothing undoes only its own writes.
    if (sqlite3_get_autocommit(handle)) {
      db_->Spoil(std::string(op_) + " failed, and SQLite rolled the transaction back");
    } else if (db_->OwnChanges() != changes_) {
      db_->Spoil(std::string(op_) + " failed after it had written part of its change");
    }
    return;
  }
  db_->NoteRollback();
  db_->DropAppended();  // they were never written: nothing of them to roll back
  // SQLite rolls back by itself after some failures (a full disk): then there is nothing left to end.
  if (!sqlite3_get_autocommit(handle)) {
    if (auto rollback = db_->Query(op_, "ROLLBACK")) (void)rollback->Run();
  }
  db_->SetInTransaction(false);
  db_->ClearSpoiled();
}

}  // namespace sessionturn::routing
