// A chat reply read as the answer to an agent's question (routing::ParseAnswer), on hostile input.
// The first byte sets the question (bit 0: secret, bit 1: multi-select, bits 2-4: how many options),
// then the option labels and the reply follow, split at 0x1E. Whatever they hold: an answer is one or
// more distinct strings, each an option's label or (alone) the reply's own text; several only for a
// multi-select question; a refusal is Errc::invalid_argument, and a secret question refuses nothing
// but an empty reply (so its reply is never shown back in an error).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "routing/answers.hpp"
#include "sessionturn/protocol.hpp"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sessionturn;
  if (size == 0) return 0;
  const std::uint8_t flags = data[0];
  std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  InputQuestion q;
  q.id = "q";
  q.secret = (flags & 1) != 0;
  q.multi_select = (flags & 2) != 0;
  const std::size_t options = (flags >> 2) & 7;
  for (std::size_t i = 0; i < options; ++i) {
    const auto at = in.find('\x1E');
    q.options.push_back(InputOption{std::string(in.substr(0, at)), ""});
    in = at == std::string_view::npos ? std::string_view() : in.substr(at + 1);
  }
  const std::string reply(in);
  auto answer = routing::ParseAnswer(reply, q);
  if (!answer) {
    Check(answer.error().code == Errc::invalid_argument);
    Check(!answer.error().message.empty());
    if (q.secret) Check(answer.error().message.find("empty") != std::string::npos);
    return 0;
  }
  Check(!answer->empty());
  Check(answer->size() == 1 || q.multi_select);
  const auto is_label = [&q](const std::string& s) {
    return std::any_of(q.options.begin(), q.options.end(), [&s](const InputOption& o) { return o.label == s; });
  };
  for (std::size_t i = 0; i < answer->size(); ++i) {
    const std::string& a = (*answer)[i];
    Check(std::count(answer->begin(), answer->end(), a) == 1);
    Check(is_label(a) || (answer->size() == 1 && !a.empty() && reply.find(a) != std::string::npos));
  }
  return 0;
}
