// A small Slack bot that check_slack_clients.py runs against the Slack fake (tests/fakes/slack_api.py), built on
// Slack's own Node clients: @slack/socket-mode (SocketModeClient) for events and @slack/web-api (WebClient) for
// calls. It also serves the Events API over HTTP and checks every request's signature with @slack/bolt's exported
// verifySlackRequest (Bolt's own verifier, independent of the fake).
// FAKE_PORT, SLACK_APP_TOKEN, SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET come from the environment; secrets never go
// on a command line or into a log.
//
// It answers a user's message in its thread (users.info for the name, a Done button), handles the button
// (chat.update, conversations.replies), acks a slash command with a response payload, and ignores bot messages.
import http from "node:http";
import { SocketModeClient, LogLevel } from "@slack/socket-mode";
import { WebClient } from "@slack/web-api";
import bolt from "@slack/bolt";

const { verifySlackRequest } = bolt;
const port = process.env.FAKE_PORT;
const appToken = process.env.SLACK_APP_TOKEN;
const botToken = process.env.SLACK_BOT_TOKEN;
const signingSecret = process.env.SLACK_SIGNING_SECRET;
if (!port || !appToken || !botToken || !signingSecret) {
  console.error("bot.mjs needs FAKE_PORT, SLACK_APP_TOKEN, SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET");
  process.exit(2);
}
const slackApiUrl = `http://127.0.0.1:${port}/api/`;
const web = new WebClient(botToken, { slackApiUrl, logLevel: LogLevel.WARN });
const socket = new SocketModeClient({
  appToken,
  clientOptions: { slackApiUrl },
  logLevel: LogLevel.WARN,
  clientPingTimeout: 2000, // pings every 2/3 s; a reconnect waits 2 s
});

const log = (...args) => console.log(...args);

async function reply(event) {
  const info = await web.users.info({ user: event.user });
  const name = info.user.real_name;
  await web.chat.postMessage({
    channel: event.channel,
    thread_ts: event.thread_ts ?? event.ts,
    text: `Hi ${name}: ${event.text}`,
    blocks: [
      { type: "section", text: { type: "mrkdwn", text: `*Hi ${name}*: ${event.text}` } },
      {
        type: "actions",
        block_id: "done-block",
        elements: [
          { type: "button", action_id: "done", text: { type: "plain_text", text: "Done" }, value: `done:${event.ts}` },
        ],
      },
    ],
  });
  log(`replied to ${event.ts}`);
}

socket.on("message", async ({ ack, event, retry_num }) => {
  await ack();
  if (event.bot_id || event.subtype) {
    log(`ignored ${event.subtype ?? "bot message"} ${event.ts ?? ""}`);
    return;
  }
  log(`message ${event.ts} retry_num=${retry_num}`);
  try {
    await reply(event);
  } catch (e) {
    console.error(`reply failed: ${e.data?.error ?? e.message}`);
  }
});

socket.on("interactive", async ({ ack, body }) => {
  await ack();
  if (body.type !== "block_actions") return;
  const action = body.actions[0];
  const channel = body.container.channel_id;
  try {
    const text = `Done by <@${body.user.id}> (${action.value})`;
    await web.chat.update({ channel, ts: body.container.message_ts, text, blocks: [] });
    const thread = await web.conversations.replies({ channel, ts: body.container.thread_ts, limit: 100 });
    const count = `The thread has ${thread.messages.length} messages`;
    await web.chat.postMessage({ channel, thread_ts: body.container.thread_ts, text: count });
    log(`pressed ${action.action_id} by ${body.user.id}`);
  } catch (e) {
    console.error(`press failed: ${e.data?.error ?? e.message}`);
  }
});

socket.on("slash_commands", async ({ ack, body }) => {
  await ack({ text: `pong: ${body.text}` });
  log(`command ${body.command} ${body.text}`);
});

socket.on("connected", () => log("socket connected"));
socket.on("reconnecting", () => log("socket reconnecting"));

// The Events API over HTTP: each request verified with Bolt's verifySlackRequest.
const events = http.createServer((req, res) => {
  let raw = "";
  req.on("data", (chunk) => { raw += chunk; });
  req.on("end", () => {
    const retry = req.headers["x-slack-retry-num"];
    const stamp = req.headers["x-slack-request-timestamp"];
    let verified = true;
    let why = "";
    try {
      verifySlackRequest({
        signingSecret,
        body: raw,
        headers: {
          "x-slack-signature": req.headers["x-slack-signature"],
          "x-slack-request-timestamp": stamp === undefined ? undefined : Number(stamp),
        },
      });
    } catch (e) {
      verified = false;
      why = e.message;
    }
    let kind = "form";
    let body = {};
    if ((req.headers["content-type"] ?? "").startsWith("application/json")) {
      body = JSON.parse(raw);
      kind = body.type === "event_callback" ? `event:${body.event.type}` : body.type;
    }
    if (!verified) {
      log(`http 401 ${kind} retry=${retry ?? "-"} (${why})`);
      res.writeHead(401).end("invalid signature");
    } else if (body.type === "url_verification") {
      log("http 200 url_verification");
      res.writeHead(200, { "Content-Type": "text/plain" }).end(body.challenge);
    } else if (body.event?.text === "retry me" && retry === undefined) {
      log(`http 500 ${kind} retry=-`);
      res.writeHead(500).end("try again");
    } else {
      log(`http 200 ${kind} retry=${retry ?? "-"}`);
      res.writeHead(200).end();
    }
  });
});

const stop = async () => {
  events.close();
  await socket.disconnect();
  process.exit(0);
};
process.once("SIGTERM", stop);
process.once("SIGINT", stop);

const me = await web.auth.test();
log(`authenticated as ${me.user} (${me.user_id})`);
events.listen(0, "127.0.0.1", () => log(`EVENTS_PORT ${events.address().port}`));
await socket.start();
log("started");
