#!/usr/bin/python3
"""A bot for a chat platform sessionturn does not ship: how an existing bot's platform library plugs into the Router.

"Webhook platform" below stands for that library: an in-process fake with what such libraries have (a client to
send and edit messages, deliveries that must be acknowledged, a user replying to a bot message). The bot is the
~40 lines after it: a ChatAdapter over the client, and a loop that hands each delivery to the Router and
acknowledges it once the Router has it. Run it to watch a short scripted conversation:

    PYTHONPATH=build/python python3 examples/python/custom_platform_bot.py [--state-dir DIR] [--provider SPEC]
"""
import argparse
import asyncio
import itertools
import os
import tempfile

import sessionturn as st


# ---- the platform's own library (a fake) -------------------------------------------------------------------------

class WebhookPlatform:
    """Rooms with messages; deliveries come as dicts on a queue and are acknowledged by id."""

    def __init__(self):
        self.ids = itertools.count(1)
        self.messages = {}  # id -> (room, author, text)
        self.deliveries: asyncio.Queue = asyncio.Queue()
        self.unacknowledged = set()
        self.changed = asyncio.Event()

    async def send(self, room, text, reply_to=None, author="bot"):
        mid = "msg-%d" % next(self.ids)
        self.messages[mid] = (room, author, text)
        if author != "bot":
            self.unacknowledged.add(mid)
            await self.deliveries.put({"id": mid, "room": room, "user": author, "text": text, "reply_to": reply_to})
        self.changed.set()
        return mid

    async def edit(self, mid, text):
        room, author, _ = self.messages[mid]
        self.messages[mid] = (room, author, text)
        self.changed.set()

    def ack(self, delivery_id):
        self.unacknowledged.discard(delivery_id)

    async def wait_for_bot_text(self, needle):
        while not any(a == "bot" and needle in t and not t.startswith("\u2699") for _, a, t in self.messages.values()):
            self.changed.clear()
            await self.changed.wait()


# ---- the bot -------------------------------------------------------------------------------------------------------

class WebhookAdapter(st.ChatAdapter):
    def __init__(self, client: WebhookPlatform):
        self.client = client

    def capabilities(self):
        return st.ChatCapabilities(max_length=2000, unit="code_points", command_prefix="/", edit_interval=0.2)

    async def post(self, where, message):
        return await self.client.send(where.chat, message.text, reply_to=message.reply_to or None)

    async def edit(self, where, message_id, message):
        if message_id not in self.client.messages:
            raise st.PlatformError("no message " + message_id, code="not_found")
        await self.client.edit(message_id, message.text)


async def serve(client: WebhookPlatform, router: st.Router):
    while True:
        d = await client.deliveries.get()
        await router.handle_message_async(st.InboundMessage(
            platform="webhook", chat=d["room"], message_id=d["id"], event_id=d["id"], text=d["text"],
            reply_to_message_id=d["reply_to"] or "", author_id=d["user"], author_name=d["user"], is_private_chat=True))
        client.ack(d["id"])  # only now: the router has stored it


async def main(args):
    client = WebhookPlatform()
    backend = st.LocalBackend(os.path.join(args.state_dir, "sessions"), provider=args.provider, in_process=True)
    async with st.Router(backend, WebhookAdapter(client), owner_uid="webhook-bot",
                         store_path=os.path.join(args.state_dir, "router.db"), progress_interval=0.2) as router:
        server = asyncio.create_task(serve(client, router))
        await client.send("room-1", "hello, remember the word 'lighthouse'", author="ada")
        await client.wait_for_bot_text("lighthouse")
        await client.send("room-1", "/new side", author="ada")
        await client.send("room-1", "a question for the second session", author="ada")
        await client.wait_for_bot_text("second session")
        bot_reply = next(m for m, (_, a, t) in client.messages.items() if a == "bot" and "lighthouse" in t)
        await client.send("room-1", "back to the first one", reply_to=bot_reply, author="ada")
        await client.wait_for_bot_text("back to the first one")
        server.cancel()
    for mid, (room, author, text) in client.messages.items():
        print("%-7s %-4s %s" % (mid, author, text.replace("\n", " | ")))
    print("unacknowledged deliveries:", len(client.unacknowledged))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", default="")
    parser.add_argument("--provider", default="echo")
    args = parser.parse_args()
    if args.state_dir:
        asyncio.run(main(args))
    else:
        with tempfile.TemporaryDirectory(prefix="webhook-bot-") as d:
            args.state_dir = d
            asyncio.run(main(args))
