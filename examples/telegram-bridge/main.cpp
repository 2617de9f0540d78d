// sessionturn-telegram: the program; everything is in telegram_bridge.cpp (TelegramMain).
#include "telegram_bridge.hpp"

int main(int argc, char** argv) { return sessionturn_bridge::TelegramMain(argc, argv); }
