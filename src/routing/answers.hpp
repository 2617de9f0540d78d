// Questions in chat (DESIGN.md §6): an agent's question (input.requested) shown as a message with
// numbered options and, where the platform has them, buttons; a chat reply or a button press turned
// back into the answer the runtime takes. docs/routing-rules.md has the answer syntax.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sessionturn/error.hpp"
#include "sessionturn/protocol.hpp"
#include "sessionturn/routing.hpp"

namespace sessionturn::routing {

// A button shows this much of an option's label (Slack cuts button text at 75 characters; Telegram
// shows about this much on a phone).
inline constexpr std::size_t kMaxButtonLabelChars = 64;

// The answer to `q` in a chat reply `text` (trimmed):
// - an option's label (case-insensitive) is that option; with multi_select, labels separated by
//   commas are those options. A label is looked for before a number, so an option labelled "4"
//   is chosen by "4" whatever its position;
// - a number N is option N's label; several ("1,3", "1 3", "1, 3") need multi_select (else
//   Errc::invalid_argument "pick one of 1–N"); a number with no option is an error naming the range,
//   except for a secret question, whose reply of numbers that name no option (a PIN, a code) is its
//   own answer, as written;
// - a reply wholly in double quotes ("5", “5”) is free text, the quotes taken off: how to answer
//   with a number or a label as such;
// - anything else is free text, answered as written: the runtime takes any strings (its
//   resolveInput checks only that each question has one), and the agent's own UI offers "Other".
// Errc::invalid_argument for an empty reply.
Result<std::vector<std::string>> ParseAnswer(std::string_view text, const InputQuestion& q);
// Whether `text` is an option's label (trimmed, ASCII case-insensitive), as ParseAnswer reads it.
bool NamesOption(std::string_view text, const InputQuestion& q);

// The message that asks an input.requested event's questions, in Markdown: each question's header
// and text, its options numbered with their descriptions, how to reply (a number, several for
// multi_select, a label or one's own words; buttons where caps.buttons), and for a secret question
// that the answer will not be echoed. Several questions are numbered "Question i of N" and answered
// one reply each, in order. Everything the agent wrote is escaped (EscapeMarkdown): it shows as
// written.
std::string FormatQuestion(const Event& input_requested, const ChatCapabilities& caps);

// One button per option, one per row, with data "q:<question_id>:<n>" (n counts from 1).
// `question_id` is the router's short opaque id for the open question, not the runtime's. None when
// !caps.buttons, when `q` has no options, when it is multi_select (a button picks one), or when the
// data would not fit caps.button_data_limit.
std::vector<std::vector<Button>> QuestionButtons(std::string_view question_id, const InputQuestion& q,
                                                 const ChatCapabilities& caps);

// A button press read back: data made by QuestionButtons.
struct ButtonChoice {
  std::string question_id;
  std::size_t option = 0;  // counts from 1
};
std::optional<ButtonChoice> ParseButtonData(std::string_view data);

}  // namespace sessionturn::routing
