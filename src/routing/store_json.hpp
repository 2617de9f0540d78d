// The store's JSON columns: an InboundMessage (inbox and turns), a list of InputQuestion (open
// questions) and a list of strings (an outbox entry's parts). Named functions rather than nlohmann's
// to_json/from_json hooks: decoding returns a Result instead of throwing, and the types are not ours
// to give one global JSON form.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sessionturn/error.hpp"
#include "sessionturn/protocol.hpp"
#include "sessionturn/routing.hpp"

namespace sessionturn::routing {

// Every field, as one line of JSON text; `received` as Unix milliseconds, `kind` as "new", "edited"
// or "deleted". Bytes that are not valid UTF-8 (an adapter's bug) become U+FFFD, one per byte: a
// message is never refused for them.
// Fields at their defaults (empty, false, no attachments, kind "new") are left out.
//
// `row`: what the message's work row holds in columns of its own. A field the same as its column is
// left out too (v11): a stored message is about a third of its full size, which makes a burst's
// rows, and reading one back when its turn begins, that much cheaper (issue 11's bench).
struct RowFields {
  std::string_view platform, workspace, chat, thread, author_id;
};
std::string InboundMessageToJsonText(const InboundMessage& message, const RowFields* row = nullptr);
// Absent and null fields keep their defaults (a row written before a field existed), or with `row`
// take its columns' values; text that is not JSON, and a field of the wrong type, fail with
// Errc::invalid_argument naming it.
Result<InboundMessage> InboundMessageFromJsonText(std::string_view text, const RowFields* row = nullptr);

// The shape of `input.requested`'s questions (PROTOCOL.md §4: id, header, question, options with
// label and description, multiSelect, secret).
Json QuestionsToJson(const std::vector<InputQuestion>& questions);
Result<std::vector<InputQuestion>> QuestionsFromJson(const Json& j);

Json StringsToJson(const std::vector<std::string>& strings);
Result<std::vector<std::string>> StringsFromJson(const Json& j);

// One line of JSON. Text that is not valid UTF-8 (an adapter's bug) has its bad bytes replaced by
// U+FFFD rather than failing: a message is never refused for it.
std::string DumpJson(const Json& j);
// Errc::invalid_argument when `text` is not JSON.
Result<Json> ParseJson(std::string_view text);

}  // namespace sessionturn::routing
