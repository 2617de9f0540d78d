// JSON the API server decides (untrusted bytes): an error body's Status (kube::StatusText), the
// exec status channel's object (kube::ExecStatusToError), a refused WebSocket upgrade's body
// (ws_detail::RefusedUpgrade) and a Session object (Session::FromJson). None may throw, whatever the
// types of the fields; each answers with its documented error codes, and a body that is not a Status
// is quoted by its start. The first byte picks the HTTP status for the upgrade.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kube/exec_connection.hpp"
#include "kube/kube_rest.hpp"
#include "sessionturn/sessions.hpp"
#include "ws/websocket_internal.hpp"

namespace st = sessionturn;

namespace {

bool StartsWith(const std::string& s, std::string_view prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

bool IsStatusObject(const nlohmann::json& j) {
  if (!j.is_object()) return false;
  auto kind = j.find("kind");
  return kind != j.end() && kind->is_string() && kind->get<std::string>() == "Status";
}

void CheckStatusText(const std::string& body, const nlohmann::json& parsed) {
  const std::string text = st::kube::StatusText(body);
  if (IsStatusObject(parsed)) return;  // built from the Status's own strings
  std::string start = body.substr(0, 200);
  while (!start.empty() && (start.back() == '\n' || start.back() == ' ')) start.pop_back();
  if (text != start) std::abort();
}

void CheckExecStatus(const std::string& body, const nlohmann::json& parsed) {
  const st::Error e = st::kube::ExecStatusToError(body, "w", "tail");
  if (!parsed.is_object()) {
    if (e.code != st::Errc::protocol_error) std::abort();
    return;
  }
  if (e.code != st::Errc::connection_lost || !StartsWith(e.message, "w: the ")) std::abort();
}

void CheckRefusedUpgrade(int status, std::string_view body) {
  st::ws::HttpHead head;
  head.status = status;
  head.status_line = "HTTP/1.1 " + std::to_string(status) + " X";
  const st::Error e = st::ws::ws_detail::RefusedUpgrade("w", head, body);
  if (!StartsWith(e.message, "WebSocket upgrade to w refused: HTTP/1.1 ") || e.http_status != status) std::abort();
  st::Errc want = st::Errc::connection_failed;
  if (status == 401) want = st::Errc::unauthorized;
  else if (status == 403) want = st::Errc::forbidden;
  else if (status == 404) want = st::Errc::not_found;
  else if (status == 429 || status >= 500) want = st::Errc::unavailable;
  if (e.code != want) std::abort();
}

void CheckSession(const nlohmann::json& parsed) {
  if (parsed.is_discarded()) return;
  const auto session = st::Session::FromJson(parsed);
  if (!session) {
    if (session.error().code != st::Errc::protocol_error) std::abort();
    return;
  }
  if (session->raw != parsed) std::abort();
  (void)session->IsReady();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static constexpr int kStatuses[] = {400, 401, 403, 404, 409, 429, 500, 503};
  const int status = kStatuses[data[0] % (sizeof kStatuses / sizeof kStatuses[0])];
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const nlohmann::json parsed = nlohmann::json::parse(body, nullptr, false);
  CheckStatusText(body, parsed);
  CheckExecStatus(body, parsed);
  CheckRefusedUpgrade(status, body);
  CheckSession(parsed);
  return 0;
}
