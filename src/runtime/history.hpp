// Condensed history, as the real runtime projects it (its history.go): a page of display items
// (prompts with their latest text, finished assistant messages, tool start/completion pairs,
// answered questions, diffs and notices) without turn or request ids or timestamps, the questions
// still waiting (sent after every first page so a late joiner can answer them), the live state for
// history.end, and the opaque cursor that pages further back.
//
// The page is built by walking the retained journal backwards from the newest event and stops as
// soon as the page is full and the next older item is known: O(page + events walked), not O(journal).
// Per-turn facts that lie before the walk's position (a prompt's first event, whether the turn was
// removed or merged) come from the journal's TurnIndex; facts after it were already walked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/journal.hpp"
#include "sessionturn/protocol.hpp"

namespace sessionturn::runtime {

// The runtime's caps on a page (PROTOCOL.md §4) and on what one item may hold.
inline constexpr std::size_t kHistoryMaxItems = 100;
inline constexpr std::size_t kHistoryMaxBytes = 1u << 20;

struct CondensedPage {
  std::vector<std::shared_ptr<const std::string>> lines;  // encoded events ('\n' included), oldest first
  // When older items remain: the first event id of the oldest item on this page (the next cursor's
  // beforeEventId); 0 when this page reaches the oldest retained item.
  std::int64_t before = 0;
  std::size_t walked = 0;  // journal events the walk looked at (it stops once the page is known)
};

// Items whose first event id is below `before` (0: all), newest first until `max_items` or
// `max_bytes` (the encoded lines' size) is reached; the newest eligible item is always included.
CondensedPage BuildCondensedPage(const Journal& journal, std::int64_t before, std::size_t max_items,
                                 std::size_t max_bytes);

// The input.requested events still waiting for an answer, condensed (no turnId, no timestamp) but
// with their input id and every question, ascending ids.
std::vector<Event> PendingInputEvents(const Journal& journal);

// history.end's historyState: the running turn (id, when it started, interrupting), whether a
// question waits, the queued turn, the newest file diff.
HistoryState CurrentHistoryState(const Journal& journal);

// The answer to a `prompts` request (a page of the Session's prompts, newest last, each with its
// latest text and its first event's id and timestamp; removed and merged turns left out): the
// encoded `prompts` event with its '\n', or the rejection text. The limits and position come from
// `cursor` (empty: the first page, 20 prompts / 128 KiB).
struct PromptsAnswer {
  std::string line;
  std::string error;
};
PromptsAnswer BuildPrompts(const Journal& journal, const std::string& request_id, std::string_view cursor);

// The cursor: base64url (no padding) of {"journalId","beforeEventId","itemLimit","byteLimit"}.
struct HistoryCursor {
  std::string journal_id;
  std::int64_t before_event_id = 0;
  std::int64_t item_limit = 0;
  std::int64_t byte_limit = 0;
};
std::string EncodeHistoryCursor(const HistoryCursor& cursor);
// Empty when the text is not a cursor the runtime would accept (bad base64 or JSON, a field of the
// wrong type, an empty journal id, beforeEventId <= 0, limits outside 1..100 and 1..1 MiB).
std::optional<HistoryCursor> DecodeHistoryCursor(std::string_view text);

}  // namespace sessionturn::runtime
