// The umbrella header: everything sessionturn offers to C++ callers.
#pragma once

#include "sessionturn/connection.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/protocol.hpp"
#include "sessionturn/version.hpp"
