// One exchange as libcurl options, its header/body callbacks, and what its outcome means.
#include "http/transfer.hpp"

#include <algorithm>

#include "http/multi.hpp"

namespace sessionturn::http {

namespace {

// TCP keepalive on every connection, so a watch that sits silent on a connection whose peer vanished
// (no FIN, no RST) is noticed within a minute instead of the kernel's two hours.
constexpr long kKeepaliveIdleSeconds = 30;
constexpr long kKeepaliveIntervalSeconds = 10;

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
           return lower(x) == lower(y);
         });
}

// RFC 9110 token characters: what a method or a header name may consist of.
bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
  });
}

bool HasLineBreak(std::string_view s) { return s.find_first_of("\r\n") != std::string_view::npos; }

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

// The URL with its host replaced by `host`, and libcurl's view of the original host and port.
struct Rewritten {
  std::string url, host, port;
};

Result<Rewritten> ReplaceHost(const std::string& url, const std::string& host) {
  CURLU* u = curl_url();
  if (u == nullptr) return Fail(Errc::internal, "curl_url failed");
  struct Cleanup {
    CURLU* u;
    ~Cleanup() { curl_url_cleanup(u); }
  } cleanup{u};
  if (CURLUcode rc = curl_url_set(u, CURLUPART_URL, url.c_str(), 0); rc != CURLUE_OK) {
    return Fail(Errc::invalid_argument, "the URL \"" + url + "\" is not valid: " + curl_url_strerror(rc));
  }
  auto get = [&](CURLUPart part, unsigned flags) -> std::string {
    char* out = nullptr;
    if (curl_url_get(u, part, &out, flags) != CURLUE_OK || out == nullptr) return {};
    std::string s(out);
    curl_free(out);
    return s;
  };
  Rewritten r;
  r.host = get(CURLUPART_HOST, 0);
  r.port = get(CURLUPART_PORT, CURLU_DEFAULT_PORT);
  if (curl_url_set(u, CURLUPART_HOST, host.c_str(), 0) != CURLUE_OK) {
    return Fail(Errc::invalid_argument, "the TLS server name \"" + host + "\" is not a valid host name");
  }
  r.url = get(CURLUPART_URL, 0);
  if (r.url.empty() || r.host.empty() || r.port.empty()) {
    return Fail(Errc::invalid_argument, "the URL \"" + url + "\" has no host");
  }
  return r;
}

}  // namespace

Transfer::~Transfer() { Teardown(); }

void Transfer::Teardown() {
  curl_slist_free_all(header_list);
  header_list = nullptr;
  curl_slist_free_all(connect_to);
  connect_to = nullptr;
  easy = nullptr;
}

Status Transfer::Setup(CURL* e, Multi& m, const std::string& user_agent) {
  multi = &m;
  easy = e;
  if (!IsToken(request.method)) {
    return Fail(Errc::invalid_argument, "HttpRequest: the method \"" + request.method + "\" is not valid");
  }
  if (request.url.rfind("https://", 0) == 0) {
    https = true;
  } else if (request.url.rfind("http://", 0) != 0) {
    return Fail(Errc::invalid_argument, "HttpRequest: the URL \"" + request.url + "\" is not http:// or https://");
  }
  if (request.timeout.count() <= 0 || request.connect_timeout.count() <= 0) {
    // Every wait has a deadline: zero or negative is a mistake, not "forever".
    return Fail(Errc::invalid_argument, What() + ": the timeouts must be positive");
  }
  if (auto url = SetupUrl(); !url) return url;
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_USERAGENT, user_agent.c_str());  // libcurl copies strings
  curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");  // whatever this libcurl decodes
  curl_easy_setopt(e, CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, kKeepaliveIdleSeconds);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, kKeepaliveIntervalSeconds);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout.count()));
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(request.connect_timeout.count()));
  if (auto message = SetupMessage(); !message) return message;
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Transfer::OnHeader);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, this);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Transfer::OnBody);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, this);
  SetupTls();
  if (!request.proxy.empty()) {
    curl_easy_setopt(e, CURLOPT_PROXY, request.proxy.c_str());
    curl_easy_setopt(e, CURLOPT_NOPROXY, "");  // an explicit proxy is used for every host
  }
  return {};
}

Status Transfer::SetupUrl() {
  const std::string& server_name = request.tls.server_name;
  if (server_name.empty()) {
    curl_easy_setopt(easy, CURLOPT_URL, request.url.c_str());
    return {};
  }
  // libcurl takes SNI and the verified name from the URL's host: the URL names server_name and
  // CONNECT_TO sends the connection to the real host and port.
  auto r = ReplaceHost(request.url, server_name);
  if (!r) return Fail(r.error().code, What() + ": " + r.error().message);
  if (IEquals(r->host, server_name)) {
    curl_easy_setopt(easy, CURLOPT_URL, request.url.c_str());
    return {};
  }
  connect_to = curl_slist_append(nullptr, (server_name + ":" + r->port + ":" + r->host + ":" + r->port).c_str());
  curl_easy_setopt(easy, CURLOPT_CONNECT_TO, connect_to);
  curl_easy_setopt(easy, CURLOPT_URL, r->url.c_str());
  return {};
}

Status Transfer::SetupMessage() {
  const std::string& method = request.method;
  const bool sends_body = !request.body.empty() || method == "POST" || method == "PUT" || method == "PATCH";
  bool has_content_type = false;
  for (const auto& [name, value] : request.headers) {
    if (!IsToken(name) || HasLineBreak(value)) {
      return Fail(Errc::invalid_argument, What() + ": the header \"" + name + "\" is not a valid name or value");
    }
    header_list = curl_slist_append(header_list, (value.empty() ? name + ";" : name + ": " + value).c_str());
    if (IEquals(name, "Content-Type")) has_content_type = true;
  }
  if (sends_body) {
    // No form-encoding claim for a body the caller did not type, and no 100-continue round trip.
    if (!has_content_type) header_list = curl_slist_append(header_list, "Content-Type:");
    header_list = curl_slist_append(header_list, "Expect:");
  }
  if (header_list != nullptr) curl_easy_setopt(easy, CURLOPT_HTTPHEADER, header_list);
  if (method == "HEAD") {
    curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
  } else if (method == "GET" && !sends_body) {
    curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
  } else {
    if (sends_body) {
      curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
      curl_easy_setopt(easy, CURLOPT_POSTFIELDS, request.body.data());  // owned by this Transfer
    }
    if (method != "POST") curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, method.c_str());
  }
  return {};
}

void Transfer::SetupTls() {
  const HttpTls& tls = request.tls;
  // CURL_BLOB_COPY: libcurl keeps its own copies, these structs may go.
  curl_blob ca{const_cast<char*>(tls.ca_pem.data()), tls.ca_pem.size(), CURL_BLOB_COPY};
  curl_blob cert{const_cast<char*>(tls.client_cert_pem.data()), tls.client_cert_pem.size(), CURL_BLOB_COPY};
  curl_blob key{const_cast<char*>(tls.client_key_pem.data()), tls.client_key_pem.size(), CURL_BLOB_COPY};
  if (!tls.ca_pem.empty()) {
    curl_easy_setopt(easy, CURLOPT_CAINFO_BLOB, &ca);
    // Only these CAs: without this libcurl would also trust its default CA directory.
    curl_easy_setopt(easy, CURLOPT_CAPATH, static_cast<const char*>(nullptr));
  }
  if (!tls.client_cert_pem.empty()) {
    curl_easy_setopt(easy, CURLOPT_SSLCERT_BLOB, &cert);
    curl_easy_setopt(easy, CURLOPT_SSLCERTTYPE, "PEM");
  }
  if (!tls.client_key_pem.empty()) {
    curl_easy_setopt(easy, CURLOPT_SSLKEY_BLOB, &key);
    curl_easy_setopt(easy, CURLOPT_SSLKEYTYPE, "PEM");
  }
  curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, tls.insecure_skip_verify ? 0L : 1L);
  curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, tls.insecure_skip_verify ? 0L : 2L);
}

size_t Transfer::OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  // Nothing may throw through libcurl's C frames.
  try {
    if (t->Cancelled()) return 0;
    t->header_bytes += len;
    if (t->header_bytes > kMaxResponseHeaderBytes) {
      t->abort = Error(Errc::too_large, t->What() + ": the response headers are larger than " +
                                            std::to_string(kMaxResponseHeaderBytes) + " bytes");
      return 0;
    }
    std::string_view line(data, len);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
    if (line.rfind("HTTP/", 0) == 0) {
      // A status line: a new response (after a 1xx) starts over.
      auto space = line.find(' ');
      int status = 0;
      for (size_t i = space == std::string_view::npos ? line.size() : space + 1; i < line.size(); ++i) {
        if (line[i] < '0' || line[i] > '9') break;
        status = status * 10 + (line[i] - '0');
      }
      t->response.status = status;
      t->response.headers.clear();
      t->head_done = false;
      return len;
    }
    if (line.empty()) {
      if (t->response.status >= 200 && !t->head_done) {
        t->head_done = true;
        if (t->streaming && t->handlers.on_headers) {
          if (!t->multi->Deliver(*t, [t] { return t->handlers.on_headers(t->response); })) return 0;
        }
      }
      return len;
    }
    if (t->head_done) return len;  // trailers: not part of the response we report
    auto colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return len;
    t->response.headers.emplace_back(std::string(line.substr(0, colon)), std::string(TrimSpace(line.substr(colon + 1))));
    return len;
  } catch (const std::exception& e) {
    t->abort = Error(Errc::internal, t->What() + ": reading the response headers: " + e.what());
    return 0;
  }
}

size_t Transfer::OnBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  try {
    if (t->Cancelled()) return 0;
    t->body_bytes += len;
    if (t->streaming && t->response.status >= 200 && t->response.status < 300) {
      std::string_view chunk(data, len);
      if (!t->multi->Deliver(*t, [t, chunk] { return t->handlers.on_chunk ? t->handlers.on_chunk(chunk) : true; })) {
        return 0;
      }
      return len;
    }
    if (t->response.body.size() + len > t->request.max_response_bytes) {
      t->abort = Error(Errc::too_large, t->What() + ": the response body is larger than " +
                                            std::to_string(t->request.max_response_bytes) + " bytes");
      return 0;
    }
    t->response.body.append(data, len);
    return len;
  } catch (const std::exception& e) {
    t->abort = Error(Errc::internal, t->What() + ": reading the response body: " + e.what());
    return 0;
  }
}

Error Transfer::CancelledError() const {
  switch (cancel.load(std::memory_order_acquire)) {
    case Cancel::client_closed:
      return Error(Errc::cancelled, What() + ": cancelled: the HttpClient was destroyed while it was in flight");
    case Cancel::by_handler: return Error(Errc::cancelled, What() + ": ended by its stream handler");
    case Cancel::by_caller:
    case Cancel::none: break;
  }
  return Error(Errc::cancelled, What() + ": cancelled");
}

namespace {

// Where a failed exchange was, from libcurl's timers (microseconds since the start; 0: not reached).
struct Phases {
  long local_port = 0;  // set once TCP connected (libcurl 7.88 stamps CONNECT_TIME only with TLS done too)
  curl_off_t app_connect = 0, pre_transfer = 0, start_transfer = 0, total = 0;
};

Phases PhasesOf(CURL* easy) {
  Phases p;
  curl_easy_getinfo(easy, CURLINFO_LOCAL_PORT, &p.local_port);
  curl_easy_getinfo(easy, CURLINFO_APPCONNECT_TIME_T, &p.app_connect);
  curl_easy_getinfo(easy, CURLINFO_PRETRANSFER_TIME_T, &p.pre_transfer);
  curl_easy_getinfo(easy, CURLINFO_STARTTRANSFER_TIME_T, &p.start_transfer);
  curl_easy_getinfo(easy, CURLINFO_TOTAL_TIME_T, &p.total);
  return p;
}

}  // namespace

Result<HttpResponse> Transfer::Outcome(CURLcode code) {
  if (Cancelled()) return Fail(CancelledError());
  if (abort) return Fail(*abort);
  if (code == CURLE_OK) {
    HttpResponse r = std::move(response);
    long status = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    if (status != 0) r.status = static_cast<int>(status);
    long connects = 0;
    curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &connects);
    r.new_connections = static_cast<int>(connects);
    return r;
  }
  std::string detail = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(code);
  while (!detail.empty() && (detail.back() == '\n' || detail.back() == '\r')) detail.pop_back();
  const Phases p = PhasesOf(easy);
  // libcurl stamps PRETRANSFER just before it sends the request: before that nothing left us.
  const bool sent = p.pre_transfer > 0;
  const std::string w = What() + ": ";
  switch (code) {
    case CURLE_OPERATION_TIMEDOUT: {
      const std::string after = "timed out after " + std::to_string(p.total / 1000) + " ms ";
      if (!sent) {
        const char* phase = p.local_port == 0             ? "connecting"
                            : https && p.app_connect == 0 ? "in the TLS handshake"
                                                          : "setting up the connection";
        return Fail(Errc::connection_failed, w + after + phase + " (connect timeout " + Ms(request.connect_timeout) +
                                                 ", timeout " + Ms(request.timeout) + "); nothing was sent");
      }
      std::string phase = p.start_transfer == 0 && !head_done
                              ? "waiting for the response"
                              : "reading the response body (" + std::to_string(body_bytes) + " bytes received)";
      return Fail(Errc::timeout, w + after + phase + " (timeout " + Ms(request.timeout) + ")");
    }
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
      return Fail(Errc::connection_failed, w + "the server's TLS certificate was not accepted: " + detail);
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
      return Fail(Errc::connection_failed, w + "the client certificate or key cannot be used: " + detail);
    case CURLE_SSL_CONNECT_ERROR: return Fail(Errc::connection_failed, w + "the TLS handshake failed: " + detail);
    case CURLE_COULDNT_RESOLVE_HOST: return Fail(Errc::connection_failed, w + "cannot resolve the host: " + detail);
    case CURLE_COULDNT_RESOLVE_PROXY: return Fail(Errc::connection_failed, w + "cannot resolve the proxy: " + detail);
    case CURLE_COULDNT_CONNECT: return Fail(Errc::connection_failed, w + "cannot connect: " + detail);
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_NOT_BUILT_IN:
      return Fail(Errc::invalid_argument, w + detail);
    case CURLE_OUT_OF_MEMORY: return Fail(Errc::internal, w + detail);
    default: break;
  }
  if (sent) return Fail(Errc::connection_lost, w + "the connection failed after the request was sent: " + detail);
  return Fail(Errc::connection_failed, w + "the connection failed before the request was sent: " + detail);
}

}  // namespace sessionturn::http
