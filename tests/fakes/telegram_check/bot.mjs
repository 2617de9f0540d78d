// A small grammy bot that check_grammy.py runs against the Telegram fake (tests/fakes/telegram_api.py).
// FAKE_PORT and FAKE_TOKEN come from the environment (the token never goes on a command line or into a log).
// It replies to "/start", echoes other texts as HTML with a button, answers a button press and edits the message.
import { Bot, InlineKeyboard } from "grammy";

const port = process.env.FAKE_PORT;
const token = process.env.FAKE_TOKEN;
if (!port || !token) {
  console.error("bot.mjs needs FAKE_PORT and FAKE_TOKEN");
  process.exit(2);
}

const bot = new Bot(token, { client: { apiRoot: `http://127.0.0.1:${port}` } });

const escapeHtml = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

bot.command("start", (ctx) =>
  ctx.reply("Welcome! Send me some text.", { reply_parameters: { message_id: ctx.msg.message_id } }));

bot.on("message:text", (ctx) =>
  ctx.reply(`<b>Echo:</b> ${escapeHtml(ctx.msg.text)}`, {
    parse_mode: "HTML",
    reply_parameters: { message_id: ctx.msg.message_id },
    reply_markup: new InlineKeyboard().text("Done", `done:${ctx.msg.message_id}`),
  }));

bot.on("callback_query:data", async (ctx) => {
  await ctx.answerCallbackQuery({ text: "Marked as done" });
  await ctx.editMessageText(`<i>Done</i> (${escapeHtml(ctx.callbackQuery.data)})`, { parse_mode: "HTML" });
});

// grammy's errors name the method and the server's description, never the token.
bot.catch((err) => console.error(`handler error: ${err.error?.description ?? String(err.error)}`));

const stop = () => { bot.stop().then(() => process.exit(0)); };
process.once("SIGTERM", stop);
process.once("SIGINT", stop);

await bot.init(); // getMe
await bot.api.setMyCommands([
  { command: "start", description: "Start the bot" },
  { command: "help", description: "What the bot does" },
]);
console.log(`commands set for @${bot.botInfo.username}`);
await bot.start({
  allowed_updates: ["message", "callback_query"],
  onStart: (me) => console.log(`polling as @${me.username}`),
});
