// The store's thin layer over SQLite's C API: one connection with its prepared statements cached (one
// per query text, finalized on close), statements that reset themselves, transactions that roll back
// unless committed, and every SQLite failure as Errc::io_error naming the file, the operation and
// sqlite3_errmsg. Internal to the router's store.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "routing/store.hpp"
#include "sessionturn/error.hpp"

namespace sessionturn::routing {

std::int64_t ToUnixMs(StoreTime t) noexcept;
StoreTime FromUnixMs(std::int64_t ms) noexcept;

class Stmt;

// A value of an appended row (Db::Append).
using SqlValue = std::variant<std::int64_t, std::string>;

// A row of these values, each moved in (a braced list would copy every string once more).
template <typename... Values>
std::vector<SqlValue> SqlRow(Values&&... values) {
  std::vector<SqlValue> row;
  row.reserve(sizeof...(Values));
  (row.emplace_back(std::forward<Values>(values)), ...);
  return row;
}

// A table that rows are appended to (Db::Append): its INSERT's head, "INSERT INTO t (a, b)", and the
// statement texts for a run of rows written at once. A run in one INSERT saves each row its own
// statement: two-column rows cost 0.6x as much each in runs of 32, and a burst's message rows and
// dedupe keys 11.7 K instructions a message against 16.1 K one statement each (issue 11's bench; the
// rest is each row's own b-tree insert).
class AppendTable {
 public:
  // Runs written as one statement: the longest that fits what waits, then shorter ones.
  static constexpr std::size_t kRuns[] = {32, 8, 1};
  // `op` and `insert_into` must be literals (their views are kept).
  AppendTable(std::string_view op, std::string_view insert_into, int columns);
  std::string_view op() const noexcept { return op_; }
  int columns() const noexcept { return columns_; }
  // The INSERT of `rows` rows, rows one of kRuns. Lives as long as this table (the statement cache keeps
  // a view of it).
  const std::string& Sql(std::size_t rows) const;

 private:
  std::string_view op_;
  int columns_;
  std::string sql_[std::size(kRuns)];
};

class Db {
 public:
  // Opens the connection only: pragmas and the schema are the caller's (store_open.cpp).
  static Result<std::unique_ptr<Db>> Open(const std::string& path);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  sqlite3* handle() const noexcept { return db_; }
  const std::string& path() const noexcept { return path_; }

  // The cached statement for `sql` (prepared on first use), bound to `op` for its errors. Both must be
  // literals: the cache and the statement keep the views.
  Result<Stmt> Query(std::string_view op, std::string_view sql);
  // Runs SQL text that may hold several statements (schema steps, pragmas); nothing is cached.
  Status Exec(std::string_view op, const std::string& sql);

  // Appends a row to `table` (which must outlive this Db). Inside a transaction of the store's own the
  // row waits, and every row waiting is written just before the next statement runs (any Query or
  // Exec: a read of the table, the next write, the COMMIT), a run of rows of one table in one INSERT;
  // a table's longest run (kRuns) is written as soon as it is complete; a rollback drops them. A
  // failure to write them fails that statement (or this Append) and spoils the transaction: it can
  // then only be rolled back, and says why. Outside a transaction the row is written at once.
  Status Append(const AppendTable& table, std::vector<SqlValue> row);
  std::size_t appended() const noexcept { return appended_rows_; }  // rows waiting
  // The connection's changes (sqlite3_total_changes64), with a row counted when it is appended rather
  // than when it is written: what moves while a call joined to a transaction runs is what that call
  // wrote or appended itself (Transaction), not the rows others appended and its statements wrote.
  std::int64_t OwnChanges() const noexcept { return sqlite3_total_changes64(db_) - appended_changes_ + appended_ever_; }
  // The open transaction rolls back: the rows waiting go with it (Transaction).
  void DropAppended() noexcept;
  // "router store <path>: <op>: <sqlite3_errmsg>" as Errc::io_error.
  Error Failure(std::string_view op) const;
  // Rows the last INSERT/UPDATE/DELETE changed.
  std::int64_t Changes() const noexcept { return sqlite3_changes(db_); }
  std::int64_t LastInsertId() const noexcept { return sqlite3_last_insert_rowid(db_); }
  // How many transactions (or savepoints) ended without their commit: what the store keeps in memory
  // about the file's rows is stale when this moved.
  std::uint64_t rollbacks() const noexcept { return rollbacks_; }
  void NoteRollback() noexcept { ++rollbacks_; }
  // Set when a call joined to the open transaction failed after it wrote (Transaction), or when
  // SQLite rolled that transaction back by itself: it can then only be rolled back, and says why.
  // Cleared when it ends.
  const std::optional<std::string>& spoiled() const noexcept { return spoiled_; }
  void Spoil(std::string why) {
    if (!spoiled_) spoiled_ = std::move(why);
  }
  void ClearSpoiled() noexcept { spoiled_.reset(); }
  // Whether a Transaction of the store's own is open (begun, not yet committed or rolled back). While
  // one is, SQLite's having rolled it back by itself (a full disk, an I/O error: the connection is in
  // autocommit again) makes every statement fail (Query) rather than run, and commit, on its own.
  bool in_transaction() const noexcept { return in_transaction_; }
  void SetInTransaction(bool open) noexcept { in_transaction_ = open; }
  bool RolledBackUnderUs() const noexcept { return in_transaction_ && sqlite3_get_autocommit(db_) != 0; }

 private:
  Db(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}

  std::string path_;
  sqlite3* db_ = nullptr;
  // Keyed by the query's text (a literal at its one call site), so one query is one statement; owns
  // the statements.
  std::unordered_map<std::string_view, sqlite3_stmt*> cache_;
  // The same statements by where the text is: a literal's address names it at the cost of hashing a
  // pointer, not the whole text, on every query. Checked against the statement's text on use.
  struct TextAt {
    const char* data;
    std::size_t size;
    bool operator==(const TextAt&) const = default;
  };
  struct TextAtHash {
    std::size_t operator()(const TextAt& t) const noexcept { return std::hash<const char*>()(t.data) ^ t.size; }
  };
  std::unordered_map<TextAt, sqlite3_stmt*, TextAtHash> by_address_;
  std::uint64_t rollbacks_ = 0;
  std::optional<std::string> spoiled_;
  bool in_transaction_ = false;

  // Rows appended in the open transaction, by table, each table's in order.
  struct Appended {
    const AppendTable* table;
    std::vector<std::vector<SqlValue>> rows;
  };

  // Writes the rows waiting (`only`: one table's), before the statement `op`; a failure spoils the
  // transaction and drops them all.
  Status WriteAppended(std::string_view op, Appended* only = nullptr);
  Status WriteRows(Appended& a);  // in runs; on success a has none waiting
  Status WriteRun(const AppendTable& table, std::span<const std::vector<SqlValue>> rows);
  std::vector<Appended> appended_;
  std::size_t appended_rows_ = 0;
  std::int64_t appended_changes_ = 0;  // changes that wrote appended rows, ever
  std::int64_t appended_ever_ = 0;     // rows appended to wait, ever
  bool writing_appended_ = false;
};

// A cached statement in use: bind, step, read; reset and unbound when it goes, so the next use of
// the same query starts clean and no statement holds a read transaction open.
class Stmt {
 public:
  Stmt(Db& db, sqlite3_stmt* stmt, std::string_view op) : db_(&db), stmt_(stmt), op_(op) {}
  ~Stmt();
  Stmt(Stmt&& other) noexcept : db_(other.db_), stmt_(other.stmt_), op_(other.op_), bind_error_(other.bind_error_) {
    other.stmt_ = nullptr;
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt& operator=(Stmt&&) = delete;

  // Binds parameters ?1, ?2, ... in order; a ThreadRef takes four, a ChatRef three. Text is copied
  // (a caller's temporary may go before the statement steps; Exec below need not copy).
  template <typename... Args>
  Stmt& Bind(const Args&... args) {
    int index = 1;
    (BindOne(index, args), ...);
    return *this;
  }

  // Binds and steps to the end in one call, ignoring rows. Text is not copied: the arguments outlive
  // the call, and the statement reads them only within it (its bindings are cleared when it goes).
  template <typename... Args>
  Status Exec(const Args&... args) {
    copy_text_ = false;
    Bind(args...);
    copy_text_ = true;
    return Run();
  }

  // Binds the rows' values to ?1, ?2, ... in order, not copied (as Exec), and steps to the end.
  Status ExecRows(std::span<const std::vector<SqlValue>> rows);

  Result<bool> Step();  // true: a row is ready; false: done
  Status Run();         // steps to the end, ignoring rows

  std::string Text(int col) const;
  std::int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  bool Null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  StoreTime Time(int col) const { return FromUnixMs(Int(col)); }
  ThreadRef Thread(int col) const;  // columns col..col+3
  ChatRef Chat(int col) const;      // columns col..col+2

 private:
  void BindOne(int& index, std::string_view text);
  void BindOne(int& index, const std::string& text) { BindOne(index, std::string_view(text)); }
  void BindOne(int& index, const char* text) { BindOne(index, std::string_view(text)); }
  void BindOne(int& index, std::int64_t value);
  void BindOne(int& index, int value) { BindOne(index, static_cast<std::int64_t>(value)); }
  void BindOne(int& index, bool value) { BindOne(index, static_cast<std::int64_t>(value ? 1 : 0)); }
  void BindOne(int& index, StoreTime t) { BindOne(index, ToUnixMs(t)); }
  void BindOne(int& index, const std::optional<std::string>& text);
  void BindOne(int& index, const ThreadRef& t);
  void BindOne(int& index, const ChatRef& c);

  Db* db_;
  sqlite3_stmt* stmt_;
  std::string_view op_;  // a literal: the caller's operation name
  // A bind fails only on a misuse (a wrong index, a string past SQLite's limit); kept for Step.
  int bind_error_ = SQLITE_OK;
  bool copy_text_ = true;  // false only inside Exec
};

// BEGIN IMMEDIATE ... COMMIT; rolled back when it goes uncommitted (an early return on an error).
// IMMEDIATE takes the write lock at the start, so a transaction never fails half-way on a busy lock.
//
// Inside a transaction already (a batch of the router's), it joins that one instead: no savepoint,
// whose copy of every page it touches into a statement journal cost a third of a message's intake.
// Every store call checks before it writes, so a joined call that fails has mostly written nothing
// and leaves the outer transaction as it was. One that fails after it wrote or appended a row (only
// SQLite's own errors: I/O, a full disk, memory, a broken constraint) spoils the outer transaction: its Commit then
// rolls everything back and fails with the reason, and every call that tries to join it fails too.
// When SQLite rolled the outer transaction back by itself, every later statement fails as well (Db::
// Query) until it ends: none runs outside it in autocommit, where it would outlive the batch's rollback.
class Transaction {
 public:
  static Result<Transaction> Begin(Db& db, std::string_view op);
  ~Transaction();
  Transaction(Transaction&& other) noexcept
      : db_(other.db_), op_(other.op_), nested_(other.nested_), changes_(other.changes_) {
    other.db_ = nullptr;
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  Transaction& operator=(Transaction&&) = delete;

  Status Commit();

 private:
  Transaction(Db& db, std::string_view op, bool nested, std::int64_t changes)
      : db_(&db), op_(op), nested_(nested), changes_(changes) {}
  Db* db_;
  std::string_view op_;
  bool nested_;
  std::int64_t changes_;  // the connection's own changes (Db::OwnChanges) when a joined call began
};

}  // namespace sessionturn::routing
