// JSON from a peer whose fields have unexpected types: the shared reader (json_fields.hpp) and the
// readers of Kubernetes Status bodies, exec status objects, refused WebSocket upgrades and Session
// objects read such a field as absent and never throw (nlohmann's value(key, fallback) would).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "json_fields.hpp"
#include "kube/exec_connection.hpp"
#include "kube/kube_rest.hpp"
#include "sessionturn/sessions.hpp"
#include "ws/websocket_internal.hpp"

using namespace sessionturn;
using nlohmann::json;

TEST_CASE("json_fields: a field of another type, a missing one and a non-object read as absent", "[json]") {
  const json j = json::parse(R"({"s":"text","n":5,"big":18446744073709551615,"neg":-3,"f":1.5,"b":true,
                                 "o":{"k":"v"},"a":[1],"z":null,"digits":"410"})");
  CHECK(json_fields::String(j, "s") == "text");
  CHECK(json_fields::String(j, "n").empty());
  CHECK(json_fields::String(j, "missing").empty());
  CHECK(json_fields::String(json("a string"), "s").empty());
  CHECK(json_fields::String(json::array({1}), "s").empty());
  CHECK(json_fields::Int(j, "n") == 5);
  CHECK(json_fields::Int(j, "neg") == -3);
  CHECK_FALSE(json_fields::Int(j, "big"));  // past INT64_MAX: not read as a wrapped negative
  CHECK_FALSE(json_fields::Int(j, "f"));
  CHECK_FALSE(json_fields::Int(j, "digits"));
  CHECK_FALSE(json_fields::Int(j, "z"));
  CHECK(json_fields::Bool(j, "b") == true);
  CHECK_FALSE(json_fields::Bool(j, "n"));
  REQUIRE(json_fields::Object(j, "o") != nullptr);
  CHECK(json_fields::String(*json_fields::Object(j, "o"), "k") == "v");
  CHECK(json_fields::Object(j, "a") == nullptr);
  CHECK(json_fields::Array(j, "a") != nullptr);
  CHECK(json_fields::Array(j, "o") == nullptr);
  const nlohmann::ordered_json o = nlohmann::ordered_json::parse(R"({"s":"x","n":"y"})");
  CHECK(json_fields::String(o, "s") == "x");
  CHECK_FALSE(json_fields::Int(o, "n"));
}

TEST_CASE("kube: an API error body's Status fields of other types are left out of the message", "[json][kube]") {
  CHECK(kube::StatusText(R"({"kind":"Status","reason":"NotFound","message":"sessions \"x\" not found"})") ==
        "NotFound: sessions \"x\" not found");
  CHECK(kube::StatusText(R"({"kind":"Status","reason":7,"message":"only this"})") == "only this");
  CHECK(kube::StatusText(R"({"kind":"Status","reason":"Only","message":{"a":1}})") == "Only");
  // Not a Status (kind of another type): the body's start, as for any other body.
  CHECK(kube::StatusText(R"({"kind":5,"message":"m"})") == R"({"kind":5,"message":"m"})");
  CHECK(kube::StatusText("[1,2]") == "[1,2]");
  CHECK(kube::StatusText(std::string(500, 'x')).size() == 200);
}

TEST_CASE("kube: an exec status object with fields of other types still ends the stream clearly", "[json][kube]") {
  const auto e = kube::ExecStatusToError(
      R"({"status":5,"message":["m"],"reason":{},"details":{"causes":[7,{"reason":1,"message":2},
          {"reason":"ExitCode","message":9},{"reason":"ExitCode","message":"4"}]}})",
      "kube-exec:n/p", "");
  CHECK(e.code == Errc::connection_lost);
  CHECK(e.message == "kube-exec:n/p: the remote command failed with exit code 4");
  const auto bad_details = kube::ExecStatusToError(R"({"status":"Failure","details":"x","reason":"Boom"})", "w", "");
  CHECK(bad_details.code == Errc::connection_lost);
  CHECK(bad_details.message == "w: the remote command failed (Boom)");
  const auto causes_not_array =
      kube::ExecStatusToError(R"({"status":"Failure","details":{"causes":{"reason":"ExitCode"}}})", "w", "");
  CHECK(causes_not_array.message == "w: the remote command failed");
  CHECK(kube::ExecStatusToError("[]", "w", "").code == Errc::protocol_error);
}

TEST_CASE("websocket: a refused upgrade's Status body with fields of other types", "[json][websocket]") {
  ws::HttpHead head;
  head.status = 403;
  head.status_line = "HTTP/1.1 403 Forbidden";
  const auto named = ws::ws_detail::RefusedUpgrade("x", head, R"({"kind":"Status","message":"no exec"})");
  CHECK(named.code == Errc::forbidden);
  CHECK(named.message == "WebSocket upgrade to x refused: HTTP/1.1 403 Forbidden: no exec");
  const auto odd = ws::ws_detail::RefusedUpgrade("x", head, R"({"kind":"Status","message":42})");
  CHECK(odd.code == Errc::forbidden);
  CHECK(odd.message == "WebSocket upgrade to x refused: HTTP/1.1 403 Forbidden");
  // kind of another type: not a Status, so the body is quoted as text.
  const auto other = ws::ws_detail::RefusedUpgrade("x", head, R"({"kind":["Status"]})");
  CHECK(other.message == R"(WebSocket upgrade to x refused: HTTP/1.1 403 Forbidden: {"kind":["Status"]})");
}

TEST_CASE("sessions: a Session object with fields of other types reads them as absent", "[json][sessions]") {
  const auto odd = Session::FromJson(json::parse(R"({
      "metadata":{"name":"s1","uid":5,"labels":"x","annotations":{"a":"1","b":2,"kelos.dev/session-idle-resume-request":[]}},
      "spec":{"suspend":"yes"},
      "status":{"phase":"Pending","podName":7,"conditions":[1,"x",{"type":5},
                {"type":"Ready","status":false,"reason":"Waking"},{"type":"Ready","status":"False","reason":{}}]}})"));
  REQUIRE(odd);
  CHECK(odd->name == "s1");
  CHECK(odd->uid.empty());
  CHECK(odd->labels.empty());
  CHECK(odd->annotations == std::map<std::string, std::string>{{"a", "1"}});
  CHECK_FALSE(odd->suspend);
  CHECK(odd->phase == "Pending");
  CHECK(odd->pod_name.empty());
  CHECK(odd->ready_reason.empty());  // the last Ready condition's reason is not a string
  const auto status_not_object = Session::FromJson(json::parse(R"({"metadata":{"name":"s2"},"spec":[],
                                                                    "status":"Ready"})"));
  REQUIRE(status_not_object);
  CHECK(status_not_object->phase.empty());
  const auto conditions_not_array =
      Session::FromJson(json::parse(R"({"metadata":{"name":"s3"},"status":{"conditions":{"type":"Ready"}}})"));
  REQUIRE(conditions_not_array);
  CHECK(conditions_not_array->ready_reason.empty());
  const auto no_metadata = Session::FromJson(json::parse(R"({"metadata":"s4"})"));
  REQUIRE_FALSE(no_metadata);
  CHECK(no_metadata.error().code == Errc::protocol_error);
}
