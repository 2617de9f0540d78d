// The C ABI's watches (st_driver_watch) and the in-process local runtime for tests
// (st_local_runtime_*). The firewall and the conventions are sessionturn_c.cpp's.
#include "sessionturn.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "capi_internal.hpp"
#include "capi_views.hpp"
#include "sessionturn/driver.hpp"
#include "sessionturn/testing/local_runtime.hpp"

using namespace sessionturn::capi;  // NOLINT: the firewall helpers

struct st_local_runtime {
  std::unique_ptr<st::testing::LocalRuntime> runtime;
  std::string socket_path;
};

// ---- Watch ------------------------------------------------------------------------------------------------------

namespace {

// Lets st_watch_free guarantee that no callback runs after it returns: callbacks run under the gate's
// lock, Close() takes it. A callback that frees its own watch already holds the lock (same thread).
struct CallbackGate {
  std::mutex mutex;
  bool open = true;
  std::atomic<std::thread::id> inside{};

  template <typename Fn>
  void Run(Fn&& fn) {
    std::lock_guard lock(mutex);
    if (!open) return;
    inside.store(std::this_thread::get_id());
    fn();
    inside.store(std::thread::id{});
  }

  void Close() {
    if (inside.load() == std::this_thread::get_id()) {
      open = false;
      return;
    }
    std::lock_guard lock(mutex);
    open = false;
  }
};

}  // namespace

struct st_watch {
  st::Context* context = nullptr;
  st::WatchHandle handle;
  std::shared_ptr<CallbackGate> gate;
};

ST_API st_status st_driver_watch(st_watch** out, st_driver* driver, const st_watch_options* options,
                                 st_event_fn on_event, st_watch_end_fn on_end, void* payload) {
  return GuardStatus("st_driver_watch", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (auto ok = CheckDriver(driver); !ok) return ok;
    if (!on_event) return st::Fail(InvalidArgument("on_event is NULL"));
    st::WatchOptions opts;
    if (options) {
      if (auto ok = CheckVersion(options->version, ST_WATCH_OPTIONS_VERSION, "st_watch_options"); !ok) return ok;
      if (options->since < 0) return st::Fail(InvalidArgument("st_watch_options.since must be >= 0"));
      opts.since = options->since;
      if (options->journal_id) opts.journal_id = options->journal_id;
      opts.reconnect.enabled = options->reconnect != 0;
      opts.history_bounds = options->history_bounds != 0;
      opts.history_items = options->history_items;
      opts.history_bytes = options->history_bytes;
    }
    auto handle = std::make_unique<st_watch>();
    handle->context = driver->context;
    handle->gate = std::make_shared<CallbackGate>();
    auto gate = handle->gate;
    st::Context* context = driver->context;
    auto on_ev = [gate, on_event, payload, context](const st::Event& e) {
      gate->Run([&] {
        CallUser(context, "watch on_event", [&] {
          EventView view(e);
          on_event(&view.view, payload);
        });
      });
    };
    st::WatchEndHandler end;
    if (on_end) {
      end = [gate, on_end, payload, context](st::Status status) {
        gate->Run([&] {
          CallUser(context, "watch on_end", [&] {
            if (status) {
              on_end(ST_OK, "", payload);
            } else {
              const st_status code = ToStatus(status.error().code);
              on_end(code == ST_OK ? ST_E_INTERNAL : code, status.error().message.c_str(), payload);
            }
          });
        });
      };
    }
    handle->handle = driver->driver->Watch(std::move(opts), std::move(on_ev), std::move(end));
    *out = handle.release();
    return {};
  });
}

ST_API st_status st_watch_stop(st_watch* watch) {
  return GuardStatus("st_watch_stop", [&]() -> st::Status {
    if (!watch) return st::Fail(InvalidArgument("watch is NULL"));
    if (watch->context && watch->context->InWorkerThread()) {
      return st::Fail(st::Errc::would_block, "st_watch_stop was called from a callback (a Context worker thread)");
    }
    watch->handle.Stop();
    return {};
  });
}

ST_API int st_watch_active(const st_watch* watch) {
  return Guard("st_watch_active", static_cast<int>(ST_E_INTERNAL), [&]() -> int {
    if (!watch) return Record(InvalidArgument("watch is NULL"));
    return watch->handle.Active() ? 1 : 0;
  });
}

ST_API int64_t st_watch_last_event_id(const st_watch* watch) {
  return Guard("st_watch_last_event_id", static_cast<int64_t>(ST_E_INTERNAL), [&]() -> int64_t {
    if (!watch) return Record(InvalidArgument("watch is NULL"));
    return watch->handle.last_event_id();
  });
}

ST_API st_status st_watch_journal_id(char** out, const st_watch* watch) {
  return GuardStatus("st_watch_journal_id", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (!watch) return st::Fail(InvalidArgument("watch is NULL"));
    *out = CopyString(watch->handle.journal_id());
    return {};
  });
}

ST_API void st_watch_free(st_watch* watch) {
  Guard("st_watch_free", 0, [&] {
    if (!watch) return 0;
    watch->handle.Stop();
    watch->gate->Close();
    delete watch;
    return 0;
  });
}

// ---- Local runtime -----------------------------------------------------------------------------------------

ST_API st_status st_local_runtime_start(st_local_runtime** out, const st_local_runtime_options* options) {
  return GuardStatus("st_local_runtime_start", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (!options) return st::Fail(InvalidArgument("options is NULL (socket_path is required)"));
    if (auto ok = CheckVersion(options->version, ST_LOCAL_RUNTIME_OPTIONS_VERSION, "st_local_runtime_options"); !ok) {
      return ok;
    }
    if (!options->socket_path || !*options->socket_path) {
      return st::Fail(InvalidArgument("st_local_runtime_options.socket_path is NULL or empty"));
    }
    st::testing::LocalRuntimeOptions opts;
    opts.socket_path = options->socket_path;
    if (options->state_dir) opts.state_dir = options->state_dir;
    if (options->provider) opts.provider = options->provider;
    opts.allow_shell = options->allow_shell != 0;
    if (options->session_name) opts.session_name = options->session_name;
    if (options->echo_delay_ms >= 0) opts.echo_delay = std::chrono::milliseconds(options->echo_delay_ms);
    auto runtime = st::testing::LocalRuntime::Start(std::move(opts));
    if (!runtime) return st::Fail(runtime.error());
    auto handle = std::make_unique<st_local_runtime>();
    handle->socket_path = (*runtime)->socket_path();
    handle->runtime = std::move(*runtime);
    *out = handle.release();
    return {};
  });
}

ST_API const char* st_local_runtime_socket_path(const st_local_runtime* runtime) {
  return Guard("st_local_runtime_socket_path", static_cast<const char*>(nullptr), [&]() -> const char* {
    if (!runtime) {
      Record(InvalidArgument("runtime is NULL"));
      return nullptr;
    }
    return runtime->socket_path.c_str();
  });
}

ST_API st_status st_local_runtime_journal_id(char** out, const st_local_runtime* runtime) {
  return GuardStatus("st_local_runtime_journal_id", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (!runtime) return st::Fail(InvalidArgument("runtime is NULL"));
    *out = CopyString(runtime->runtime->journal_id());
    return {};
  });
}

ST_API int64_t st_local_runtime_last_event_id(const st_local_runtime* runtime) {
  return Guard("st_local_runtime_last_event_id", static_cast<int64_t>(ST_E_INTERNAL), [&]() -> int64_t {
    if (!runtime) return Record(InvalidArgument("runtime is NULL"));
    return runtime->runtime->last_event_id();
  });
}

ST_API st_status st_local_runtime_stop(st_local_runtime* runtime) {
  return GuardStatus("st_local_runtime_stop", [&]() -> st::Status {
    if (!runtime) return st::Fail(InvalidArgument("runtime is NULL"));
    runtime->runtime->Stop();
    return {};
  });
}

ST_API void st_local_runtime_free(st_local_runtime* runtime) {
  Guard("st_local_runtime_free", 0, [&] {
    delete runtime;
    return 0;
  });
}
