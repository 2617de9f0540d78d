// sessionturn-slack: the program; everything is in slack_bridge.cpp (SlackMain).
#include "slack_bridge.hpp"

int main(int argc, char** argv) { return sessionturn_bridge::SlackMain(argc, argv); }
