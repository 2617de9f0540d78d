// One HTTP exchange inside HttpClient: the request as libcurl options on an easy handle, libcurl's
// header and body callbacks, and the outcome (a response or an Error that names the phase). Internal.
#pragma once

#include <curl/curl.h>

#include <atomic>
#include <optional>
#include <string>

#include "sessionturn/error.hpp"
#include "sessionturn/http.hpp"

namespace sessionturn::http {

class Multi;

struct Transfer {
  Transfer(HttpRequest r, HttpStreamHandlers h, bool is_stream)
      : request(std::move(r)), handlers(std::move(h)), streaming(is_stream) {}
  ~Transfer();
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;

  // "GET https://host:port/path?query": for messages (never a header value).
  std::string What() const { return request.method + " " + request.url; }

  // Sets every option of `easy` (fresh from the pool: reset) for this exchange. Strand only.
  Status Setup(CURL* easy, Multi& multi, const std::string& user_agent);
  // The outcome once libcurl finished with `code` (or the transfer was cancelled); moves the
  // response out. Strand only, before the easy handle is reset.
  Result<HttpResponse> Outcome(CURLcode code);
  // Frees what Setup allocated and forgets the easy handle. Strand only.
  void Teardown();
  // Errc::cancelled, saying who cancelled.
  Error CancelledError() const;

  // Parts of Setup (easy is set).
  Status SetupUrl();
  Status SetupMessage();  // headers, method and body
  void SetupTls();

  static size_t OnHeader(char* data, size_t size, size_t n, void* user);
  static size_t OnBody(char* data, size_t size, size_t n, void* user);

  HttpRequest request;
  HttpStreamHandlers handlers;  // on_done is used by plain requests too
  const bool streaming;

  // Strand only.
  Multi* multi = nullptr;
  CURL* easy = nullptr;
  curl_slist* header_list = nullptr;
  curl_slist* connect_to = nullptr;
  bool https = false;
  char error_buffer[CURL_ERROR_SIZE] = {0};
  HttpResponse response;
  bool head_done = false;        // the final response's headers are complete
  std::size_t header_bytes = 0;  // of every response, 1xx included
  std::size_t body_bytes = 0;    // received, streamed or not
  std::optional<Error> abort;    // why a callback ended the transfer (too large, a handler)

  // Why the transfer was cancelled; the first reason set wins.
  enum class Cancel : int { none = 0, by_caller, client_closed, by_handler };
  // Any thread.
  bool Cancelled() const noexcept { return cancel.load(std::memory_order_acquire) != Cancel::none; }
  void SetCancel(Cancel why) noexcept {
    Cancel expected = Cancel::none;
    cancel.compare_exchange_strong(expected, why, std::memory_order_acq_rel);
  }
  std::atomic<Cancel> cancel{Cancel::none};
  std::atomic<bool> finished{false};  // the done handler returned (or will never run)
};

}  // namespace sessionturn::http
