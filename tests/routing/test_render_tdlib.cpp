// telegram_html checked by an independent implementation: TDLib's own HTML parser (the one behind
// the Bot API's "Bad Request: can't parse entities"), through tests/routing/tools. Skipped unless
// its node_modules are installed: npm install --prefix tests/routing/tools
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "routing/render_check.hpp"
#include "routing/render_gen.hpp"
#include "sessionturn/render.hpp"

using namespace sessionturn;
using testing_render::CheckTelegramHtml;
using testing_render::Generator;

namespace {

const std::filesystem::path kTools = std::filesystem::path(SESSIONTURN_SOURCE_DIR) / "tests/routing/tools";

// The tdweb build there predates block quotes; they are the one tag left to our own checker.
std::string WithoutBlockquotes(std::string s) {
  for (const std::string tag : {"<blockquote>", "</blockquote>"})
    for (std::size_t at; (at = s.find(tag)) != std::string::npos;) s.erase(at, tag.size());
  return s;
}

// TDLib's verdict on each text: its plain text, or its error.
std::vector<nlohmann::json> ParseWithTdlib(const std::vector<std::string>& texts) {
  const auto dir = std::filesystem::temp_directory_path() / ("st_render_tdlib_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream in(dir / "in.jsonl");
    for (const std::string& t : texts) in << nlohmann::json(t).dump() << "\n";
  }
  const std::string command = "node '" + (kTools / "tdlib_parse_html.js").string() + "' < '" +
                              (dir / "in.jsonl").string() + "' > '" + (dir / "out.jsonl").string() + "'";
  REQUIRE(std::system(command.c_str()) == 0);
  std::vector<nlohmann::json> out;
  std::ifstream results(dir / "out.jsonl");
  for (std::string line; std::getline(results, line);) out.push_back(nlohmann::json::parse(line));
  std::filesystem::remove_all(dir);
  return out;
}

}  // namespace

TEST_CASE("TDLib's HTML parser takes every telegram_html part, reading the same text", "[render][tdlib]") {
  if (!std::filesystem::exists(kTools / "node_modules" / "tdweb") ||
      std::system("node --version > /dev/null 2>&1") != 0) {
    std::cout << "SESSIONTURN_TEST_SKIPPED: node or tests/routing/tools/node_modules missing "
                 "(npm install --prefix tests/routing/tools)\n";
    return;
  }
  std::vector<std::string> parts;
  const auto render = [&](const std::string& md, std::size_t max, LengthUnit unit) {
    RenderOptions o;
    o.dialect = MarkupDialect::telegram_html;
    o.max_length = max;
    o.unit = unit;
    auto result = RenderReply(md, o);
    REQUIRE(result);
    for (const auto& p : *result) parts.push_back(p.text);
  };
  for (const char* md : {"# H *e*\n\n**b _i_** ~~s~~ `c <&>` [l & | x](https://e.test/?a=1&b=2)",
                         "> q **b**\n> ```py\n> x < 1\n> ```", "| a | b |\n|--|--:|\n| 1 & 2 | <x> |",
                         "- [ ] t\n- [x] d\n  1. n", "<script>x</script> &amp; \\&amp; <!channel>",
                         "**a `c` b** [`x`](https://e.test) ![alt](https://e.test/i.png)", "a\nb\\\nc\n\n---"})
    render(md, 4096, LengthUnit::utf16);
  Generator gen(99);
  for (int round = 0; round < 150; ++round)
    render(gen.Document(), kMinPartLength + static_cast<std::size_t>(gen.R(3) ? gen.R(3000) : gen.R(60)),
           gen.R(2) ? LengthUnit::utf16 : LengthUnit::bytes);

  std::vector<std::string> inputs;
  for (const std::string& p : parts) inputs.push_back(WithoutBlockquotes(p));
  const auto verdicts = ParseWithTdlib(inputs);
  REQUIRE(verdicts.size() == inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    INFO(inputs[i]);
    INFO(verdicts[i].dump());
    REQUIRE_FALSE(verdicts[i].contains("error"));
    std::string visible;
    REQUIRE(CheckTelegramHtml(inputs[i], &visible) == "");
    CHECK(verdicts[i]["text"].get<std::string>() == visible);
  }
}
