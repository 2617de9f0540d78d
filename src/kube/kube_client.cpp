// KubeClient: blocking Kubernetes REST over libcurl. A pool of easy handles gives keep-alive
// connection reuse (curl_easy_reset keeps a handle's live connections and TLS sessions).
#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <mutex>
#include <optional>
#include <thread>

#include "kube/kube_util.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/kube.hpp"
#include "sessionturn/version.hpp"

namespace sessionturn {

using nlohmann::json;

namespace {

// A non-watch response larger than this is not a Kubernetes object we asked for.
constexpr std::size_t kMaxResponseBytes = 64u << 20;
// Idle handles kept for reuse; more concurrent calls than this open extra handles that are freed.
constexpr std::size_t kMaxPooledHandles = 8;
// A watch that fails this many times in a row (no event in between) gives up.
constexpr int kMaxWatchFailures = 8;
// A watch that ends sooner than this without an event counts as a failure (backoff, bounded).
constexpr std::chrono::milliseconds kMinQuietWatch{500};
// Bound on one watch event line (a Session object is a few KiB; 8 MiB matches the runtime's line bound).
constexpr std::size_t kMaxWatchLine = 8u << 20;

const std::string& UserAgent() {
  static const std::string ua = std::string("sessionturn/") + SESSIONTURN_VERSION_STRING;
  return ua;
}

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct ParsedUrl {
  std::string scheme, host, port, prefix;
};

ParsedUrl ParseServer(const std::string& server) {
  ParsedUrl u;
  auto scheme_end = server.find("://");
  u.scheme = server.substr(0, scheme_end);
  std::string rest = server.substr(scheme_end + 3);
  auto slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  u.prefix = slash == std::string::npos ? "" : rest.substr(slash);
  if (!hostport.empty() && hostport[0] == '[') {
    auto close = hostport.find(']');
    u.host = hostport.substr(0, close + 1);
    if (close + 1 < hostport.size() && hostport[close + 1] == ':') u.port = hostport.substr(close + 2);
  } else {
    auto colon = hostport.rfind(':');
    u.host = hostport.substr(0, colon);
    if (colon != std::string::npos) u.port = hostport.substr(colon + 1);
  }
  if (u.port.empty()) u.port = u.scheme == "https" ? "443" : "80";
  return u;
}

std::string StatusText(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.value("kind", "") == "Status") {
    std::string reason = j.value("reason", "");
    std::string message = j.value("message", "");
    if (!reason.empty() && !message.empty()) return reason + ": " + message;
    return !message.empty() ? message : reason;
  }
  std::string t = body.substr(0, 200);
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

Errc CodeFor(long status) {
  switch (status) {
    case 401: return Errc::unauthorized;
    case 403: return Errc::forbidden;
    case 404: return Errc::not_found;
    case 409: return Errc::conflict;
    case 410: return Errc::not_found;  // a resourceVersion that is gone
    case 400:
    case 422: return Errc::invalid_argument;
    case 429: return Errc::unavailable;
    default: return status >= 500 ? Errc::unavailable : Errc::failed;
  }
}

bool RetryableCurl(CURLcode code, bool idempotent) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
      return true;  // nothing was sent
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_OPERATION_TIMEDOUT:
      return idempotent;
    default:
      return false;
  }
}

}  // namespace

struct KubeClient::Impl {
  KubeConfig config;
  KubeClientOptions options;
  std::string base_url;                // server URL, its host replaced by tls-server-name when set
  std::string connect_to;              // routes tls-server-name to the real host
  std::mutex pool_mu;
  std::vector<CURL*> pool;

  Impl(KubeConfig c, KubeClientOptions o) : config(std::move(c)), options(o) {
    GlobalInit();
    base_url = config.Server();
    const std::string& sni = config.Tls().server_name;
    if (!sni.empty()) {
      // libcurl takes SNI and the verified name from the URL's host, so the URL names the
      // tls-server-name and CONNECT_TO sends the connection to the real address.
      ParsedUrl u = ParseServer(config.Server());
      base_url = u.scheme + "://" + sni + ":" + u.port + u.prefix;
      connect_to = sni + ":" + u.port + ":" + u.host + ":" + u.port;
    }
  }

  ~Impl() {
    for (CURL* h : pool) curl_easy_cleanup(h);
  }

  CURL* Acquire() {
    {
      std::lock_guard lock(pool_mu);
      if (!pool.empty()) {
        CURL* h = pool.back();
        pool.pop_back();
        curl_easy_reset(h);
        return h;
      }
    }
    return curl_easy_init();
  }

  void Release(CURL* h) {
    std::lock_guard lock(pool_mu);
    if (pool.size() < kMaxPooledHandles) {
      pool.push_back(h);
    } else {
      curl_easy_cleanup(h);
    }
  }

  struct Response {
    CURLcode code = CURLE_OK;
    std::string curl_error;
    long status = 0;
    std::string body;
    std::string retry_after;
    bool too_large = false;
  };

  // `sink`, when given, receives the body as it streams (a watch); returning false aborts.
  using Sink = std::function<bool(long status, const char* data, std::size_t size)>;

  struct Transfer {
    Response* response;
    const Sink* sink;
    CURL* handle;
  };

  static size_t OnBody(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    std::size_t len = size * n;
    if (t->sink != nullptr && *t->sink) {
      long status = 0;
      curl_easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &status);
      if (status == 200) return (*t->sink)(status, data, len) ? len : 0;
    }
    if (t->response->body.size() + len > kMaxResponseBytes) {
      t->response->too_large = true;
      return 0;
    }
    t->response->body.append(data, len);
    return len;
  }

  static size_t OnHeader(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    std::string_view line(data, size * n);
    constexpr std::string_view kName = "retry-after:";
    if (line.size() > kName.size()) {
      std::string lower(line.substr(0, kName.size()));
      std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
      if (lower == kName) {
        std::string v(line.substr(kName.size()));
        v.erase(0, v.find_first_not_of(" \t"));
        while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.pop_back();
        t->response->retry_after = v;
      }
    }
    return size * n;
  }

  Result<Response> Perform(const std::string& method, std::string_view path, const std::string* body,
                           const std::string& content_type, std::chrono::milliseconds timeout, const Sink* sink) {
    auto token = config.BearerToken();
    if (!token) return Fail(token.error());
    CURL* h = Acquire();
    if (h == nullptr) return Fail(Errc::internal, "curl_easy_init failed");
    Response response;
    Transfer transfer{&response, sink, h};
    std::string url = base_url + std::string(path);
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_slist* headers = nullptr;
    curl_slist* connect_list = nullptr;
    headers = curl_slist_append(headers, "Accept: application/json");
    if (body != nullptr) headers = curl_slist_append(headers, ("Content-Type: " + content_type).c_str());
    std::string auth;
    if (!token->empty()) {
      auth = "Authorization: Bearer " + *token;
      headers = curl_slist_append(headers, auth.c_str());
    }
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, UserAgent().c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method.c_str());
    if (method == "GET") curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    if (body != nullptr) {
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, body->data());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &Impl::OnBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &transfer);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &Impl::OnHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &transfer);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout.count()));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<long long>(1, timeout.count())));
    curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https,http");
    const KubeTls& tls = config.Tls();
    curl_blob ca_blob{const_cast<char*>(tls.ca_pem.data()), tls.ca_pem.size(), CURL_BLOB_COPY};
    curl_blob cert_blob{const_cast<char*>(tls.client_cert_pem.data()), tls.client_cert_pem.size(), CURL_BLOB_COPY};
    curl_blob key_blob{const_cast<char*>(tls.client_key_pem.data()), tls.client_key_pem.size(), CURL_BLOB_COPY};
    if (!tls.ca_pem.empty()) curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &ca_blob);
    if (!tls.client_cert_pem.empty()) {
      curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cert_blob);
      curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
      curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &key_blob);
      curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    }
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, tls.insecure_skip_verify ? 0L : 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, tls.insecure_skip_verify ? 0L : 2L);
    if (!connect_to.empty()) {
      connect_list = curl_slist_append(connect_list, connect_to.c_str());
      curl_easy_setopt(h, CURLOPT_CONNECT_TO, connect_list);
    }
    if (!config.ProxyUrl().empty()) {
      // kubectl uses a cluster's proxy-url for every request; $no_proxy must not bypass it.
      curl_easy_setopt(h, CURLOPT_PROXY, config.ProxyUrl().c_str());
      curl_easy_setopt(h, CURLOPT_NOPROXY, "");
    }
    response.code = curl_easy_perform(h);
    if (response.code != CURLE_OK) {
      response.curl_error = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(response.code);
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &response.status);
    // The Authorization header must not outlive the call in the pooled handle.
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
    curl_slist_free_all(headers);
    curl_slist_free_all(connect_list);
    Release(h);
    return response;
  }

  std::chrono::milliseconds Backoff(int attempt, const std::string& retry_after) const {
    bool digits = std::all_of(retry_after.begin(), retry_after.end(), [](unsigned char c) { return std::isdigit(c); });
    if (!retry_after.empty() && digits && retry_after.size() < 6) {
      return std::min(std::chrono::milliseconds(std::stoll(retry_after) * 1000), options.max_backoff);
    }
    auto d = options.initial_backoff * (1LL << std::min(attempt, 16));
    return std::min(std::chrono::duration_cast<std::chrono::milliseconds>(d), options.max_backoff);
  }

  Error TransportError(const std::string& method, std::string_view path, const Response& r) const {
    std::string what = method + " " + config.Server() + std::string(path) + ": ";
    switch (r.code) {
      case CURLE_PEER_FAILED_VERIFICATION:
      case CURLE_SSL_CACERT_BADFILE:
        return Error(Errc::connection_failed, what + "the server's TLS certificate was not accepted (" + r.curl_error +
                                                  "); check certificate-authority / tls-server-name in " +
                                                  config.Describe());
      case CURLE_SSL_CONNECT_ERROR:
      case CURLE_SSL_CERTPROBLEM:
        return Error(Errc::connection_failed, what + "TLS handshake failed: " + r.curl_error);
      case CURLE_OPERATION_TIMEDOUT: return Error(Errc::timeout, what + r.curl_error);
      default: return Error(Errc::connection_failed, what + r.curl_error);
    }
  }

  Result<json> Call(const std::string& method, std::string_view path, const std::string* body,
                    const std::string& content_type) {
    if (options.context != nullptr && options.context->InWorkerThread()) {
      return Fail(Errc::would_block, "KubeClient::" + method + " blocks and was called on a Context worker thread");
    }
    bool idempotent = method != "POST";
    bool reauthed = false;
    for (int attempt = 1;; ++attempt) {
      auto r = Perform(method, path, body, content_type, options.request_timeout, nullptr);
      if (!r) return Fail(r.error());
      if (r->code != CURLE_OK) {
        if (r->too_large) {
          return Fail(Errc::too_large, method + " " + std::string(path) + ": response larger than " +
                                           std::to_string(kMaxResponseBytes) + " bytes");
        }
        if (attempt < options.max_attempts && RetryableCurl(r->code, idempotent)) {
          std::this_thread::sleep_for(Backoff(attempt - 1, ""));
          continue;
        }
        return Fail(TransportError(method, path, *r));
      }
      long s = r->status;
      if (s == 401 && !reauthed && config.InvalidateToken()) {
        reauthed = true;  // a rotated token file or an expired exec credential: one fresh try
        --attempt;
        continue;
      }
      if ((s == 429 || s >= 500) && attempt < options.max_attempts) {
        std::this_thread::sleep_for(Backoff(attempt - 1, r->retry_after));
        continue;
      }
      if (s >= 200 && s < 300) {
        if (r->body.empty()) return json::object();
        json j = json::parse(r->body, nullptr, false);
        if (j.is_discarded()) {
          return Fail(Errc::protocol_error, method + " " + std::string(path) + ": the response is not JSON");
        }
        return j;
      }
      std::string msg = method + " " + std::string(path) + ": HTTP " + std::to_string(s) + " " + StatusText(r->body);
      if ((s == 429 || s >= 500) && attempt > 1) msg += " (after " + std::to_string(attempt) + " attempts)";
      if (s == 401) msg += " (credentials from " + config.Describe() + ")";
      return Fail(CodeFor(s), msg, static_cast<int>(s));
    }
  }

  Status Watch(std::string_view collection_path, const KubeWatchOptions& opts, const WatchHandler& handler);
};

Status KubeClient::Impl::Watch(std::string_view collection_path, const KubeWatchOptions& opts, const WatchHandler& handler) {
  if (options.context != nullptr && options.context->InWorkerThread()) {
    return Fail(Errc::would_block, "KubeClient::Watch blocks and was called on a Context worker thread");
  }
  std::string path(collection_path);
  std::string selectors;
  if (!opts.label_selector.empty()) selectors += "&labelSelector=" + UrlEncode(opts.label_selector);
  if (!opts.field_selector.empty()) selectors += "&fieldSelector=" + UrlEncode(opts.field_selector);
  std::string rv = opts.resource_version;
  bool need_list = rv.empty();
  bool relist = false;
  int failures = 0;
  bool reauthed = false;
  auto timeout_error = [&] {
    return Fail(Errc::timeout, "watch " + path + ": the deadline passed");
  };
  while (true) {
    auto now = std::chrono::steady_clock::now();
    if (now >= opts.deadline) return timeout_error();
    if (need_list) {
      std::string list_path = path + (selectors.empty() ? "" : "?" + selectors.substr(1));
      auto list = Call("GET", list_path, nullptr, "");
      if (!list) return Fail(list.error());
      if (relist && !handler(WatchEvent{"RELISTED", json::object()})) return {};
      if (list->contains("items") && (*list)["items"].is_array()) {
        for (const auto& item : (*list)["items"]) {
          if (!handler(WatchEvent{"ADDED", item})) return {};
        }
      }
      rv = (*list)["metadata"].value("resourceVersion", "");
      need_list = false;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(opts.deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return timeout_error();
    long long server_timeout = std::max<long long>(1, std::min<long long>(opts.server_timeout.count(), left.count() / 1000 + 1));
    std::string watch_path = path + "?watch=true&allowWatchBookmarks=true&timeoutSeconds=" +
                             std::to_string(server_timeout) + selectors;
    if (!rv.empty()) watch_path += "&resourceVersion=" + UrlEncode(rv);

    std::string pending;
    bool stopped = false;
    bool gone = false;
    bool got_event = false;
    std::optional<Error> stream_error;
    Sink sink = [&](long, const char* data, std::size_t size) -> bool {
      // Nothing may throw through libcurl's C frames.
      try {
      pending.append(data, size);
      std::size_t start = 0;
      while (true) {
        auto nl = pending.find('\n', start);
        if (nl == std::string::npos) break;
        std::string_view line(pending.data() + start, nl - start);
        start = nl + 1;
        if (line.find_first_not_of(" \r\t") == std::string_view::npos) continue;
        json ev = json::parse(line, nullptr, false);
        if (ev.is_discarded() || !ev.is_object()) {
          stream_error = Error(Errc::protocol_error, "watch " + path + ": an event is not a JSON object");
          return false;
        }
        std::string type = ev.value("type", "");
        json object = ev.contains("object") ? ev["object"] : json::object();
        if (type == "ERROR") {
          int code = object.is_object() ? object.value("code", 0) : 0;
          if (code == 410) {
            gone = true;
          } else {
            stream_error = Error(CodeFor(code), "watch " + path + ": " + StatusText(object.dump()), code);
          }
          return false;
        }
        if (object.is_object() && object.contains("metadata")) {
          std::string new_rv = object["metadata"].value("resourceVersion", "");
          if (!new_rv.empty()) rv = new_rv;
        }
        got_event = true;
        if (!handler(WatchEvent{type, object})) {
          stopped = true;
          return false;
        }
      }
      pending.erase(0, start);
      if (pending.size() > kMaxWatchLine) {
        stream_error = Error(Errc::too_large, "watch " + path + ": an event is larger than 8 MiB");
        return false;
      }
      return true;
      } catch (const std::exception& e) {
        stream_error = Error(Errc::internal, "watch " + path + ": " + e.what());
        return false;
      }
    };
    auto started = std::chrono::steady_clock::now();
    auto r = Perform("GET", watch_path, nullptr, "", left, &sink);
    if (!r) return Fail(r.error());
    if (stopped) return {};
    if (stream_error) return Fail(*stream_error);
    if (got_event) failures = 0;
    if (gone || r->status == 410) {
      need_list = true;
      relist = true;
      continue;
    }
    if (r->code != CURLE_OK && r->code != CURLE_WRITE_ERROR) {
      if (std::chrono::steady_clock::now() >= opts.deadline) return timeout_error();
      if (++failures >= kMaxWatchFailures) return Fail(TransportError("GET", watch_path, *r));
      std::this_thread::sleep_for(std::min(Backoff(failures - 1, ""),
                                           std::chrono::duration_cast<std::chrono::milliseconds>(
                                               opts.deadline - std::chrono::steady_clock::now())));
      continue;
    }
    long s = r->status;
    if (s == 200) {
      // The server ended the watch (timeoutSeconds): resume from rv. A server that ends watches at
      // once without sending anything must not make this a busy loop.
      if (!got_event && std::chrono::steady_clock::now() - started < kMinQuietWatch) {
        if (++failures >= kMaxWatchFailures) {
          return Fail(Errc::unavailable, "watch " + path + ": the server keeps ending watches at once");
        }
        std::this_thread::sleep_for(std::min(Backoff(failures - 1, ""),
                                             std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 opts.deadline - std::chrono::steady_clock::now())));
      }
      continue;
    }
    if (s == 401 && !reauthed && config.InvalidateToken()) {
      reauthed = true;
      continue;
    }
    if ((s == 429 || s >= 500) && ++failures < kMaxWatchFailures) {
      auto wait = std::min(Backoff(failures - 1, r->retry_after),
                           std::chrono::duration_cast<std::chrono::milliseconds>(opts.deadline -
                                                                                 std::chrono::steady_clock::now()));
      if (wait.count() > 0) std::this_thread::sleep_for(wait);
      continue;
    }
    return Fail(CodeFor(s), "watch " + path + ": HTTP " + std::to_string(s) + " " + StatusText(r->body),
                static_cast<int>(s));
  }
}

KubeClient::KubeClient(KubeConfig config, KubeClientOptions options)
    : impl_(std::make_unique<Impl>(std::move(config), options)) {}
KubeClient::~KubeClient() = default;
KubeClient::KubeClient(KubeClient&&) noexcept = default;
KubeClient& KubeClient::operator=(KubeClient&&) noexcept = default;

const KubeConfig& KubeClient::Config() const noexcept { return impl_->config; }

namespace {
template <typename F>
Result<json> Guard(const char* what, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return Fail(Errc::internal, std::string(what) + ": " + e.what());
  }
}
}  // namespace

Result<json> KubeClient::Get(std::string_view path) {
  return Guard("GET", [&] { return impl_->Call("GET", path, nullptr, ""); });
}

Result<json> KubeClient::Post(std::string_view path, const json& body) {
  return Guard("POST", [&] {
    std::string text = body.dump(-1, ' ', false, json::error_handler_t::replace);
    return impl_->Call("POST", path, &text, "application/json");
  });
}

Result<json> KubeClient::Patch(std::string_view path, const json& patch, PatchType type) {
  return Guard("PATCH", [&] {
    std::string text = patch.dump(-1, ' ', false, json::error_handler_t::replace);
    return impl_->Call("PATCH", path, &text,
                       type == PatchType::merge ? "application/merge-patch+json" : "application/json-patch+json");
  });
}

Result<json> KubeClient::Delete(std::string_view path) {
  return Guard("DELETE", [&] { return impl_->Call("DELETE", path, nullptr, ""); });
}

Status KubeClient::Watch(std::string_view collection_path, const KubeWatchOptions& options, const WatchHandler& handler) {
  try {
    return impl_->Watch(collection_path, options, handler);
  } catch (const std::exception& e) {
    return Fail(Errc::internal, std::string("watch: ") + e.what());
  }
}

std::string UrlEncode(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    // RFC 3986 unreserved characters, spelled out: std::isalnum depends on the C locale.
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
        c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace sessionturn
