// Questions shown in chat and chat replies read as answers (routing/answers.hpp).
#include "routing/answers.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>

#include "routing/envelope.hpp"
#include "sessionturn/render.hpp"

namespace sessionturn::routing {

namespace {

constexpr std::string_view kButtonPrefix = "q:";
// A question's header and option labels are short by nature (Claude's AskUserQuestion: a chip of a
// few words, a label of 1 to 5 words) and shown on one line each; these bounds only stop a runaway
// one from filling the message. The question itself is shown whole: it is what must be answered.
constexpr std::size_t kMaxHeaderChars = 200;
constexpr std::size_t kMaxLabelChars = 200;
constexpr std::size_t kMaxDescriptionChars = 500;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  return TrimUnicodeSpace(s);
}

// The option whose label is `text` (trimmed, ASCII case-insensitive).
const InputOption* FindLabel(const InputQuestion& q, std::string_view text) {
  const std::string wanted = Lower(Trim(text));
  for (const auto& option : q.options) {
    if (Lower(Trim(option.label)) == wanted) return &option;
  }
  return nullptr;
}

// "1", "1,3", "1 3", "1, 3": the numbers, or nullopt when `text` is not only numbers and separators.
// A number too long to read is kept as SIZE_MAX: out of range like any other.
std::optional<std::vector<std::size_t>> Numbers(std::string_view text) {
  std::vector<std::size_t> numbers;
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == ',' || c == ' ' || c == '\t') {
      ++i;
      continue;
    }
    if (c < '0' || c > '9') return std::nullopt;
    std::size_t end = i;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    std::size_t n = 0;
    if (std::from_chars(text.data() + i, text.data() + end, n).ec != std::errc()) n = SIZE_MAX;
    numbers.push_back(n);
    i = end;
  }
  if (numbers.empty()) return std::nullopt;
  return numbers;
}

// The text inside one pair of quotes that encloses all of `text`: ASCII "…" or typographic “…" (phones
// type those). Not `"a" or "b"`: quotes inside mean the outer ones are two pairs' ends.
std::optional<std::string_view> Unquoted(std::string_view text) {
  for (const auto& [open, close] : {std::pair<std::string_view, std::string_view>{"\"", "\""},
                                    std::pair<std::string_view, std::string_view>{"\xE2\x80\x9C", "\xE2\x80\x9D"}}) {
    if (text.size() < open.size() + close.size() || text.substr(0, open.size()) != open ||
        text.substr(text.size() - close.size()) != close) {
      continue;
    }
    const std::string_view inside = text.substr(open.size(), text.size() - open.size() - close.size());
    if (inside.find(open) != std::string_view::npos || inside.find(close) != std::string_view::npos) continue;
    return inside;
  }
  return std::nullopt;
}

std::string Range(std::size_t count) {
  return count == 1 ? std::string("1") : "1\xE2\x80\x93" + std::to_string(count);
}

Result<std::vector<std::string>> ByNumbers(const std::vector<std::size_t>& numbers, const InputQuestion& q) {
  const std::size_t count = q.options.size();
  if (numbers.size() > 1 && !q.multi_select) {
    return Fail(Errc::invalid_argument, "This question takes one answer: pick one of " + Range(count) +
                                            ", or put your own answer in double quotes.");
  }
  std::vector<std::string> labels;
  for (std::size_t n : numbers) {
    if (n < 1 || n > count) {
      const std::string why =
          n == SIZE_MAX ? std::string("There is no option that large") : "There is no option " + std::to_string(n);
      return Fail(Errc::invalid_argument, why + ": pick " + (q.multi_select ? "from " : "one of ") + Range(count) +
                                              ", or put your own answer in double quotes.");
    }
    const std::string& label = q.options[n - 1].label;
    if (std::find(labels.begin(), labels.end(), label) == labels.end()) labels.push_back(label);
  }
  return labels;
}

// "A, B" for a multi_select question: every comma-separated part an option's label.
std::optional<std::vector<std::string>> ByLabels(std::string_view text, const InputQuestion& q) {
  std::vector<std::string> labels;
  while (true) {
    const std::size_t comma = text.find(',');
    const InputOption* option = FindLabel(q, text.substr(0, comma));
    if (option == nullptr) return std::nullopt;
    if (std::find(labels.begin(), labels.end(), option->label) == labels.end()) labels.push_back(option->label);
    if (comma == std::string_view::npos) return labels;
    text.remove_prefix(comma + 1);
  }
}

std::string Hint(const InputQuestion& q, const ChatCapabilities& caps) {
  if (q.options.empty()) return "Reply with your answer.";
  if (q.multi_select) {
    return "Reply with one or more numbers (like `1, 3`), option names separated by commas, or your own answer.";
  }
  return std::string(caps.buttons ? "Tap a button or reply" : "Reply") +
         " with a number, an option's name or your own answer.";
}

std::string Ask(const InputQuestion& q, std::size_t index, std::size_t count, const ChatCapabilities& caps) {
  std::string title = count > 1 ? "Question " + std::to_string(index + 1) + " of " + std::to_string(count) : "";
  if (!q.header.empty()) title += (title.empty() ? "" : ": ") + EscapeMarkdown(FlattenLine(q.header, kMaxHeaderChars));
  if (title.empty()) title = "The agent asks";
  std::string out = "**" + title + "**\n\n";
  if (!q.question.empty()) out += EscapeMarkdown(CleanText(q.question)) + "\n\n";
  for (std::size_t i = 0; i < q.options.size(); ++i) {
    const InputOption& option = q.options[i];
    out += std::to_string(i + 1) + ". **" + EscapeMarkdown(FlattenLine(option.label, kMaxLabelChars)) + "**";
    if (const std::string description = FlattenLine(option.description, kMaxDescriptionChars); !description.empty()) {
      out += ": " + EscapeMarkdown(description);
    }
    out += "\n";
  }
  if (!q.options.empty()) out += "\n";
  out += Hint(q, caps);
  if (q.secret) out += "\n\nThis answer is secret: the bot will not repeat it (your reply stays visible in this chat).";
  return out;
}

}  // namespace

Result<std::vector<std::string>> ParseAnswer(std::string_view text, const InputQuestion& q) {
  const std::string_view answer = Trim(text);
  if (answer.empty()) return Fail(Errc::invalid_argument, "The answer is empty: reply with some text.");
  if (auto quoted = Unquoted(answer)) {
    if (Trim(*quoted).empty()) return Fail(Errc::invalid_argument, "The answer is empty: reply with some text.");
    return std::vector<std::string>{std::string(*quoted)};
  }
  if (!q.options.empty()) {
    if (const InputOption* option = FindLabel(q, answer)) return std::vector<std::string>{option->label};
    if (auto numbers = Numbers(answer)) {
      auto labels = ByNumbers(*numbers, q);
      // A secret reply of numbers that are no option's is a PIN or a code: the person's own answer.
      if (labels || !q.secret) return labels;
      return std::vector<std::string>{std::string(answer)};
    }
    if (q.multi_select) {
      if (auto labels = ByLabels(answer, q)) return *labels;
    }
  }
  return std::vector<std::string>{std::string(answer)};
}

bool NamesOption(std::string_view text, const InputQuestion& q) {
  return FindLabel(q, text) != nullptr;
}

std::string FormatQuestion(const Event& input_requested, const ChatCapabilities& caps) {
  const auto& questions = input_requested.questions;
  std::string out;
  if (questions.size() > 1) {
    out +=
        "The agent has " + std::to_string(questions.size()) + " questions: answer them one reply each, in order.\n\n";
  }
  for (std::size_t i = 0; i < questions.size(); ++i) {
    if (i > 0) out += "\n\n";
    out += Ask(questions[i], i, questions.size(), caps);
  }
  return out;
}

std::vector<std::vector<Button>> QuestionButtons(std::string_view question_id, const InputQuestion& q,
                                                 const ChatCapabilities& caps) {
  std::vector<std::vector<Button>> rows;
  if (!caps.buttons || q.options.empty() || q.multi_select) return rows;
  const std::string base = std::string(kButtonPrefix) + std::string(question_id) + ":";
  if (base.size() + std::to_string(q.options.size()).size() > caps.button_data_limit) return rows;
  for (std::size_t i = 0; i < q.options.size(); ++i) {
    std::string label = FlattenLine(q.options[i].label, kMaxButtonLabelChars);
    if (label.empty()) label = std::to_string(i + 1);
    rows.push_back({Button{std::move(label), base + std::to_string(i + 1)}});
  }
  return rows;
}

std::optional<ButtonChoice> ParseButtonData(std::string_view data) {
  if (data.substr(0, kButtonPrefix.size()) != kButtonPrefix) return std::nullopt;
  data.remove_prefix(kButtonPrefix.size());
  const std::size_t colon = data.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  const std::string_view number = data.substr(colon + 1);
  std::size_t option = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), option);
  if (number.empty() || ec != std::errc() || end != number.data() + number.size() || option == 0) return std::nullopt;
  return ButtonChoice{std::string(data.substr(0, colon)), option};
}

}  // namespace sessionturn::routing
