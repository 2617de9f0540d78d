// KubeClient: the facade. Calls and watches run on HttpClient (kube_rest.cpp, kube_watch.cpp); the
// blocking verbs run the same operations on the calling thread (a lane). A client without a Context
// owns a private one.
#include <future>
#include <thread>

#include "blocking.hpp"
#include "kube/kube_rest.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/kube.hpp"

namespace sessionturn {

using nlohmann::json;

namespace {
// How long the destructor of a client with its own Context lets the cancelled operations report.
constexpr std::chrono::seconds kDrainWait{5};
}  // namespace

struct KubeClient::Impl {
  std::unique_ptr<Context> own_context;  // when the caller gave none
  std::shared_ptr<kube::RestState> state;

  void Shutdown() {
    if (!state) return;
    state->Close();  // cancels the calls and watches, then the HTTP client goes
    Context& context = state->context;
    if (!context.InWorkerThread()) {
      // A credential refresh still running (an exec plugin, bounded by its timeout) will post its
      // answer to the Context: let it, before the Context can be destroyed.
      state->AwaitTokens(kExecPluginTimeout + std::chrono::seconds(5));
    }
    state.reset();
    if (own_context && !own_context->InWorkerThread()) {
      // Our own Context: let the cancelled operations report (a hop or two through its loop) before
      // it is stopped, after which nothing would run their handlers.
      auto drained = std::make_shared<std::promise<void>>();
      auto done = drained->get_future();
      own_context->Post([drained] { drained->set_value(); });
      done.wait_for(kDrainWait);
    }
    if (own_context && own_context->InWorkerThread()) {
      // Destroyed from one of its own handlers: a worker cannot join itself. Another thread joins it
      // once this handler returned; nothing of ours runs on it any more.
      std::thread([context = std::move(own_context)]() mutable { context.reset(); }).detach();
    }
    own_context.reset();
  }
};

namespace {

std::unique_ptr<KubeClient::Impl> MakeImpl(Context* context, KubeConfig config, KubeClientOptions options) {
  auto impl = std::make_unique<KubeClient::Impl>();
  if (context == nullptr) {
    impl->own_context = std::make_unique<Context>();
    context = impl->own_context.get();
  }
  options.context = context;
  impl->state = std::make_shared<kube::RestState>(*context, std::move(config), options);
  return impl;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

KubeClient::KubeClient(KubeConfig config, KubeClientOptions options)
    : impl_(MakeImpl(options.context, std::move(config), options)) {}

KubeClient::KubeClient(Context& context, KubeConfig config, KubeClientOptions options)
    : impl_(MakeImpl(&context, std::move(config), options)) {}

KubeClient::~KubeClient() {
  if (impl_) impl_->Shutdown();
}

KubeClient::KubeClient(KubeClient&&) noexcept = default;

KubeClient& KubeClient::operator=(KubeClient&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->Shutdown();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

const KubeConfig& KubeClient::Config() const noexcept { return impl_->state->config; }

Context& KubeClient::context() const noexcept { return impl_->state->context; }

namespace {

kube::CallSpec Spec(const kube::RestState& state, std::string method, std::string path, std::string body = {},
                    std::string content_type = {}) {
  kube::CallSpec spec;
  spec.method = std::move(method);
  spec.path = std::move(path);
  spec.body = std::move(body);
  spec.content_type = std::move(content_type);
  spec.deadline = std::chrono::steady_clock::now() + state.options.request_timeout;
  return spec;
}

const char* PatchContentType(PatchType type) {
  return type == PatchType::merge ? "application/merge-patch+json" : "application/json-patch+json";
}

}  // namespace

KubeCall KubeClient::AsyncGet(std::string path, KubeJsonHandler handler) {
  return kube::StartCall(impl_->state, Spec(*impl_->state, "GET", std::move(path)), std::move(handler));
}

KubeCall KubeClient::AsyncPost(std::string path, json body, KubeJsonHandler handler) {
  return kube::StartCall(impl_->state, Spec(*impl_->state, "POST", std::move(path), Dump(body), "application/json"),
                         std::move(handler));
}

KubeCall KubeClient::AsyncPatch(std::string path, json patch, PatchType type, KubeJsonHandler handler) {
  return kube::StartCall(impl_->state,
                         Spec(*impl_->state, "PATCH", std::move(path), Dump(patch), PatchContentType(type)),
                         std::move(handler));
}

KubeCall KubeClient::AsyncDelete(std::string path, KubeJsonHandler handler) {
  return kube::StartCall(impl_->state, Spec(*impl_->state, "DELETE", std::move(path)), std::move(handler));
}

KubeWatch KubeClient::AsyncWatch(std::string collection_path, KubeWatchOptions options, WatchHandler on_event,
                                 KubeStatusHandler on_end) {
  return kube::StartWatch(impl_->state, std::move(collection_path), std::move(options), std::move(on_event),
                          std::move(on_end));
}

// The blocking verbs run on this thread's lane (http/lanes.hpp): the call, its retries and its token
// are taken here, with no hand-off to a worker of the Context.
Result<json> KubeClient::Get(std::string_view path) {
  return kube::BlockingCall(impl_->state, Spec(*impl_->state, "GET", std::string(path)), "KubeClient::GET");
}

Result<json> KubeClient::Post(std::string_view path, const json& body) {
  return kube::BlockingCall(impl_->state, Spec(*impl_->state, "POST", std::string(path), Dump(body), "application/json"),
                            "KubeClient::POST");
}

Result<json> KubeClient::Patch(std::string_view path, const json& patch, PatchType type) {
  return kube::BlockingCall(impl_->state,
                            Spec(*impl_->state, "PATCH", std::string(path), Dump(patch), PatchContentType(type)),
                            "KubeClient::PATCH");
}

Result<json> KubeClient::Delete(std::string_view path) {
  return kube::BlockingCall(impl_->state, Spec(*impl_->state, "DELETE", std::string(path)), "KubeClient::DELETE");
}

Status KubeClient::Watch(std::string_view collection_path, const KubeWatchOptions& options, const WatchHandler& handler) {
  try {
    return kube::BlockingWatch(impl_->state, collection_path, options, handler);
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
