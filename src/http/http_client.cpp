// HttpClient: the public face of the multi driver (http/multi.cpp), its handles and blocking form.
#include <algorithm>
#include <optional>

#include "blocking.hpp"
#include "blocking_loop.hpp"
#include "http/lanes.hpp"
#include "http/multi.hpp"
#include "http/transfer.hpp"
#include "sessionturn/http.hpp"

namespace sessionturn {

struct HttpClient::Impl {
  std::shared_ptr<http::Multi> multi;  // the asynchronous exchanges, on the Context
  std::shared_ptr<http::Lanes> lanes;  // the blocking ones, each on its caller's thread

  explicit Impl(std::shared_ptr<http::Multi> m)
      : multi(std::move(m)), lanes(std::make_shared<http::Lanes>(multi->context(), multi->options(), multi->tally())) {}

  void Close() {
    lanes->Close();
    multi->Close();
  }
};

// Weak on both sides: the client holds a transfer while it runs, and a handle kept by an object
// that the transfer's own handlers hold (a watch) must not keep the two alive in a cycle.
struct HttpCall::Impl {
  std::weak_ptr<http::Multi> multi;
  std::weak_ptr<http::Transfer> transfer;
};

void HttpCall::Cancel() {
  if (!impl_) return;
  auto transfer = impl_->transfer.lock();
  if (!transfer) return;  // reported and released
  if (auto multi = impl_->multi.lock()) {
    multi->Cancel(transfer);
  } else {
    transfer->SetCancel(http::Transfer::Cancel::by_caller);
  }
}

bool HttpCall::Active() const {
  if (!impl_) return false;
  auto transfer = impl_->transfer.lock();
  return transfer && !transfer->finished.load(std::memory_order_acquire);
}

std::string HttpResponse::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n.size() == name.size() &&
        std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) {
          auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
          return lower(a) == lower(b);
        })) {
      return v;
    }
  }
  return {};
}

HttpClient::HttpClient(Context& context, HttpClientOptions options)
    : impl_(std::make_shared<Impl>(std::make_shared<http::Multi>(context, std::move(options)))) {}

HttpClient::~HttpClient() {
  if (impl_) impl_->Close();
}

HttpClient::HttpClient(HttpClient&&) noexcept = default;

HttpClient& HttpClient::operator=(HttpClient&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->Close();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

Context& HttpClient::context() const noexcept { return impl_->multi->context(); }

namespace http {

HttpCall SubmitTo(const std::shared_ptr<Multi>& multi, HttpRequest request, HttpStreamHandlers handlers,
                  bool streaming) {
  auto transfer = std::make_shared<Transfer>(std::move(request), std::move(handlers), streaming);
  Context& context = multi->context();
  if (context.Stopped()) {
    // Nothing would run it: report here (blocking::ReportNow's convention) and hand back a finished handle.
    HttpHandler done = std::move(transfer->handlers.on_done);
    transfer->handlers = {};
    transfer->finished.store(true, std::memory_order_release);
    blocking::ReportNow(context, std::move(done),
                        Result<HttpResponse>(Fail(blocking::StoppedContextError(transfer->What()))));
    return HttpCall(std::make_shared<HttpCall::Impl>(HttpCall::Impl{multi, std::move(transfer)}));
  }
  multi->Submit(transfer);
  return HttpCall(std::make_shared<HttpCall::Impl>(HttpCall::Impl{multi, std::move(transfer)}));
}

}  // namespace http

HttpCall HttpClient::AsyncRequest(HttpRequest request, HttpHandler handler) {
  HttpStreamHandlers handlers;
  handlers.on_done = std::move(handler);
  return http::SubmitTo(impl_->multi, std::move(request), std::move(handlers), false);
}

HttpCall HttpClient::AsyncStream(HttpRequest request, HttpStreamHandlers handlers) {
  return http::SubmitTo(impl_->multi, std::move(request), std::move(handlers), true);
}

// On this thread's lane (http/lanes.hpp): the exchange runs here, with no hand-off to a worker.
Result<HttpResponse> HttpClient::Request(HttpRequest request) {
  const auto bound = request.timeout;
  const std::string target = request.method + " " + request.url;
  HttpCall call;
  std::optional<Error> cut;  // why RunOnLoop ended the exchange early (a stopped Context, its bound)
  auto result = http::RunOnLane<HttpResponse>(
      *impl_->lanes, context(), bound, "HttpClient::Request",
      [&] { return Error(Errc::cancelled, target + ": the HttpClient is being destroyed"); },
      [&](const std::shared_ptr<http::Lane>& lane, HttpHandler done) {
        HttpStreamHandlers handlers;
        handlers.on_done = std::move(done);
        call = http::SubmitTo(lane->multi, std::move(request), std::move(handlers), false);
      },
      [&](Error why) {
        cut = std::move(why);
        call.Cancel();
      });
  if (!result && cut && result.error().code == Errc::cancelled) return Fail(cut->code, target + ": " + cut->message);
  return result;
}

std::uint64_t HttpClient::ConnectionsOpened() const noexcept { return impl_->multi->ConnectionsOpened(); }

std::size_t HttpClient::InFlight() const noexcept { return impl_->multi->tally()->Count(); }

}  // namespace sessionturn
