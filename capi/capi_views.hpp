// Internals of the C ABI: the borrowed C views of C++ events handed to callbacks (st_event,
// st_question_request). A view owns the few strings it must build (the raw JSON) and points into the
// event for the rest, so it lives exactly as long as the callback. Not installed.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "sessionturn.h"
#include "sessionturn/protocol.hpp"

namespace sessionturn::capi {

// An event's questions as C structs (pointing into the event).
struct QuestionsView {
  std::vector<std::vector<st_question_option>> options;
  std::vector<st_question> questions;

  explicit QuestionsView(const st::Event& e) {
    options.reserve(e.questions.size());
    for (const auto& q : e.questions) {
      auto& opts = options.emplace_back();
      for (const auto& o : q.options) opts.push_back(st_question_option{o.label.c_str(), o.description.c_str()});
    }
    questions.reserve(e.questions.size());
    for (std::size_t i = 0; i < e.questions.size(); ++i) {
      const auto& q = e.questions[i];
      st_question cq{};
      cq.id = q.id.c_str();
      cq.header = q.header.c_str();
      cq.question = q.question.c_str();
      cq.options = options[i].empty() ? nullptr : options[i].data();
      cq.option_count = options[i].size();
      cq.multi_select = q.multi_select ? 1 : 0;
      cq.secret = q.secret ? 1 : 0;
      questions.push_back(cq);
    }
  }
  const st_question* data() const { return questions.empty() ? nullptr : questions.data(); }
  std::size_t size() const { return questions.size(); }
};

struct EventView {
  std::string raw;
  QuestionsView questions;
  st_runtime_status runtime{};
  st_event view{};

  explicit EventView(const st::Event& e) : raw(e.line.empty() ? st::EncodeEvent(e) : e.line), questions(e) {
    view.version = ST_EVENT_VERSION;
    view.id = e.id;
    view.type = e.type.c_str();
    view.turn_id = e.turn_id.c_str();
    view.request_id = e.request_id.c_str();
    view.text = e.text.c_str();
    view.status = e.status.c_str();
    view.tool_id = e.tool_id.c_str();
    view.tool_name = e.tool_name.c_str();
    view.output = e.output.c_str();
    view.input_id = e.input_id.c_str();
    view.raw_json = raw.c_str();
    // version 2
    view.revision = e.revision;
    view.journal_id = e.journal_id.c_str();
    view.first_event_id = e.first_event_id;
    view.last_event_id = e.last_event_id;
    view.session_command = e.session_command ? 1 : 0;
    view.questions = questions.data();
    view.question_count = questions.size();
    view.timestamp = e.timestamp.c_str();
    if (e.runtime) {
      const st::RuntimeStatus& r = *e.runtime;
      runtime.session_name = r.session_name.c_str();
      runtime.agent_type = r.agent_type.c_str();
      runtime.model = r.model.c_str();
      runtime.working_dir = r.working_dir.c_str();
      runtime.branch = r.branch.c_str();
      runtime.input_tokens = r.usage ? r.usage->input_tokens : -1;
      runtime.output_tokens = r.usage ? r.usage->output_tokens : -1;
      runtime.total_tokens = r.usage ? r.usage->total_tokens : -1;
      runtime.context_tokens = r.usage ? r.usage->context_tokens : -1;
      runtime.context_window = r.usage ? r.usage->context_window : -1;
      view.runtime = &runtime;
    }
  }
  EventView(const EventView&) = delete;
  EventView& operator=(const EventView&) = delete;
};

struct QuestionView {
  std::string raw;
  QuestionsView questions;
  st_question_request view{};

  explicit QuestionView(const st::Event& e) : raw(e.line.empty() ? st::EncodeEvent(e) : e.line), questions(e) {
    view.version = ST_QUESTION_REQUEST_VERSION;
    view.input_id = e.input_id.c_str();
    view.turn_id = e.turn_id.c_str();
    view.questions = questions.data();
    view.question_count = questions.size();
    view.raw_json = raw.c_str();
  }
  QuestionView(const QuestionView&) = delete;
  QuestionView& operator=(const QuestionView&) = delete;
};

}  // namespace sessionturn::capi
