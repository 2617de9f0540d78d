// Built against the installed package: proves the headers, the exported targets and the
// transitive dependencies work from an install tree.
#include <sessionturn/sessionturn.hpp>

#include <cstdio>

int main() {
  auto ev = sessionturn::DecodeEvent(R"({"id":3,"type":"assistant.delta","turnId":"turn-1","text":"hi"})");
  if (!ev || ev->id != 3 || ev->text != "hi") return 1;
  sessionturn::Context ctx;
  std::printf("consumer ok: sessionturn %s, %s\n", SESSIONTURN_VERSION_STRING, ev->type.c_str());
  return 0;
}
