// Internals of the C ABI shared by its router and backend translation units. Not installed.
#pragma once

#include <memory>

#include "capi_internal.hpp"
#include "sessionturn/backend.hpp"
#include "sessionturn/render.hpp"

struct st_backend {
  st::Context* context = nullptr;
  std::unique_ptr<st::SessionBackend> backend;
};

namespace sessionturn::capi {

// ST_UNIT_* / ST_DIALECT_* as the C++ enums; Errc::invalid_argument naming `what` otherwise.
st::Result<st::LengthUnit> LengthUnitFrom(int unit, const char* what);
st::Result<st::MarkupDialect> MarkupDialectFrom(int dialect, const char* what);

}  // namespace sessionturn::capi
