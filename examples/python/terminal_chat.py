#!/usr/bin/python3
"""The terminal as a chat with a persistent Session: the smallest complete bot on the real Router.

Each line is a message; /new [NAME], /use NAME, /sessions, /status, /stop, /help are chat commands; a question of
the agent shows numbered options: answer with the number (or the label, or your own words). Ctrl-D ends it; the
conversation is still there next time.

    PYTHONPATH=build/python python3 examples/python/terminal_chat.py [--state-dir DIR] [--provider claude-code]
"""
import argparse
import asyncio
import getpass
import os
import sys
import time

import sessionturn

PROGRESS = "\u2699\ufe0f"  # how the router's live-progress edits start


class Terminal(sessionturn.ChatAdapter):
    """Posts and edits are printed; progress edits only when the line changes."""

    def __init__(self):
        self.count = 0
        self.last = {}

    def capabilities(self):
        return sessionturn.ChatCapabilities(max_length=4000, unit="code_points", command_prefix="/",
                                            edit_interval=0.5)

    async def post(self, where, message):
        self.count += 1
        self.show(str(self.count), message.text)
        return str(self.count)

    async def edit(self, where, message_id, message):
        self.show(message_id, message.text)

    def show(self, message_id, text):
        if self.last.get(message_id) == text:
            return
        self.last[message_id] = text
        first_line = text.splitlines()[0] if text else ""
        print(("  " + first_line) if text.startswith(PROGRESS) else ("bot> " + text), flush=True)


async def chat(args):
    user = getpass.getuser()
    backend = sessionturn.LocalBackend(os.path.join(args.state_dir, "sessions"), provider=args.provider,
                                       agent_bin=args.agent_bin, in_process=True)
    async with sessionturn.Router(backend, Terminal(), owner_uid=user, progress_interval=0.5,
                                  store_path=os.path.join(args.state_dir, "router.db")) as router:
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            if line.strip():
                await router.handle_message_async(sessionturn.InboundMessage(
                    platform="terminal", chat="tty", message_id=str(time.time_ns()), text=line.rstrip("\n"),
                    author_id=user, author_name=user, is_private_chat=True))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", default=os.path.expanduser("~/.local/state/sessionturn-terminal"))
    parser.add_argument("--provider", default="echo", help="echo, claude-code[:...], command:CMD, script:FILE")
    parser.add_argument("--agent-bin", default="", help="the claude binary (default: claude on PATH)")
    asyncio.run(chat(parser.parse_args()))
