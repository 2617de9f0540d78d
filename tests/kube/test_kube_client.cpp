// KubeClient against the fake API server over verified TLS: verbs, error mapping, retries, watch.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include "kube/kube_util.hpp"
#include "kube_support.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/kube.hpp"
#include "sessionturn/version.hpp"

using namespace sessionturn;
using nlohmann::json;
using sessionturn::testing_kube::FakeKube;
using sessionturn::testing_kube::Shell;
using sessionturn::testing_kube::TempDir;

namespace {

const std::string kSessions = "/apis/kelos.dev/v1alpha2/namespaces/default/sessions";

json SessionObject(const std::string& name, json spec = json::object()) {
  return {{"apiVersion", "kelos.dev/v1alpha2"}, {"kind", "Session"}, {"metadata", {{"name", name}}}, {"spec", spec}};
}

KubeClientOptions FastRetries() {
  KubeClientOptions o;
  o.initial_backoff = std::chrono::milliseconds(20);
  return o;
}

}  // namespace

TEST_CASE("kube client: verified TLS, user agent, CRUD and patches", "[kube][client]") {
  FakeKube fake;
  KubeClient client(fake.Config());
  auto v = client.Get("/version");
  REQUIRE(v);
  CHECK((*v)["gitVersion"] == "v1.32.0-fake");

  auto created = client.Post(kSessions, SessionObject("alpha", {{"initialPrompt", "hi"}}));
  REQUIRE(created);
  CHECK((*created)["metadata"]["namespace"] == "default");
  std::string rv = (*created)["metadata"]["resourceVersion"];

  auto merged = client.Patch(kSessions + "/alpha", json{{"metadata", {{"labels", {{"team", "a"}}}}}}, PatchType::merge);
  REQUIRE(merged);
  CHECK((*merged)["metadata"]["labels"]["team"] == "a");

  auto jp = client.Patch(kSessions + "/alpha",
                         json::array({{{"op", "add"}, {"path", "/metadata/annotations"}, {"value", {{"k", "v"}}}}}),
                         PatchType::json);
  REQUIRE(jp);
  CHECK((*jp)["metadata"]["annotations"]["k"] == "v");

  // A merge patch guarded by a stale resourceVersion is a conflict.
  auto stale = client.Patch(kSessions + "/alpha", json{{"metadata", {{"resourceVersion", rv}, {"labels", {{"x", "y"}}}}}},
                            PatchType::merge);
  REQUIRE_FALSE(stale);
  CHECK(stale.error().code == Errc::conflict);
  CHECK(stale.error().http_status == 409);
  CHECK_THAT(stale.error().message, Catch::Contains("Conflict") && Catch::Contains("has been modified"));

  auto dup = client.Post(kSessions, SessionObject("alpha"));
  REQUIRE_FALSE(dup);
  CHECK(dup.error().code == Errc::conflict);
  CHECK_THAT(dup.error().message, Catch::Contains("AlreadyExists"));

  auto del = client.Delete(kSessions + "/alpha");
  REQUIRE(del);
  auto gone = client.Get(kSessions + "/alpha");
  REQUIRE_FALSE(gone);
  CHECK(gone.error().code == Errc::not_found);
  CHECK(gone.error().http_status == 404);
  CHECK_THAT(gone.error().message, Catch::Contains("NotFound") && Catch::Contains("\"alpha\" not found"));

  auto log = fake.RequestLog();
  REQUIRE(log.size() >= 5);
  for (const auto& entry : log) {
    CHECK(entry["user_agent"] == std::string("sessionturn/") + SESSIONTURN_VERSION_STRING);
    CHECK(entry["auth"] == "bearer");
  }
  // One thread's sequential calls reuse one pooled connection (keep-alive), errors included.
  for (const auto& entry : log) CHECK(entry["peer"] == log[0]["peer"]);
  CHECK(log[2]["content_type"] == "application/merge-patch+json");
  CHECK(log[3]["content_type"] == "application/json-patch+json");
}

TEST_CASE("kube client: 401 and 403 are mapped and a bad CA fails with a clear error", "[kube][client]") {
  FakeKube fake;
  {
    KubeClient bad(fake.Config("wrong-token"));
    auto r = bad.Get(kSessions);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::unauthorized);
    CHECK(r.error().http_status == 401);
    CHECK_THAT(r.error().message, Catch::Contains("Unauthorized"));
    CHECK_THAT(r.error().message, !Catch::Contains("wrong-token"));  // tokens never reach messages
  }
  fake.Control("config", {{"forbidden_tokens", {"no-rights"}}});
  {
    KubeClient forbidden(fake.Config("no-rights"));
    auto r = forbidden.Get(kSessions);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::forbidden);
    CHECK(r.error().http_status == 403);
    CHECK_THAT(r.error().message, Catch::Contains("forbidden"));
  }
  {
    TempDir dir;
    auto [rc, out] = Shell("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj "
                           "/CN=other-ca -keyout " + dir.path() + "/k.pem -out " + dir.path() + "/c.pem");
    REQUIRE(rc == 0);
    KubeTls tls;
    tls.ca_pem = testing_kube::Slurp(dir.path() + "/c.pem");
    KubeClient wrong_ca(KubeConfig::FromParts(fake.Server(), tls, FakeKube::kToken));
    auto r = wrong_ca.Get("/version");
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::connection_failed);
    CHECK_THAT(r.error().message, Catch::Contains("TLS certificate was not accepted"));
  }
  {
    KubeTls tls;  // the system trust store does not know the fake's CA
    KubeClient system_ca(KubeConfig::FromParts(fake.Server(), tls, FakeKube::kToken));
    auto r = system_ca.Get("/version");
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::connection_failed);
  }
  {
    KubeTls tls;
    tls.insecure_skip_verify = true;
    KubeClient insecure(KubeConfig::FromParts(fake.Server(), tls, FakeKube::kToken));
    CHECK(insecure.Get("/version"));
  }
}

TEST_CASE("kube client: client certificate auth and tls-server-name", "[kube][client]") {
  FakeKube fake;
  KubeTls tls;
  tls.ca_pem = fake.CaPem();
  tls.client_cert_pem = testing_kube::Slurp(fake.ClientCertPath());
  tls.client_key_pem = testing_kube::Slurp(fake.ClientKeyPath());
  KubeClient client(KubeConfig::FromParts(fake.Server(), tls));
  auto r = client.Get(kSessions);
  REQUIRE(r);
  CHECK(fake.RequestLog().back()["auth"] == "certificate");

  // The certificate names kube.test: connecting to 127.0.0.1 while verifying kube.test works.
  KubeTls sni;
  sni.ca_pem = fake.CaPem();
  sni.server_name = "kube.test";
  KubeClient by_name(KubeConfig::FromParts(fake.Server(), sni, FakeKube::kToken));
  CHECK(by_name.Get("/version"));
  sni.server_name = "not-in-cert.test";
  KubeClient wrong_name(KubeConfig::FromParts(fake.Server(), sni, FakeKube::kToken));
  auto w = wrong_name.Get("/version");
  REQUIRE_FALSE(w);
  CHECK(w.error().code == Errc::connection_failed);
}

TEST_CASE("kube client: kubeconfig with an exec plugin re-runs it after a 401", "[kube][client][exec]") {
  FakeKube fake;
  TempDir dir;
  // First run prints a token the server rejects, later runs the right one.
  std::string plugin = dir.File(
      "plugin.sh",
      "#!/bin/sh\nd=$(dirname \"$0\")\nn=$(cat \"$d/runs\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$d/runs\"\n"
      "if [ $n -eq 1 ]; then t=stale; else t=" + std::string(FakeKube::kToken) + "; fi\n"
      "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%s\"}}' $t\n");
  ::chmod(plugin.c_str(), 0755);
  std::string kc = dir.File("config", "apiVersion: v1\nclusters:\n- name: f\n  cluster:\n    server: " + fake.Server() +
                                          "\n    certificate-authority: " + fake.CaPath() +
                                          "\nusers:\n- name: u\n  user:\n    exec:\n      apiVersion: "
                                          "client.authentication.k8s.io/v1\n      command: ./plugin.sh\n"
                                          "      interactiveMode: Never\ncontexts:\n- name: f\n  context: {cluster: f, "
                                          "user: u}\ncurrent-context: f\n");
  KubeConfigOptions o;
  o.kubeconfig = kc;
  auto cfg = KubeConfig::Load(o);
  REQUIRE(cfg);
  KubeClient client(*cfg);
  auto r = client.Get(kSessions);
  REQUIRE(r);
  CHECK(testing_kube::Slurp(dir.path() + "/runs") == "2\n");
  auto log = fake.RequestLog();
  REQUIRE(log.size() == 2);
  CHECK(log[0]["status"] == 401);
  CHECK(log[1]["status"] == 200);
}

TEST_CASE("kube client: retries 429 and 5xx honouring Retry-After", "[kube][client][retry]") {
  FakeKube fake;
  SECTION("429 with Retry-After: 1") {
    fake.Control("faults", {{"status", 429}, {"count", 2}, {"retry_after", 1}, {"path_contains", "sessions"}});
    KubeClient client(fake.Config(), FastRetries());
    auto start = std::chrono::steady_clock::now();
    auto r = client.Get(kSessions);
    auto took = std::chrono::steady_clock::now() - start;
    REQUIRE(r);
    CHECK(took >= std::chrono::milliseconds(1900));  // two waits of the server's 1 s, not 20/40 ms
    auto log = fake.RequestLog();
    REQUIRE(log.size() == 3);
    CHECK(log[0]["status"] == 429);
    CHECK(log[1]["status"] == 429);
    CHECK(log[2]["status"] == 200);
  }
  SECTION("500 without Retry-After uses the exponential backoff") {
    fake.Control("faults", {{"status", 500}, {"count", 2}});
    KubeClient client(fake.Config(), FastRetries());
    auto r = client.Get(kSessions);
    REQUIRE(r);
    CHECK(fake.RequestLog().size() == 3);
  }
  SECTION("a create is not retried after a 5xx: the server may have made it") {
    fake.Control("faults", {{"status", 500}, {"count", 2}, {"method", "POST"}});
    KubeClient client(fake.Config(), FastRetries());
    auto r = client.Post(kSessions, SessionObject("maybe-made"));
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::unavailable);
    CHECK(r.error().http_status == 500);
    CHECK_THAT(r.error().message, !Catch::Contains("attempts"));
    CHECK(fake.RequestLog().size() == 1);
  }
  SECTION("nor after a 429") {
    fake.Control("faults", {{"status", 429}, {"count", 1}, {"retry_after", 0}, {"method", "POST"}});
    KubeClient client(fake.Config(), FastRetries());
    auto r = client.Post(kSessions, SessionObject("throttled"));
    REQUIRE_FALSE(r);
    CHECK(r.error().http_status == 429);
    CHECK(fake.RequestLog().size() == 1);
  }
  SECTION("a create is retried when it was never sent (connection refused)") {
    auto o = FastRetries();
    o.max_attempts = 3;
    o.initial_backoff = std::chrono::milliseconds(300);  // waits of [150, 300] then [300, 600] ms
    KubeClient client(KubeConfig::FromParts("https://127.0.0.1:1", KubeTls{}, "t"), o);
    auto start = std::chrono::steady_clock::now();
    auto r = client.Post(kSessions, SessionObject("never-sent"));
    auto took = std::chrono::steady_clock::now() - start;
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::connection_failed);
    CHECK(took >= std::chrono::milliseconds(440));  // two backoffs: it was tried three times
  }
  SECTION("request_timeout bounds the whole call, its retries included") {
    fake.Control("faults", {{"status", 503}, {"count", 10}, {"retry_after", 1}});
    auto o = FastRetries();
    o.request_timeout = std::chrono::milliseconds(1500);
    KubeClient client(fake.Config(), o);
    auto start = std::chrono::steady_clock::now();
    auto r = client.Get(kSessions);
    auto took = std::chrono::steady_clock::now() - start;
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::unavailable);
    CHECK_THAT(r.error().message, Catch::Contains("after 2 attempts"));  // a third would start past the deadline
    CHECK(took < std::chrono::milliseconds(1500));
    CHECK(fake.RequestLog().size() == 2);
  }
  SECTION("attempts run out") {
    fake.Control("faults", {{"status", 503}, {"count", 10}});
    auto o = FastRetries();
    o.max_attempts = 3;
    KubeClient client(fake.Config(), o);
    auto r = client.Get(kSessions);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::unavailable);
    CHECK(r.error().http_status == 503);
    CHECK_THAT(r.error().message, Catch::Contains("after 3 attempts") && Catch::Contains("ServiceUnavailable"));
    CHECK(fake.RequestLog().size() == 3);
  }
  SECTION("connection refused is retried, then reported") {
    auto o = FastRetries();
    o.max_attempts = 2;
    KubeTls tls;
    KubeClient client(KubeConfig::FromParts("https://127.0.0.1:1", tls, "t"), o);
    auto r = client.Get("/version");
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::connection_failed);
    CHECK_THAT(r.error().message, Catch::Contains("127.0.0.1:1"));
  }
}

TEST_CASE("kube client: watch lists, streams, bookmarks, resumes and re-lists after 410", "[kube][client][watch]") {
  FakeKube fake(/*ready_delay=*/0.2);
  fake.Control("config", {{"bookmark_interval", 0.2}});
  KubeClient client(fake.Config());
  REQUIRE(client.Post(kSessions, SessionObject("w1")));

  SECTION("list as ADDED, then the controller's MODIFIED events, then a BOOKMARK") {
    std::vector<std::string> types;
    std::string last_phase;
    bool bookmark = false;
    KubeWatchOptions wo;
    wo.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    auto st = client.Watch(kSessions, wo, [&](const WatchEvent& ev) {
      types.push_back(ev.type);
      if (ev.type == "BOOKMARK") bookmark = true;
      if (ev.type == "MODIFIED") last_phase = ev.object["status"].value("phase", "");
      return !(bookmark && last_phase == "Ready");
    });
    REQUIRE(st);
    REQUIRE(!types.empty());
    CHECK(types.front() == "ADDED");
    CHECK(last_phase == "Ready");
    CHECK(bookmark);
  }
  SECTION("a deadline ends the watch with timeout") {
    KubeWatchOptions wo;
    wo.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
    int events = 0;
    auto st = client.Watch(kSessions, wo, [&](const WatchEvent&) {
      ++events;
      return true;
    });
    REQUIRE_FALSE(st);
    CHECK(st.error().code == Errc::timeout);
    CHECK(events >= 1);
  }
  SECTION("a watch the server ended resumes from the last resourceVersion") {
    auto watch_queries = [&] {
      std::vector<std::string> out;
      for (const auto& e : fake.RequestLog()) {
        std::string q = e["query"];
        if (q.find("watch=true") != std::string::npos) out.push_back(q);
      }
      return out;
    };
    // Once a second watch request arrived (the first was ended by the server after 1 s), a new
    // Session appears: the resumed watch must deliver it.
    auto creator = std::async(std::launch::async, [&] {
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (watch_queries().size() < 2 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      KubeClient other(fake.Config());
      return other.Post(kSessions, SessionObject("after-resume")).has_value();
    });
    KubeWatchOptions wo;
    wo.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    wo.server_timeout = std::chrono::seconds(1);
    bool seen = false;
    auto st = client.Watch(kSessions, wo, [&](const WatchEvent& ev) {
      seen = ev.type == "ADDED" && ev.object["metadata"].value("name", "") == "after-resume";
      return !seen;
    });
    CHECK(creator.get());
    REQUIRE(st);
    CHECK(seen);
    auto watches = watch_queries();
    REQUIRE(watches.size() >= 2);
    CHECK_THAT(watches[0], Catch::Contains("allowWatchBookmarks=true") && Catch::Contains("resourceVersion="));
    CHECK_THAT(watches[1], Catch::Contains("resourceVersion="));
  }
  SECTION("410 Gone for a compacted resourceVersion re-lists") {
    auto list = client.Get(kSessions);
    REQUIRE(list);
    std::string old_rv = (*list)["metadata"]["resourceVersion"];
    REQUIRE(client.Post(kSessions, SessionObject("w2")));
    fake.Control("compact");
    std::vector<std::string> seen;
    KubeWatchOptions wo;
    wo.resource_version = old_rv;
    wo.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    auto st = client.Watch(kSessions, wo, [&](const WatchEvent& ev) {
      seen.push_back(ev.type + ":" + (ev.object.contains("metadata") ? ev.object["metadata"].value("name", "") : ""));
      return seen.size() < 3;
    });
    REQUIRE(st);
    REQUIRE(seen.size() == 3);
    CHECK(seen[0] == "RELISTED:");
    CHECK(seen[1] == "ADDED:w1");
    CHECK(seen[2] == "ADDED:w2");
  }
  SECTION("label and field selectors") {
    REQUIRE(client.Post(kSessions, json{{"metadata", {{"name", "labelled"}, {"labels", {{"app", "x"}}}}}}));
    auto by_label = client.Get(kSessions + "?labelSelector=" + UrlEncode("app=x"));
    REQUIRE(by_label);
    REQUIRE((*by_label)["items"].size() == 1);
    CHECK((*by_label)["items"][0]["metadata"]["name"] == "labelled");
    std::vector<std::string> names;
    KubeWatchOptions wo;
    wo.field_selector = "metadata.name=w1";
    wo.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    auto st = client.Watch(kSessions, wo, [&](const WatchEvent& ev) {
      names.push_back(ev.object["metadata"].value("name", ""));
      return false;
    });
    REQUIRE(st);
    CHECK(names == std::vector<std::string>{"w1"});
  }
}

TEST_CASE("kube client: blocking calls on a Context worker return would_block", "[kube][client]") {
  Context ctx;
  KubeClientOptions o;
  o.context = &ctx;
  KubeClient client(KubeConfig::FromParts("https://127.0.0.1:1", KubeTls{}, "t"), o);
  std::promise<Errc> code;
  ctx.Post([&] {
    auto r = client.Get("/version");
    code.set_value(r ? Errc::ok : r.error().code);
  });
  auto f = code.get_future();
  REQUIRE(f.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  CHECK(f.get() == Errc::would_block);
}

TEST_CASE("kube client: kubeconfig auth kinds against the fake (data fields, client certificate, tokenFile)",
          "[kube][client]") {
  FakeKube fake;
  TempDir dir;
  auto b64 = [](const std::string& path) { return kube_internal::Base64Encode(testing_kube::Slurp(path)); };
  dir.File("token", std::string(FakeKube::kToken) + "\n");
  std::string kc = dir.File(
      "config", "apiVersion: v1\nclusters:\n- name: f\n  cluster:\n    server: " + fake.Server() +
                    "\n    certificate-authority-data: " + b64(fake.CaPath()) +
                    "\nusers:\n- name: cert\n  user:\n    client-certificate-data: " + b64(fake.ClientCertPath()) +
                    "\n    client-key-data: " + b64(fake.ClientKeyPath()) +
                    "\n- name: file\n  user:\n    tokenFile: token\n"
                    "contexts:\n- name: cert\n  context: {cluster: f, user: cert}\n"
                    "- name: file\n  context: {cluster: f, user: file}\ncurrent-context: cert\n");
  for (std::string ctx : {"cert", "file"}) {
    DYNAMIC_SECTION(ctx) {
      KubeConfigOptions o;
      o.kubeconfig = kc;
      o.context = ctx;
      auto cfg = KubeConfig::Load(o);
      REQUIRE(cfg);
      KubeClient client(*cfg);
      auto r = client.Get(kSessions);
      REQUIRE(r);
      CHECK(fake.RequestLog().back()["auth"] == (ctx == "cert" ? "certificate" : "bearer"));
    }
  }
}

TEST_CASE("kube client: concurrent calls from several threads share the pool and the credentials",
          "[kube][client][concurrency]") {
  FakeKube fake;
  TempDir dir;
  dir.File("token", std::string(FakeKube::kToken) + "\n");
  std::string kc = dir.File("config", "apiVersion: v1\nclusters:\n- name: f\n  cluster:\n    server: " + fake.Server() +
                                          "\n    certificate-authority: " + fake.CaPath() +
                                          "\nusers:\n- name: u\n  user:\n    tokenFile: token\n"
                                          "contexts:\n- name: f\n  context: {cluster: f, user: u}\ncurrent-context: f\n");
  KubeConfigOptions o;
  o.kubeconfig = kc;
  auto cfg = KubeConfig::Load(o);
  REQUIRE(cfg);
  KubeClient client(*cfg);
  constexpr int kThreads = 4;
  constexpr int kCallsEach = 10;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsEach; ++i) {
        std::string name = "c-" + std::to_string(t) + "-" + std::to_string(i);
        if (client.Post(kSessions, SessionObject(name)) && client.Get(kSessions + "/" + name)) ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(ok == kThreads * kCallsEach);
  auto list = client.Get(kSessions);
  REQUIRE(list);
  CHECK((*list)["items"].size() == static_cast<std::size_t>(kThreads * kCallsEach));
}

TEST_CASE("kube client: a kubeconfig proxy-url tunnels through an HTTP CONNECT proxy", "[kube][client][proxy]") {
  FakeKube fake;
  // tests/fakes/ws_peer.py --proxy: prints "PORT n", logs "proxy: CONNECT host:port ..." on stderr,
  // serves until its stdin closes.
  int in_pipe[2], out_pipe[2];
  REQUIRE(::pipe(in_pipe) == 0);
  REQUIRE(::pipe(out_pipe) == 0);
  std::string proxy_log = fake.dir().path() + "/proxy.log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, proxy_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addclose(&actions, in_pipe[1]);
  posix_spawn_file_actions_addclose(&actions, out_pipe[0]);
  std::string script = std::string(SESSIONTURN_SOURCE_DIR) + "/tests/fakes/ws_peer.py";
  std::vector<std::string> args = {SESSIONTURN_PYTHON, script, "--proxy"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, SESSIONTURN_PYTHON, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  REQUIRE(rc == 0);
  std::string line;
  char c;
  while (::read(out_pipe[0], &c, 1) == 1 && c != '\n') line.push_back(c);
  ::close(out_pipe[0]);
  int proxy_port = line.rfind("PORT ", 0) == 0 ? std::atoi(line.c_str() + 5) : 0;

  Status outcome;
  if (proxy_port > 0) {
    TempDir dir;
    std::string kc = dir.File("config", "apiVersion: v1\nclusters:\n- name: f\n  cluster:\n    server: " + fake.Server() +
                                            "\n    certificate-authority: " + fake.CaPath() +
                                            "\n    proxy-url: http://127.0.0.1:" + std::to_string(proxy_port) +
                                            "\nusers:\n- name: u\n  user:\n    token: " + FakeKube::kToken +
                                            "\ncontexts:\n- name: f\n  context: {cluster: f, user: u}\n"
                                            "current-context: f\n");
    KubeConfigOptions o;
    o.kubeconfig = kc;
    auto cfg = KubeConfig::Load(o);
    REQUIRE(cfg);
    KubeClient client(*cfg);
    auto r = client.Get(kSessions);
    if (!r) outcome = Fail(r.error());
  }
  ::close(in_pipe[1]);  // the proxy exits when its stdin closes
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(proxy_port > 0);
  INFO((outcome ? std::string() : outcome.error().message));
  CHECK(outcome);
  CHECK_THAT(testing_kube::Slurp(proxy_log), Catch::Contains("CONNECT 127.0.0.1:" + std::to_string(fake.port())));
}
