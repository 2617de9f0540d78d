// RouterStore's routing tables: thread bindings, a chat's Sessions and its current one, unbinding a
// Session, the bot-message index and the dedupe keys with their bounds and eviction order.
#include "test_store_support.hpp"

using namespace store_test;

TEST_CASE("store: a thread binding is found, replaced and marked context-sent", "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  auto none = s.FindBinding(Thread());
  REQUIRE(none.has_value());
  CHECK_FALSE(none->has_value());

  REQUIRE(s.BindThread(Binding{Thread(), "bot-slack-aaaa", At(1000), false}));
  auto found = s.FindBinding(Thread());
  REQUIRE(found.has_value());
  REQUIRE(found->has_value());
  CHECK(**found == Binding{Thread(), "bot-slack-aaaa", At(1000), false});

  // Every part of the ThreadRef is in the key: no other thread sees this binding.
  CHECK_FALSE(s.FindBinding(ThreadRef{"slack", "T2", "C123", "1790000000.000100"})->has_value());
  CHECK_FALSE(s.FindBinding(ThreadRef{"telegram", "T1", "C123", "1790000000.000100"})->has_value());
  CHECK_FALSE(s.FindBinding(Thread(""))->has_value());

  REQUIRE(s.SetContextSent(Thread()));
  CHECK((*s.FindBinding(Thread()))->context_sent);

  // Binding again replaces every field.
  REQUIRE(s.BindThread(Binding{Thread(), "bot-slack-bbbb", At(2000), false}));
  CHECK(**s.FindBinding(Thread()) == Binding{Thread(), "bot-slack-bbbb", At(2000), false});

  auto missing = s.SetContextSent(Thread("other"));
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == Errc::not_found);
  CHECK_THAT(missing.error().message, Catch::Contains("C123 thread other is not bound"));
}

TEST_CASE("store: BoundSession names the bound Session, from memory or from the file, and never another thread's",
          "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  CHECK_FALSE(s.BoundSession(Thread())->has_value());
  REQUIRE(s.BindThread(Binding{Thread(), "bot-slack-aaaa", At(1000), false}));
  REQUIRE(s.BindThread(Binding{Thread("1790000000.000200"), "bot-slack-bbbb", At(1000), false}));
  CHECK(**s.BoundSession(Thread()) == "bot-slack-aaaa");
  CHECK(**s.BoundSession(Thread("1790000000.000200")) == "bot-slack-bbbb");  // its reused key made again
  CHECK(**s.BoundSession(Thread()) == "bot-slack-aaaa");
  CHECK_FALSE(s.BoundSession(ThreadRef{"slack", "T2", "C123", "1790000000.000100"})->has_value());
  CHECK_FALSE(s.BoundSession(Thread(""))->has_value());

  // A rolled-back binding is not named; the file's is.
  REQUIRE(s.BeginBatch("test batch"));
  REQUIRE(s.BindThread(Binding{Thread(), "undone", At(2000), false}));
  CHECK(**s.BoundSession(Thread()) == "undone");
  s.AbortBatch();
  CHECK(**s.BoundSession(Thread()) == "bot-slack-aaaa");

  // A reopened store has nothing in memory: it reads the binding from the file, and then knows it.
  f.store.reset();
  auto again = OpenStore(f.path);
  CHECK(**again->BoundSession(Thread("1790000000.000200")) == "bot-slack-bbbb");
  CHECK(**again->BoundSession(Thread("1790000000.000200")) == "bot-slack-bbbb");
  CHECK_FALSE(again->BoundSession(Thread("1790000000.000300"))->has_value());
}

TEST_CASE("store: bindings and current Sessions read from memory are the file's, also after a rollback",
          "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  const ChatRef chat{"telegram", "", "-1001"};
  REQUIRE(s.BindThread(Binding{Thread(), "kept", At(1000), false}));
  REQUIRE(s.AddChatSession(ChatSession{chat, "kept", At(1), ""}));
  REQUIRE(s.AddChatSession(ChatSession{chat, "undone", At(2), ""}));
  REQUIRE(s.SetCurrent(chat, "kept"));
  CHECK((*s.FindBinding(Thread()))->session == "kept");
  CHECK(**s.Current(chat) == "kept");

  // Written in a batch that is rolled back: what is read next is the file's again.
  REQUIRE(s.BeginBatch("test batch"));
  REQUIRE(s.BindThread(Binding{Thread(), "undone", At(2000), true}));
  REQUIRE(s.BindThread(Binding{Thread("new"), "undone", At(2000), false}));
  REQUIRE(s.SetCurrent(chat, "undone"));
  CHECK((*s.FindBinding(Thread()))->session == "undone");
  CHECK(**s.Current(chat) == "undone");
  s.AbortBatch();
  CHECK(**s.FindBinding(Thread()) == Binding{Thread(), "kept", At(1000), false});
  CHECK_FALSE(s.FindBinding(Thread("new"))->has_value());
  CHECK(**s.Current(chat) == "kept");

  // Past the bound of what is kept in memory, every binding still reads right.
  REQUIRE(s.BeginBatch("many threads"));
  for (int i = 0; i < 8300; ++i) {
    REQUIRE(s.BindThread(Binding{Thread("t" + std::to_string(i)), "s" + std::to_string(i), At(i), false}));
  }
  REQUIRE(s.CommitBatch());
  for (int i = 0; i < 8300; i += 97) CHECK((*s.FindBinding(Thread("t" + std::to_string(i))))->session == "s" + std::to_string(i));
  CHECK((*s.FindBinding(Thread("t8299")))->session == "s8299");
  CHECK((*s.FindBinding(Thread()))->session == "kept");

  // A reopened store reads them from the file.
  f.store.reset();
  auto again = OpenStore(f.path);
  CHECK((*again->FindBinding(Thread("t42")))->session == "s42");
  CHECK(**again->Current(chat) == "kept");
}

TEST_CASE("store: a chat's Sessions are listed oldest first and the current one must be one of them",
          "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  const ChatRef chat{"telegram", "", "-1001"};
  CHECK(s.ListChatSessions(chat)->empty());
  CHECK_FALSE(s.Current(chat)->has_value());

  CHECK(*s.AddChatSession(ChatSession{chat, "bot-tg-2", At(2000), "second"}));
  CHECK(*s.AddChatSession(ChatSession{chat, "bot-tg-1", At(1000), ""}));
  // Adding one again keeps what was there.
  CHECK_FALSE(*s.AddChatSession(ChatSession{chat, "bot-tg-2", At(3000), "renamed"}));
  CHECK(*s.AddChatSession(ChatSession{ChatRef{"telegram", "", "-1002"}, "bot-tg-3", At(500), ""}));

  auto list = s.ListChatSessions(chat);
  REQUIRE(list.has_value());
  REQUIRE(list->size() == 2);
  CHECK((*list)[0] == ChatSession{chat, "bot-tg-1", At(1000), ""});
  CHECK((*list)[1] == ChatSession{chat, "bot-tg-2", At(2000), "second"});

  auto refused = s.SetCurrent(chat, "bot-tg-3");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::not_found);
  CHECK_THAT(refused.error().message, Catch::Contains("bot-tg-3 is not one of telegram chat -1001's Sessions"));
  CHECK_FALSE(s.Current(chat)->has_value());

  REQUIRE(s.SetCurrent(chat, "bot-tg-1"));
  CHECK(**s.Current(chat) == "bot-tg-1");
  REQUIRE(s.SetCurrent(chat, "bot-tg-2"));
  CHECK(**s.Current(chat) == "bot-tg-2");
  CHECK_FALSE(s.Current(ChatRef{"telegram", "", "-1002"})->has_value());
}

TEST_CASE("store: UnbindSession removes the Session's bindings, chat entries, current marks and bot messages",
          "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  const ChatRef c1{"slack", "T1", "C1"};
  const ChatRef c2{"slack", "T1", "C2"};
  REQUIRE(s.BindThread(Binding{Thread("t1", "C1"), "gone", At(1), false}));
  REQUIRE(s.BindThread(Binding{Thread("t2", "C1"), "gone", At(1), false}));
  REQUIRE(s.BindThread(Binding{Thread("t3", "C1"), "kept", At(1), false}));
  REQUIRE(s.AddChatSession(ChatSession{c1, "gone", At(1), ""}));
  REQUIRE(s.AddChatSession(ChatSession{c1, "kept", At(2), ""}));
  REQUIRE(s.AddChatSession(ChatSession{c2, "gone", At(1), ""}));
  REQUIRE(s.SetCurrent(c1, "gone"));
  REQUIRE(s.SetCurrent(c2, "gone"));
  REQUIRE(s.IndexBotMessage(BotMessage{c1, "m1", "gone", BotMessageKind::reply}));
  REQUIRE(s.IndexBotMessage(BotMessage{c1, "m2", "kept", BotMessageKind::reply}));
  REQUIRE(s.AddInbox(Thread("t1", "C1"), "gone", Message("queued"), At(5)));

  auto removed = s.UnbindSession("gone");
  REQUIRE(removed.has_value());
  CHECK(*removed == 2 + 2 + 2 + 1);  // bindings, chat sessions, current marks, bot messages

  CHECK_FALSE(s.FindBinding(Thread("t1", "C1"))->has_value());
  CHECK_FALSE(s.FindBinding(Thread("t2", "C1"))->has_value());
  CHECK((*s.FindBinding(Thread("t3", "C1")))->session == "kept");
  REQUIRE(s.ListChatSessions(c1)->size() == 1);
  CHECK(s.ListChatSessions(c2)->empty());
  CHECK_FALSE(s.Current(c1)->has_value());
  CHECK_FALSE(s.Current(c2)->has_value());
  CHECK_FALSE(s.FindBotMessage(c1, "m1")->has_value());
  CHECK(s.FindBotMessage(c1, "m2")->has_value());
  // Work in progress is the Router's to settle.
  CHECK(s.ListInbox("gone")->size() == 1);

  CHECK(*s.UnbindSession("gone") == 0);
}

TEST_CASE("store: a bot message is found per chat and indexing it again updates it", "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  const ChatRef chat{"slack", "T1", "C1"};
  CHECK_FALSE(s.FindBotMessage(chat, "m1")->has_value());
  REQUIRE(s.IndexBotMessage(BotMessage{chat, "m1", "sess-a", BotMessageKind::placeholder}));
  REQUIRE(s.IndexBotMessage(BotMessage{ChatRef{"slack", "T1", "C2"}, "m1", "sess-b", BotMessageKind::note}));
  CHECK(**s.FindBotMessage(chat, "m1") == BotMessage{chat, "m1", "sess-a", BotMessageKind::placeholder});
  CHECK((*s.FindBotMessage(ChatRef{"slack", "T1", "C2"}, "m1"))->session == "sess-b");

  REQUIRE(s.IndexBotMessage(BotMessage{chat, "m1", "sess-a", BotMessageKind::reply}));
  CHECK((*s.FindBotMessage(chat, "m1"))->kind == BotMessageKind::reply);

  for (auto kind : {BotMessageKind::reply, BotMessageKind::placeholder, BotMessageKind::question,
                    BotMessageKind::picker, BotMessageKind::receipt, BotMessageKind::note}) {
    const std::string id = "k-" + std::string(ToString(kind));
    REQUIRE(s.IndexBotMessage(BotMessage{chat, id, "sess-a", kind}));
    CHECK((*s.FindBotMessage(chat, id))->kind == kind);
  }
}

TEST_CASE("store: the bot-message index keeps the newest rows by insertion", "[routing][store]") {
  TempDir dir;
  StoreLimits limits;
  limits.bot_messages = 3;
  auto store = OpenStore(dir.File("router.db"), limits);
  auto& s = *store;
  const ChatRef chat{"slack", "T1", "C1"};
  auto index = [&](const std::string& id, const std::string& session = "s") {
    REQUIRE(s.IndexBotMessage(BotMessage{chat, id, session, BotMessageKind::reply}));
  };
  auto has = [&](const std::string& id) { return s.FindBotMessage(chat, id)->has_value(); };

  index("a");
  index("b");
  index("c");
  // Indexing "a" again does not make it newer: the order is the first insertion's.
  index("a", "s2");
  index("d");
  CHECK_FALSE(has("a"));
  CHECK(has("b"));
  CHECK(has("c"));
  CHECK(has("d"));

  // Rows removed by other means leave room: the bound counts rows, not ids.
  REQUIRE(*s.UnbindSession("gone") == 0);
  index("e", "gone");
  CHECK_FALSE(has("b"));
  REQUIRE(*s.UnbindSession("gone") == 1);
  index("f");
  CHECK(has("c"));
  CHECK(has("d"));
  CHECK(has("f"));
  index("g");
  CHECK_FALSE(has("c"));
  CHECK(has("d"));

  store.reset();
  {
    RawDb raw(dir.File("router.db"));
    CHECK(raw.Int("SELECT count(*) FROM bot_messages") == 3);
  }
  // Reopened, the store counts its rows again: one more insert evicts exactly the oldest.
  auto reopened = OpenStore(dir.File("router.db"), limits);
  REQUIRE(reopened->IndexBotMessage(BotMessage{chat, "h", "s", BotMessageKind::reply}));
  for (const char* id : {"f", "g", "h"}) CHECK(reopened->FindBotMessage(chat, id)->has_value());
  CHECK_FALSE(reopened->FindBotMessage(chat, "d")->has_value());
  reopened.reset();
  RawDb raw(dir.File("router.db"));
  CHECK(raw.Int("SELECT count(*) FROM bot_messages") == 3);
}

TEST_CASE("store: a dedupe key is seen the second time, per kind, and can be forgotten", "[routing][store]") {
  Fixture f;
  auto& s = *f.store;
  CHECK_FALSE(*s.SeenOrRemember(DedupeKind::event, "slack:T1:Ev1"));
  CHECK(*s.SeenOrRemember(DedupeKind::event, "slack:T1:Ev1"));
  CHECK(*s.SeenOrRemember(DedupeKind::event, "slack:T1:Ev1"));
  // The kinds are separate: the same string as a message key is new.
  CHECK_FALSE(*s.SeenOrRemember(DedupeKind::message, "slack:T1:Ev1"));

  CHECK(*s.Forget(DedupeKind::event, "slack:T1:Ev1"));
  CHECK_FALSE(*s.Forget(DedupeKind::event, "slack:T1:Ev1"));
  CHECK_FALSE(*s.SeenOrRemember(DedupeKind::event, "slack:T1:Ev1"));
  CHECK(*s.SeenOrRemember(DedupeKind::message, "slack:T1:Ev1"));
}

TEST_CASE("store: dedupe keys are bounded per kind with the oldest evicted", "[routing][store]") {
  TempDir dir;
  StoreLimits limits;
  limits.dedupe_per_kind = 3;
  auto store = OpenStore(dir.File("router.db"), limits);
  auto& s = *store;
  for (const char* k : {"e1", "e2", "e3"}) REQUIRE_FALSE(*s.SeenOrRemember(DedupeKind::event, k));
  for (const char* k : {"m1", "m2", "m3", "m4", "m5"}) REQUIRE_FALSE(*s.SeenOrRemember(DedupeKind::message, k));
  // Five message keys pushed out the two oldest message keys and no event key.
  CHECK_FALSE(*s.Forget(DedupeKind::message, "m2"));
  CHECK(*s.SeenOrRemember(DedupeKind::message, "m3"));
  CHECK(*s.SeenOrRemember(DedupeKind::event, "e1"));
  // A key seen again keeps its place: e1 is still the oldest, and e4 evicts it.
  REQUIRE_FALSE(*s.SeenOrRemember(DedupeKind::event, "e4"));
  CHECK_FALSE(*s.Forget(DedupeKind::event, "e1"));
  CHECK(*s.SeenOrRemember(DedupeKind::event, "e2"));
  CHECK(*s.SeenOrRemember(DedupeKind::event, "e3"));
  CHECK(*s.SeenOrRemember(DedupeKind::event, "e4"));

  store.reset();
  RawDb raw(dir.File("router.db"));
  CHECK(raw.Int("SELECT count(*) FROM dedupe_event") == 3);
  CHECK(raw.Int("SELECT count(*) FROM dedupe_message") == 3);
}

TEST_CASE("store: a forgotten dedupe key leaves the bound and eviction passes over it", "[routing][store]") {
  TempDir dir;
  StoreLimits limits;
  limits.dedupe_per_kind = 3;
  auto store = OpenStore(dir.File("router.db"), limits);
  auto& s = *store;
  for (const char* k : {"e1", "e2", "e3"}) REQUIRE_FALSE(*s.SeenOrRemember(DedupeKind::event, k));
  REQUIRE(*s.Forget(DedupeKind::event, "e2"));
  CHECK_FALSE(*s.Forget(DedupeKind::event, "e2"));
  REQUIRE_FALSE(*s.SeenOrRemember(DedupeKind::event, "e4"));  // three again: nothing evicted
  CHECK(*s.SeenOrRemember(DedupeKind::event, "e1"));
  REQUIRE_FALSE(*s.SeenOrRemember(DedupeKind::event, "e5"));  // four: e1 goes
  CHECK_FALSE(*s.Forget(DedupeKind::event, "e1"));
  REQUIRE_FALSE(*s.SeenOrRemember(DedupeKind::event, "e6"));  // e3 goes; e2's old place is passed over
  for (const char* k : {"e4", "e5", "e6"}) CHECK(*s.SeenOrRemember(DedupeKind::event, k));
  CHECK_FALSE(*s.SeenOrRemember(DedupeKind::event, "e2"));  // forgotten: new again (and e4 goes)
  CHECK_FALSE(*s.Forget(DedupeKind::event, "e4"));
  store.reset();
  RawDb raw(dir.File("router.db"));
  CHECK(raw.Int("SELECT count(*) FROM dedupe_event") == 3);
  CHECK(raw.Int("SELECT count(*) FROM dedupe_event WHERE key IN ('e5', 'e6', 'e2')") == 3);
}

TEST_CASE("store: a key forgotten and remembered again is not evicted by its old place", "[routing][store]") {
  TempDir dir;
  StoreLimits limits;
  limits.dedupe_per_kind = 2;
  auto store = OpenStore(dir.File("router.db"), limits);
  auto& s = *store;
  for (const char* k : {"a", "b"}) REQUIRE_FALSE(*s.SeenOrRemember(DedupeKind::event, k));
  REQUIRE(*s.Forget(DedupeKind::event, "b"));
  REQUIRE_FALSE(*s.SeenOrRemember(DedupeKind::event, "k"));
  REQUIRE(*s.Forget(DedupeKind::event, "k"));  // the newest rows gone: their seqs must not come back
  REQUIRE_FALSE(*s.SeenOrRemember(DedupeKind::event, "x"));
  REQUIRE_FALSE(*s.SeenOrRemember(DedupeKind::event, "k"));  // three: "a" goes, and only "a"
  CHECK(*s.SeenOrRemember(DedupeKind::event, "x"));
  CHECK(*s.SeenOrRemember(DedupeKind::event, "k"));
  CHECK_FALSE(*s.Forget(DedupeKind::event, "a"));
  // Forgetting many keys below the bound keeps the in-memory order bounded (and right).
  StoreLimits wide;
  wide.dedupe_per_kind = 4096;
  store.reset();
  store = OpenStore(dir.File("router.db"), wide);
  for (int i = 0; i < 1000; ++i) {
    REQUIRE_FALSE(*store->SeenOrRemember(DedupeKind::message, "m" + std::to_string(i)));
    REQUIRE(*store->Forget(DedupeKind::message, "m" + std::to_string(i)));
  }
  CHECK_FALSE(*store->SeenOrRemember(DedupeKind::message, "m999"));
  CHECK(*store->SeenOrRemember(DedupeKind::message, "m999"));
  CHECK(*store->SeenOrRemember(DedupeKind::event, "k"));
}

TEST_CASE("store: in a batch, the bot messages past the bound are evicted once, at its commit", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  StoreLimits limits;
  limits.bot_messages = 3;
  auto store = OpenStore(path, limits);
  auto& s = *store;
  const ChatRef chat{"slack", "T1", "C1"};
  auto index = [&](const std::string& id) {
    REQUIRE(s.IndexBotMessage(BotMessage{chat, id, "sess", BotMessageKind::placeholder, 0}));
  };
  for (const char* id : {"b1", "b2", "b3"}) index(id);
  REQUIRE(s.BeginBatch("test batch"));
  for (const char* id : {"b4", "b5"}) index(id);
  // Past the bound in the batch, nothing evicted yet: the oldest are still found.
  CHECK(s.FindBotMessage(chat, "b1")->has_value());
  CHECK(s.FindBotMessage(chat, "b2")->has_value());
  REQUIRE(s.CommitBatch());
  {
    RawDb raw(path);
    CHECK(raw.Int("SELECT count(*) FROM bot_messages") == 3);
    CHECK(raw.Int("SELECT count(*) FROM bot_messages WHERE message_id IN ('b3', 'b4', 'b5')") == 3);
  }
  CHECK_FALSE(s.FindBotMessage(chat, "b1")->has_value());
  CHECK(s.FindBotMessage(chat, "b3")->has_value());

  // An eviction that fails at the commit rolls the whole batch back, and says why.
  {
    RawDb raw(path);
    raw.Exec("CREATE TRIGGER fail_evict BEFORE DELETE ON bot_messages BEGIN SELECT RAISE(ABORT, 'no eviction'); END");
  }
  REQUIRE(s.BeginBatch("test batch"));
  index("b6");
  auto commit = s.CommitBatch();
  REQUIRE_FALSE(commit);
  CHECK_THAT(commit.error().message, Catch::Contains("no eviction"));
  CHECK_FALSE(s.InBatch());
  {
    RawDb raw(path);
    raw.Exec("DROP TRIGGER fail_evict");
    CHECK(raw.Int("SELECT count(*) FROM bot_messages WHERE message_id = 'b6'") == 0);
    CHECK(raw.Int("SELECT count(*) FROM bot_messages") == 3);
  }
  // Outside a batch, each index evicts at once, as before.
  index("b6");
  CHECK_FALSE(s.FindBotMessage(chat, "b3")->has_value());
  store.reset();
  RawDb raw(path);
  CHECK(raw.Int("SELECT count(*) FROM bot_messages") == 3);
  CHECK(raw.Int("SELECT count(*) FROM bot_messages WHERE message_id IN ('b4', 'b5', 'b6')") == 3);
}

TEST_CASE("store: in a batch, the dedupe keys past the bound are evicted once, at its commit", "[routing][store]") {
  TempDir dir;
  const std::string path = dir.File("router.db");
  StoreLimits limits;
  limits.dedupe_per_kind = 3;
  auto store = OpenStore(path, limits);
  auto& s = *store;
  for (const char* k : {"e1", "e2", "e3"}) REQUIRE_FALSE(*s.SeenOrRemember(DedupeKind::event, k));
  REQUIRE(s.BeginBatch("test batch"));
  for (const char* k : {"e4", "e5"}) REQUIRE_FALSE(*s.SeenOrRemember(DedupeKind::event, k));
  // Past the bound in the batch, and nothing evicted yet: the oldest keys still count as seen.
  CHECK(*s.SeenOrRemember(DedupeKind::event, "e1"));
  CHECK(*s.SeenOrRemember(DedupeKind::event, "e2"));
  REQUIRE_FALSE(*s.SeenOrRemember(DedupeKind::message, "m1"));  // the other kind, below its bound
  REQUIRE(s.CommitBatch());
  {
    RawDb raw(path);
    CHECK(raw.Int("SELECT count(*) FROM dedupe_event") == 3);
    CHECK(raw.Int("SELECT count(*) FROM dedupe_event WHERE key IN ('e3', 'e4', 'e5')") == 3);
    CHECK(raw.Int("SELECT count(*) FROM dedupe_message") == 1);
  }
  CHECK_FALSE(*s.Forget(DedupeKind::event, "e1"));
  CHECK_FALSE(*s.Forget(DedupeKind::event, "e2"));
  for (const char* k : {"e3", "e4", "e5"}) CHECK(*s.SeenOrRemember(DedupeKind::event, k));

  // An eviction that fails at the commit rolls the whole batch back, and says why.
  {
    RawDb raw(path);
    raw.Exec("CREATE TRIGGER fail_evict BEFORE DELETE ON dedupe_event BEGIN SELECT RAISE(ABORT, 'no eviction'); END");
  }
  REQUIRE(s.BeginBatch("test batch"));
  REQUIRE_FALSE(*s.SeenOrRemember(DedupeKind::event, "e6"));
  REQUIRE_FALSE(*s.SeenOrRemember(DedupeKind::message, "m2"));
  auto commit = s.CommitBatch();
  REQUIRE_FALSE(commit);
  CHECK_THAT(commit.error().message, Catch::Contains("no eviction"));
  CHECK_FALSE(s.InBatch());
  {
    RawDb raw(path);
    raw.Exec("DROP TRIGGER fail_evict");
    CHECK(raw.Int("SELECT count(*) FROM dedupe_event WHERE key = 'e6'") == 0);
    CHECK(raw.Int("SELECT count(*) FROM dedupe_message WHERE key = 'm2'") == 0);
  }
  CHECK_FALSE(*s.Forget(DedupeKind::message, "m2"));
  CHECK(*s.Forget(DedupeKind::message, "m1"));
  // Outside a batch, each call evicts as before.
  REQUIRE_FALSE(*s.SeenOrRemember(DedupeKind::event, "e6"));
  CHECK_FALSE(*s.Forget(DedupeKind::event, "e3"));
  store.reset();
  RawDb raw(path);
  CHECK(raw.Int("SELECT count(*) FROM dedupe_event") == 3);
}
