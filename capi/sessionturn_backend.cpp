// The C ABI's Session backends (st_backend_*) and the router's pure helpers (st_session_name,
// st_render, st_split, st_parts_*). The firewall and the conventions are sessionturn_c.cpp's.
#include "sessionturn.h"

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "capi_internal.hpp"
#include "capi_router.hpp"
#include "sessionturn/backend.hpp"
#include "sessionturn/kube.hpp"
#include "sessionturn/render.hpp"
#include "sessionturn/routing.hpp"

using namespace sessionturn::capi;  // NOLINT: the firewall helpers

struct st_parts {
  std::vector<std::string> texts;
};

namespace {

// A duration option in ms: < 0 the default, 0 "never" (kept 0), otherwise itself, in seconds (rounded
// up: a positive value never becomes "never").
std::chrono::seconds SecondsOr(int64_t ms, std::chrono::seconds fallback) {
  if (ms < 0) return fallback;
  return std::chrono::seconds((ms + 999) / 1000);
}

st::Result<st::LengthUnit> UnitFrom(int unit, const char* what) {
  switch (unit) {
    case ST_UNIT_BYTES: return st::LengthUnit::bytes;
    case ST_UNIT_CODE_POINTS: return st::LengthUnit::code_points;
    case ST_UNIT_UTF16: return st::LengthUnit::utf16;
  }
  return st::Fail(InvalidArgument(std::string(what) + " is " + std::to_string(unit) + ", not one of ST_UNIT_*"));
}

st::Result<st::MarkupDialect> DialectFrom(int dialect, const char* what) {
  switch (dialect) {
    case ST_DIALECT_PLAIN: return st::MarkupDialect::plain;
    case ST_DIALECT_TELEGRAM_HTML: return st::MarkupDialect::telegram_html;
    case ST_DIALECT_SLACK_MRKDWN: return st::MarkupDialect::slack_mrkdwn;
  }
  return st::Fail(InvalidArgument(std::string(what) + " is " + std::to_string(dialect) + ", not one of ST_DIALECT_*"));
}

}  // namespace

st::Result<st::LengthUnit> sessionturn::capi::LengthUnitFrom(int unit, const char* what) { return UnitFrom(unit, what); }
st::Result<st::MarkupDialect> sessionturn::capi::MarkupDialectFrom(int dialect, const char* what) {
  return DialectFrom(dialect, what);
}

// ---- Backends -----------------------------------------------------------------------------------------

ST_API st_status st_backend_new_local(st_backend** out, st_context* context, const st_local_backend_options* options) {
  return GuardStatus("st_backend_new_local", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (!context) return st::Fail(InvalidArgument("context is NULL"));
    st::LocalBackendOptions o;
    o.state_dir = st::DefaultStateDir();
    if (options) {
      if (auto ok = CheckVersion(options->version, ST_LOCAL_BACKEND_OPTIONS_VERSION, "st_local_backend_options"); !ok)
        return ok;
      if (options->state_dir && *options->state_dir) o.state_dir = options->state_dir;
      if (options->provider && *options->provider) o.provider = options->provider;
      o.agent_bin = Str(options->agent_bin);
      o.suspend_after = SecondsOr(options->idle_suspend_ms, st::kDefaultSuspendAfter);
      o.delete_after = SecondsOr(options->delete_after_ms <= 0 ? 0 : options->delete_after_ms, std::chrono::seconds(0));
      o.owner = Str(options->owner);
      o.runtime_program = Str(options->runtime_program);
      o.in_process = options->in_process != 0;
      o.allow_shell = options->allow_shell != 0;
      o.start_timeout = OrDefault(options->start_timeout_ms, o.start_timeout);
    }
    auto made = st::MakeLocalBackend(*context->context, std::move(o));
    if (!made) return st::Fail(made.error());
    *out = new st_backend{context->context.get(), std::move(*made)};
    return {};
  });
}

ST_API st_status st_backend_new_kubernetes(st_backend** out, st_context* context,
                                           const st_kubernetes_backend_options* options) {
  return GuardStatus("st_backend_new_kubernetes", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (!context) return st::Fail(InvalidArgument("context is NULL"));
    st::KubeConfigOptions ko;
    st::KubernetesBackendOptions o;
    if (options) {
      if (auto ok = CheckVersion(options->version, ST_KUBERNETES_BACKEND_OPTIONS_VERSION,
                                 "st_kubernetes_backend_options");
          !ok)
        return ok;
      ko.kubeconfig = Str(options->kubeconfig);
      ko.context = Str(options->context);
      ko.namespace_name = Str(options->namespace_name);
      o.spawner = Str(options->spawner);
      o.template_file = Str(options->template_file);
      o.owner = Str(options->owner);
    }
    auto kube = st::KubeConfig::Load(ko);
    if (!kube) return st::Fail(kube.error());
    o.namespace_name = kube->Namespace();
    auto made = st::MakeKubernetesBackend(*context->context, std::move(*kube), std::move(o));
    if (!made) return st::Fail(made.error());
    *out = new st_backend{context->context.get(), std::move(*made)};
    return {};
  });
}

ST_API st_status st_backend_describe(char** out, const st_backend* backend) {
  return GuardStatus("st_backend_describe", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (!backend || !backend->backend) return st::Fail(InvalidArgument("backend is NULL"));
    *out = CopyString(backend->backend->Describe());
    return {};
  });
}

ST_API void st_backend_free(st_backend* backend) {
  Guard("st_backend_free", 0, [&] {
    delete backend;
    return 0;
  });
}

// ---- Helpers ------------------------------------------------------------------------------------------

ST_API st_status st_session_name(char** out, const char* prefix, const char* platform, const char* owner_uid,
                                 const char* chat, const char* thread) {
  return GuardStatus("st_session_name", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (!prefix) return st::Fail(InvalidArgument("prefix is NULL"));
    if (!platform || !*platform) return st::Fail(InvalidArgument("platform is NULL or empty"));
    if (!chat || !*chat) return st::Fail(InvalidArgument("chat is NULL or empty"));
    *out = CopyString(st::SessionName(prefix, platform, Str(owner_uid), chat, Str(thread)));
    return {};
  });
}

ST_API size_t st_parts_count(const st_parts* parts) {
  return Guard("st_parts_count", static_cast<size_t>(0), [&]() -> size_t {
    if (!parts) {
      Record(InvalidArgument("parts is NULL"));
      return 0;
    }
    return parts->texts.size();
  });
}

ST_API const char* st_parts_text(const st_parts* parts, size_t index) {
  return Guard("st_parts_text", static_cast<const char*>(nullptr), [&]() -> const char* {
    if (!parts) {
      Record(InvalidArgument("parts is NULL"));
      return nullptr;
    }
    if (index >= parts->texts.size()) {
      Record(InvalidArgument("index " + std::to_string(index) + " is out of range (" +
                             std::to_string(parts->texts.size()) + " parts)"));
      return nullptr;
    }
    return parts->texts[index].c_str();
  });
}

ST_API void st_parts_free(st_parts* parts) {
  Guard("st_parts_free", 0, [&] {
    delete parts;
    return 0;
  });
}

ST_API st_status st_render(st_parts** out, const char* markdown, const st_render_options* options) {
  return GuardStatus("st_render", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (!markdown) return st::Fail(InvalidArgument("markdown is NULL"));
    st::RenderOptions o;
    if (options) {
      if (auto ok = CheckVersion(options->version, ST_RENDER_OPTIONS_VERSION, "st_render_options"); !ok) return ok;
      auto dialect = DialectFrom(options->dialect, "st_render_options.dialect");
      if (!dialect) return st::Fail(dialect.error());
      auto unit = UnitFrom(options->unit, "st_render_options.unit");
      if (!unit) return st::Fail(unit.error());
      o.dialect = *dialect;
      o.unit = *unit;
      o.max_length = options->max_length;
      o.soft_length = options->soft_length;
      o.label_parts = options->label_parts != 0;
    }
    auto rendered = st::RenderReply(markdown, o);
    if (!rendered) return st::Fail(rendered.error());
    auto parts = std::make_unique<st_parts>();
    for (auto& p : *rendered) parts->texts.push_back(std::move(p.text));
    *out = parts.release();
    return {};
  });
}

ST_API st_status st_split(st_parts** out, const char* text, size_t limit, int unit, int label_parts) {
  return GuardStatus("st_split", [&]() -> st::Status {
    if (!out) return st::Fail(InvalidArgument("out is NULL"));
    *out = nullptr;
    if (!text) return st::Fail(InvalidArgument("text is NULL"));
    auto u = UnitFrom(unit, "unit");
    if (!u) return st::Fail(u.error());
    auto split = st::SplitText(text, limit, *u, label_parts != 0);
    if (!split) return st::Fail(split.error());
    *out = new st_parts{std::move(*split)};
    return {};
  });
}
