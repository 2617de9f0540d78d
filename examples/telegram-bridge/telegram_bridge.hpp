// The sessionturn-telegram program as a function: the same flags, environment, exit statuses and
// signals (SIGINT and SIGTERM are blocked in the calling thread and awaited there). main.cpp calls it;
// so does the Python package (`python -m sessionturn.telegram`). Call it once per process, from the main
// thread, before other threads start.
#pragma once

namespace sessionturn_bridge {

int TelegramMain(int argc, char** argv);

}  // namespace sessionturn_bridge
