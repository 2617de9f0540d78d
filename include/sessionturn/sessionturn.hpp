// The umbrella header: everything sessionturn offers to C++ callers. The local runtime (a test and
// single-machine tool) is separate: include "sessionturn/testing/local_runtime.hpp".
#pragma once

#include "sessionturn/connection.hpp"
#include "sessionturn/context.hpp"
#include "sessionturn/driver.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/kube.hpp"
#include "sessionturn/kube_exec.hpp"
#include "sessionturn/protocol.hpp"
#include "sessionturn/session_driver.hpp"
#include "sessionturn/sessions.hpp"
#include "sessionturn/turn.hpp"
#include "sessionturn/version.hpp"
