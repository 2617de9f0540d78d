// The agent's questions in the chat: posted into the turn's thread (numbered options, buttons where
// the platform has them), answered by a button, by a reply to the question, or by the next message
// in the thread from someone allowed to answer; declined when nobody answers in time; the question
// message edited to show the outcome. Button presses of every kind arrive here first.
#include <cstdio>
#include <iterator>
#include <optional>

#include "routing/answers.hpp"
#include "routing/router_impl.hpp"
#include "sessionturn/render.hpp"

namespace sessionturn {

using routing::QuestionRun;
using routing::TurnRun;

namespace {

void Ack(const InboundAction& action, std::string_view text) {
  if (action.ack) action.ack(text);
}

std::string Joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

}  // namespace

bool Router::Impl::MayAnswer(const QuestionRun& q, const std::string& user) const {
  if (user == q.stored.asker_id) return true;
  // The route of the question's turn; after a restart, before the re-attached turn asks again, that
  // of its Session (restored with the turn).
  std::size_t route = 0;
  if (auto turn = q.turn.lock()) {
    route = turn->route;
  } else if (auto s = sessions.find(q.stored.session); s != sessions.end()) {
    route = s->second->route;
  }
  const RouteConfig& r = Route(route);
  if (routing::IsAdmin(r, user)) return true;
  return options.answerers == AnswerPolicy::allowed_users && routing::IsAllowedUser(r, user);
}

void Router::Impl::OnQuestion(const std::shared_ptr<TurnRun>& turn, const Event& event, Responder responder) {
  if (turn->done || shutting_down) {
    responder.Decline();
    return;
  }
  if (resolved_inputs.count(turn->request_id + '\x1f' + event.input_id) != 0) return;  // answered already
  if (options.decline_questions) {
    if (responder.Decline()) {
      Note(turn->where, "The agent asked a question; this bot declines questions, so it goes on without an answer.",
           turn->session);
    }
    return;
  }
  // After a restart the re-attached turn asks again: the question is in the thread already.
  for (auto& [id, q] : questions) {
    if (q->stored.request_id == turn->request_id && q->stored.input_id == event.input_id) {
      q->responder = responder;
      q->turn = turn;
      turn->open_question = id;
      ShowProgress(turn);
      return;
    }
  }
  auto q = std::make_shared<QuestionRun>();
  char id[16];
  std::snprintf(id, sizeof id, "%08llx", static_cast<unsigned long long>(rng() & 0xffffffffULL));
  q->stored.id = id;
  q->stored.session = turn->session;
  q->stored.request_id = turn->request_id;
  q->stored.input_id = event.input_id;
  q->stored.thread = turn->where;
  q->stored.questions = event.questions;
  q->stored.asker_id = turn->message.author_id;
  q->stored.deadline = std::chrono::system_clock::now() +
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(options.answer_timeout);
  q->responder = responder;
  q->turn = turn;
  if (q->stored.questions.empty()) {
    responder.Decline();  // nothing to ask: the runtime sent an empty request
    return;
  }
  questions[q->stored.id] = q;
  turn->open_question = q->stored.id;
  ShowProgress(turn);
  PublishGauges();
  std::vector<std::vector<Button>> buttons;
  if (q->stored.questions.size() == 1) buttons = routing::QuestionButtons(q->stored.id, q->stored.questions[0], caps);
  adapter.AsyncPost(turn->where, OutboundMessage{Render(routing::FormatQuestion(event, caps)), buttons,
                                                 turn->message.message_id},
                    OnStrand<Result<std::string>>([q](Impl& r, Result<std::string> message_id) {
                      if (!message_id) {
                        r.Log(LogLevel::warning, "the agent's question could not be posted in chat " +
                                                     q->stored.thread.chat + ": " + message_id.error().ToString());
                        // Nobody can answer a question nobody sees.
                        q->resolved = true;
                        q->responder.Decline();
                        r.questions.erase(q->stored.id);
                        if (auto turn = q->turn.lock()) turn->open_question.clear();
                        return;
                      }
                      q->stored.message_id = *message_id;
                      if (q->resolved) {
                        // Answered (a button is matched by its data, not the message) or closed before
                        // the post came back: not stored as open; its message shows how it ended.
                        if (!q->closing_text.empty()) r.MarkQuestionMessage(*q, q->closing_text);
                      } else if (auto st = r.store->AddQuestion(q->stored); !st) {
                        r.Log(LogLevel::warning, st.error().ToString());
                      }
                      if (auto st = r.store->IndexBotMessage({routing::ChatRef::Of(q->stored.thread), *message_id,
                                                              q->stored.session, routing::BotMessageKind::question});
                          !st) {
                        r.Log(LogLevel::warning, st.error().ToString());
                      }
                    }));
  q->timeout = std::make_unique<asio::steady_timer>(context.io(), options.answer_timeout);
  q->timeout->async_wait(asio::bind_executor(strand, [self = shared_from_this(), id = q->stored.id](
                                                         const asio::error_code& ec) {
    if (!ec && !self->torn_down) self->ExpireQuestion(id);
  }));
}

std::shared_ptr<QuestionRun> Router::Impl::QuestionFor(const InboundMessage& m, std::size_t route, bool* ambiguous) {
  (void)route;
  *ambiguous = false;
  // Slack marks every message in a thread as a reply to the thread's first message: that is where it
  // was written, not a reply to a question (Telegram's adapter drops a forum topic's root the same way).
  const bool replies = !m.reply_to_message_id.empty() && m.reply_to_message_id != m.thread;
  if (!m.reply_to_message_id.empty()) {
    for (auto& [id, q] : questions) {
      if (q->stored.message_id == m.reply_to_message_id && q->stored.thread.chat == m.chat) return q;
    }
  }
  if (replies) {
    // A reply to a message we do not know, in a thread whose question's post has not come back yet:
    // the platform showed the question before it told us its id, and the user answered it. (A reply to
    // any message in the bot-message index is not that question.)
    for (auto& [id, q] : questions) {
      if (q->resolved || !q->stored.message_id.empty() || !(q->stored.thread == m.Where())) continue;
      auto known = store->FindBotMessage(routing::ChatRef::Of(m.Where()), m.reply_to_message_id);
      if (known && !*known) return q;
      break;
    }
    return nullptr;
  }
  // The next message in the question's thread from someone who may answer it: when two questions
  // there wait for this author (two Sessions of a chat without threads asking at once), it names none.
  std::shared_ptr<QuestionRun> found;
  for (auto& [id, q] : questions) {
    if (q->resolved || !(q->stored.thread == m.Where()) || !MayAnswer(*q, m.author_id)) continue;
    if (found) {
      *ambiguous = true;
      break;
    }
    found = q;
  }
  return found;
}

void Router::Impl::AnswerFromChat(QuestionRun& q, const InboundMessage& m, bool ambiguous) {
  if (ambiguous) {
    // Not indexed as a Session's message (no Session): a reply to it is no answer either.
    Note(m.Where(), "More than one of the agent's questions is open here: reply to the question you are answering.",
         std::string(), m.message_id);
    return;
  }
  if (!MayAnswer(q, m.author_id)) {
    Note(m.Where(), "Only the person whose message started this turn can answer the agent's question.",
         q.stored.session, m.message_id);
    return;
  }
  const InputQuestion& current = q.stored.questions.at(q.stored.answered);
  auto choice = routing::ParseAnswer(m.text, current);
  if (!choice) {
    Note(m.Where(), "That is not an answer to the question: " + EscapeMarkdown(choice.error().message),
         q.stored.session, m.message_id);
    return;
  }
  Answer(q, std::move(*choice), m.author_id, m.author_name);
}

void Router::Impl::Answer(QuestionRun& q, std::vector<std::string> choice, const std::string& who_id,
                          const std::string& who_name) {
  (void)who_id;
  // `q` lives in `questions`: keep it (and its id) alive past the erase below.
  const auto hold = questions.at(q.stored.id);
  const std::string id = q.stored.id;
  const InputQuestion& current = q.stored.questions.at(q.stored.answered);
  const bool secret = current.secret;
  q.answers[current.id] = choice;
  ++q.stored.answered;
  if (q.stored.answered < q.stored.questions.size()) {
    // Stored before the thread is asked for the next one: after a restart the next reply is still
    // taken for it. A secret answer is not stored (a restart then asks from the first question again).
    if (!secret) q.stored.answers[current.id] = choice;
    Status kept;
    (void)Durably("recording an answer", [&] { kept = store->SetQuestionProgress(q.stored); });
    if (!kept && kept.error().code != Errc::not_found) {  // not stored yet: AddQuestion writes it
      Log(LogLevel::warning, "question " + id + ": the answers so far were not stored (after a restart it would "
                             "be asked from its first question again): " + kept.error().ToString());
    }
    Note(q.stored.thread, "Got it. Now question " + std::to_string(q.stored.answered + 1) + " of " +
                              std::to_string(q.stored.questions.size()) + ", please.", q.stored.session);
    return;
  }
  Resolve(q, &q.answers);
  q.resolved = true;
  if (q.timeout) q.timeout->cancel();
  std::string shown = secret ? std::string("(the answer is not shown)") : EscapeMarkdown(Joined(choice));
  const std::string name = who_name.empty() ? std::string("someone") : EscapeMarkdown(who_name);
  MarkQuestionMessage(q, "\u2705 Answered by " + name + ": " + shown);
  if (auto st = store->RemoveQuestion(id); !st) Log(LogLevel::warning, st.error().ToString());
  if (auto turn = q.turn.lock()) {
    turn->open_question.clear();
    ShowProgress(turn);
  }
  questions.erase(id);
  PublishGauges();
}

void Router::Impl::Resolve(QuestionRun& q, const std::map<std::string, std::vector<std::string>>* answers) {
  resolved_inputs.insert(q.stored.request_id + '\x1f' + q.stored.input_id);
  if (!q.responder.input_id().empty()) {
    const bool mine = answers != nullptr ? q.responder.Answer(*answers) : q.responder.Decline();
    if (!mine && answers != nullptr) {
      Note(q.stored.thread, "The agent is not waiting for this answer any more (the question was resolved elsewhere).",
           q.stored.session);
    }
    return;
  }
  // After a restart, until the re-attached turn asks again (or when its replay started past the
  // question): the Session's open request is resolved by a one-shot Answer or Decline.
  auto it = sessions.find(q.stored.session);
  auto reached = OnStrand<Status>([thread = q.stored.thread, session = q.stored.session, answering = answers != nullptr](
                                      Impl& r, Status st) {
    if (st) return;
    r.Log(LogLevel::warning, "resolving a question of Session " + session + " failed: " + st.error().ToString());
    if (answering) {
      r.Note(thread, "\u26A0\uFE0F The answer could not reach the agent: " + EscapeMarkdown(st.error().message), session);
    }
  });
  auto send = [input = q.stored.input_id, answers = answers != nullptr ? std::optional(*answers) : std::nullopt,
               reached](Driver& d) mutable {
    if (answers) return d.AsyncAnswer(input, std::move(*answers), std::move(reached));
    d.AsyncDecline(input, std::move(reached));
  };
  if (it != sessions.end() && it->second->driver) return send(*it->second->driver);
  // Not connected yet (the re-attached turn still waits for its Session): wait for it here too.
  backend.AsyncWaitReady(q.stored.session, std::chrono::steady_clock::now() + options.wait_ready_timeout, {}, {},
                         OnStrand<Result<ReadyTarget>>([session = q.stored.session, send,
                                                        reached](Impl& r, Result<ReadyTarget> target) mutable {
                           if (!target) return reached(Fail(target.error()));
                           auto& s = r.SessionFor(session, 0);
                           if (!s.driver) s.driver = std::make_shared<Driver>(r.context, target->connector);
                           send(*s.driver);
                         }));
}

void Router::Impl::MarkQuestionMessage(QuestionRun& q, const std::string& markdown) {
  if (q.stored.message_id.empty()) {
    q.closing_text = markdown;  // the post has not come back yet: marked when it does
    return;
  }
  adapter.AsyncEdit(q.stored.thread, q.stored.message_id, OutboundMessage{Render(markdown), {}, {}},
                    OnStrand<Status>([](Impl& r, Status st) {
                      if (!st) r.Log(LogLevel::info, "marking a question's message failed: " + st.error().ToString());
                    }));
}

void Router::Impl::ExpireQuestion(std::string id) {  // a copy: the entry it names is erased below
  auto it = questions.find(id);
  if (it == questions.end() || it->second->resolved) return;
  auto q = it->second;
  q->resolved = true;
  Resolve(*q, nullptr);
  const auto minutes = std::chrono::duration_cast<std::chrono::minutes>(options.answer_timeout).count();
  const std::string text = "\u231B No answer within " +
                           (minutes > 0 ? std::to_string(minutes) + " min"
                                        : std::to_string(options.answer_timeout.count()) + " ms") +
                           ": the question was declined and the agent goes on without it.";
  MarkQuestionMessage(*q, text);
  Note(q->stored.thread, text, q->stored.session);
  if (auto st = store->RemoveQuestion(id); !st) Log(LogLevel::warning, st.error().ToString());
  if (auto turn = q->turn.lock()) {
    turn->open_question.clear();
    ShowProgress(turn);
  }
  questions.erase(id);
  PublishGauges();
}

void Router::Impl::ForgetQuestionsOf(const TurnRun& turn) {
  for (auto it = resolved_inputs.begin(); it != resolved_inputs.end();) {
    it = it->rfind(turn.request_id + '\x1f', 0) == 0 ? resolved_inputs.erase(it) : std::next(it);
  }
  for (auto it = questions.begin(); it != questions.end();) {
    auto q = it->second;
    if (q->stored.request_id != turn.request_id) {
      ++it;
      continue;
    }
    if (q->timeout) q->timeout->cancel();
    if (!q->resolved) {
      q->resolved = true;  // a post still on its way marks the message when it comes back
      MarkQuestionMessage(*q, "This question is closed: its turn ended.");
    }
    if (auto st = store->RemoveQuestion(q->stored.id); !st) Log(LogLevel::warning, st.error().ToString());
    it = questions.erase(it);
  }
  PublishGauges();
}

void Router::Impl::Action(InboundAction action) {
  if (auto choice = routing::ParseButtonData(action.data)) {
    auto it = questions.find(choice->question_id);
    if (it == questions.end() || it->second->resolved) {
      return Ack(action, "This question is no longer open (answered, timed out, or its turn ended).");
    }
    QuestionRun& q = *it->second;
    if (!MayAnswer(q, action.author_id)) return Ack(action, "Only the person whose message started this turn can answer.");
    const InputQuestion& current = q.stored.questions.at(q.stored.answered);
    if (choice->option == 0 || choice->option > current.options.size()) {
      return Ack(action, "That option is not one of this question's.");
    }
    Ack(action, {});
    Answer(q, {current.options[choice->option - 1].label}, action.author_id, action.author_name);
    return;
  }
  if (PickerAction(action)) return;
  Ack(action, "This button is no longer active.");
}

}  // namespace sessionturn
