// The sessionturn-slack program as a function: the same flags, environment, exit statuses and
// signals (SIGINT and SIGTERM are blocked in the calling thread and awaited there). main.cpp calls it;
// so does the Python package (`python -m sessionturn.slack`). Call it once per process, from the main
// thread, before other threads start.
#pragma once

namespace sessionturn_bridge {

int SlackMain(int argc, char** argv);

}  // namespace sessionturn_bridge
