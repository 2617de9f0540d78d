// The store's work in progress, second half (store.hpp): the outbox of replies not yet delivered
// (queued with the turn's end in one transaction) and the open questions.
#include <map>

#include "routing/store.hpp"
#include "routing/store_json.hpp"
#include "routing/store_sqlite.hpp"

namespace sessionturn::routing {
namespace {

template <typename T>
Result<T> DecodeColumn(const std::string& path, const std::string& row, const std::string& text,
                       Result<T> (*decode)(const Json&)) {
  auto j = ParseJson(text);
  if (!j) return Fail(Errc::io_error, "router store " + path + ": " + row + ": " + j.error().message);
  auto v = decode(*j);
  if (!v) return Fail(Errc::io_error, "router store " + path + ": " + row + ": " + v.error().message);
  return v;
}

// The progress column: {"answered": N, "answers": {question id: [labels or text]}}.
struct Progress {
  std::size_t answered = 0;
  std::map<std::string, std::vector<std::string>> answers;
};

Json ProgressToJson(const OpenQuestion& o) {
  Json answers = Json::object();
  for (const auto& [id, choice] : o.answers) answers[id] = StringsToJson(choice);
  return Json{{"answered", o.answered}, {"answers", std::move(answers)}};
}

Result<Progress> ProgressFromJson(const Json& j) {
  Progress p;
  if (!j.is_object()) return Fail(Errc::invalid_argument, "progress is not a JSON object");
  if (auto it = j.find("answered"); it != j.end()) {
    if (!it->is_number_unsigned()) return Fail(Errc::invalid_argument, "progress.answered is not a count");
    p.answered = it->get<std::size_t>();
  }
  if (auto it = j.find("answers"); it != j.end()) {
    if (!it->is_object()) return Fail(Errc::invalid_argument, "progress.answers is not an object");
    for (const auto& [id, choice] : it->items()) {
      auto strings = StringsFromJson(choice);
      if (!strings) return Fail(Errc::invalid_argument, "progress.answers." + id + ": " + strings.error().message);
      p.answers[id] = std::move(*strings);
    }
  }
  return p;
}

// Columns: id, session, request_id, input_id, platform, workspace, chat, thread, message_id, questions,
// asker_id, deadline_ms, progress.
Result<OpenQuestion> ReadQuestion(const Stmt& q, const std::string& path) {
  OpenQuestion o;
  o.id = q.Text(0);
  o.session = q.Text(1);
  o.request_id = q.Text(2);
  o.input_id = q.Text(3);
  o.thread = q.Thread(4);
  o.message_id = q.Text(8);
  auto questions = DecodeColumn(path, "question " + o.id, q.Text(9), &QuestionsFromJson);
  if (!questions) return Fail(questions.error());
  o.questions = std::move(*questions);
  o.asker_id = q.Text(10);
  o.deadline = q.Time(11);
  auto progress = DecodeColumn(path, "question " + o.id, q.Text(12), &ProgressFromJson);
  if (!progress) return Fail(progress.error());
  o.answered = progress->answered;
  o.answers = std::move(progress->answers);
  return o;
}

Result<std::optional<OpenQuestion>> ReadOneQuestion(Stmt& q, const std::string& path) {
  auto row = q.Step();
  if (!row) return Fail(row.error());
  if (!*row) return std::optional<OpenQuestion>();
  auto o = ReadQuestion(q, path);
  if (!o) return Fail(o.error());
  return std::optional<OpenQuestion>(std::move(*o));
}

Result<std::vector<OpenQuestion>> ReadAllQuestions(Stmt& q, const std::string& path,
                                                   std::vector<DamagedRow>* damaged = nullptr) {
  std::vector<OpenQuestion> out;
  for (;;) {
    auto row = q.Step();
    if (!row) return Fail(row.error());
    if (!*row) return out;
    auto o = ReadQuestion(q, path);
    if (o) {
      out.push_back(std::move(*o));
    } else if (damaged != nullptr) {
      damaged->push_back({"question " + q.Text(0), 0, q.Text(0), q.Thread(4), q.Text(1), std::move(o.error())});
    } else {
      return Fail(o.error());
    }
  }
}

}  // namespace

Result<std::int64_t> RouterStore::InsertOutbox(std::string_view op, const OutboxEntry& e) {
  auto q = db_->Query(op, R"sql(
    INSERT INTO outbox (platform, workspace, chat, thread, session, request_id, parts, next_part, placeholder_id,
                        attempts, next_attempt_ms, last_error)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12))sql");
  if (!q) return Fail(q.error());
  if (auto st =
          q->Exec(e.thread, e.session, e.request_id, DumpJson(StringsToJson(e.parts)),
                  static_cast<std::int64_t>(e.next_part), e.placeholder_id, e.attempts, e.next_attempt, e.last_error);
      !st)
    return Fail(st.error());
  return db_->LastInsertId();
}

Result<std::int64_t> RouterStore::AddOutbox(const OutboxEntry& entry) {
  return InsertOutbox("AddOutbox", entry);
}

Result<std::int64_t> RouterStore::CompleteTurn(const OutboxEntry& reply) {
  auto tx = Transaction::Begin(*db_, "CompleteTurn");
  if (!tx) return Fail(tx.error());
  auto finished = DeleteTurn("CompleteTurn", reply.request_id);
  if (!finished) return Fail(finished.error());
  if (!*finished)
    return Fail(Errc::not_found, "no turn in flight with request id " + reply.request_id + " to complete");
  auto id = InsertOutbox("CompleteTurn", reply);
  if (!id) return Fail(id.error());
  if (auto st = tx->Commit(); !st) return Fail(st.error());
  return id;
}

Status RouterStore::UpdateOutbox(std::int64_t id, std::size_t next_part, int attempts, StoreTime next_attempt,
                                 std::string_view last_error) {
  auto q = db_->Query("UpdateOutbox", R"sql(
    UPDATE outbox SET next_part = ?2, attempts = ?3, next_attempt_ms = ?4, last_error = ?5 WHERE id = ?1)sql");
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(id, static_cast<std::int64_t>(next_part), attempts, next_attempt, last_error); !st)
    return st;
  if (db_->Changes() == 0) return Fail(Errc::not_found, "no outbox entry " + std::to_string(id) + " to update");
  return {};
}

Result<bool> RouterStore::RemoveOutbox(std::int64_t id) {
  auto q = db_->Query("RemoveOutbox", "DELETE FROM outbox WHERE id = ?1");
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(id); !st) return Fail(st.error());
  return db_->Changes() > 0;
}

Result<std::vector<OutboxEntry>> RouterStore::ListOutbox(std::vector<DamagedRow>* damaged) {
  auto q = db_->Query("ListOutbox", R"sql(
    SELECT id, platform, workspace, chat, thread, session, request_id, parts, next_part, placeholder_id, attempts,
           next_attempt_ms, last_error
    FROM outbox ORDER BY id)sql");
  if (!q) return Fail(q.error());
  std::vector<OutboxEntry> out;
  for (;;) {
    auto row = q->Step();
    if (!row) return Fail(row.error());
    if (!*row) return out;
    OutboxEntry e;
    e.id = q->Int(0);
    e.thread = q->Thread(1);
    e.session = q->Text(5);
    e.request_id = q->Text(6);
    auto parts = DecodeColumn(path_, "outbox entry " + std::to_string(e.id), q->Text(7), &StringsFromJson);
    if (!parts) {
      if (damaged == nullptr) return Fail(parts.error());
      damaged->push_back({"outbox entry " + std::to_string(e.id), e.id, {}, std::move(e.thread),
                          std::move(e.session), std::move(parts.error())});
      continue;
    }
    e.parts = std::move(*parts);
    e.next_part = static_cast<std::size_t>(q->Int(8));
    e.placeholder_id = q->Text(9);
    e.attempts = static_cast<int>(q->Int(10));
    e.next_attempt = q->Time(11);
    e.last_error = q->Text(12);
    out.push_back(std::move(e));
  }
}

Status RouterStore::AddQuestion(const OpenQuestion& o) {
  if (o.id.empty()) return Fail(Errc::invalid_argument, "an open question needs an id");
  auto q = db_->Query("AddQuestion", R"sql(
    INSERT INTO questions (id, session, request_id, input_id, platform, workspace, chat, thread, message_id,
                           questions, asker_id, deadline_ms, progress)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) ON CONFLICT DO NOTHING)sql");
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(o.id, o.session, o.request_id, o.input_id, o.thread, o.message_id,
                        DumpJson(QuestionsToJson(o.questions)), o.asker_id, o.deadline, DumpJson(ProgressToJson(o)));
      !st)
    return st;
  if (db_->Changes() == 0) return Fail(Errc::invalid_argument, "open question id " + o.id + " is in use");
  return {};
}

Result<std::optional<OpenQuestion>> RouterStore::FindQuestion(std::string_view id) {
  auto q = db_->Query("FindQuestion", R"sql(
    SELECT id, session, request_id, input_id, platform, workspace, chat, thread, message_id, questions, asker_id,
           deadline_ms, progress
    FROM questions WHERE id = ?1)sql");
  if (!q) return Fail(q.error());
  q->Bind(id);
  return ReadOneQuestion(*q, path_);
}

Result<std::optional<OpenQuestion>> RouterStore::FindQuestionByMessage(const ChatRef& chat,
                                                                       std::string_view message_id) {
  auto q = db_->Query("FindQuestionByMessage", R"sql(
    SELECT id, session, request_id, input_id, platform, workspace, chat, thread, message_id, questions, asker_id,
           deadline_ms, progress
    FROM questions WHERE platform = ?1 AND workspace = ?2 AND chat = ?3 AND message_id = ?4
    ORDER BY rowid LIMIT 1)sql");
  if (!q) return Fail(q.error());
  q->Bind(chat, message_id);
  return ReadOneQuestion(*q, path_);
}

Result<std::vector<OpenQuestion>> RouterStore::OpenQuestionsIn(const ThreadRef& thread) {
  auto q = db_->Query("OpenQuestionsIn", R"sql(
    SELECT id, session, request_id, input_id, platform, workspace, chat, thread, message_id, questions, asker_id,
           deadline_ms, progress
    FROM questions WHERE platform = ?1 AND workspace = ?2 AND chat = ?3 AND thread = ?4 ORDER BY rowid)sql");
  if (!q) return Fail(q.error());
  q->Bind(thread);
  return ReadAllQuestions(*q, path_);
}

Result<bool> RouterStore::RemoveQuestion(std::string_view id) {
  auto q = db_->Query("RemoveQuestion", "DELETE FROM questions WHERE id = ?1");
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(id); !st) return Fail(st.error());
  return db_->Changes() > 0;
}

Status RouterStore::SetQuestionProgress(const OpenQuestion& o) {
  auto q = db_->Query("SetQuestionProgress", "UPDATE questions SET progress = ?2 WHERE id = ?1");
  if (!q) return Fail(q.error());
  if (auto st = q->Exec(o.id, DumpJson(ProgressToJson(o))); !st) return st;
  if (db_->Changes() == 0) return Fail(Errc::not_found, "no open question " + o.id);
  return {};
}

Result<std::vector<OpenQuestion>> RouterStore::ListQuestions(std::vector<DamagedRow>* damaged) {
  auto q = db_->Query("ListQuestions", R"sql(
    SELECT id, session, request_id, input_id, platform, workspace, chat, thread, message_id, questions, asker_id,
           deadline_ms, progress
    FROM questions ORDER BY rowid)sql");
  if (!q) return Fail(q.error());
  return ReadAllQuestions(*q, path_, damaged);
}

}  // namespace sessionturn::routing
