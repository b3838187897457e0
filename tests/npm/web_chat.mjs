// Drives kvlm's chat page in headless Chromium over the DevTools protocol:
// types a message like a user (focus, insert text, mouse click on Send),
// waits for the streamed reply and its stats, optionally presses Stop during
// a long reply, answers the API-key prompt, and prints what it saw as JSON.
//
// node web_chat.mjs --url URL [--key KEY] [--message TEXT] [--follow-up TEXT]
//                   [--screenshot FILE.png] [--stop MAX_TOKENS]   (KVLM_WEB_TRACE=1: timings on stderr)
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import WebSocket from "ws";

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith("--")) acc.push([a.slice(2), all[i + 1] && !all[i + 1].startsWith("--") ? all[i + 1] : true]);
  return acc;
}, []));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const t0 = Date.now();
const trace = (what) => { if (process.env.KVLM_WEB_TRACE) console.error(`${Date.now() - t0} ms: ${what}`); };

// Starts Chromium on a free DevTools port and returns it with the port.
async function launch(profile) {
  const chrome = spawn("chromium", ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--no-first-run", "--no-default-browser-check", "--remote-debugging-port=0", `--user-data-dir=${profile}`,
    "--window-size=1280,800", "about:blank"], { stdio: ["ignore", "ignore", "pipe"], detached: true });
  // detached: its own process group, so its helper processes can be ended with it.
  let err = "";
  const port = await new Promise((resolve, reject) => {
    chrome.stderr.on("data", (d) => {
      err += d;
      const m = err.match(/DevTools listening on ws:\/\/127\.0\.0\.1:(\d+)\//);
      if (m) resolve(Number(m[1]));
    });
    chrome.on("exit", (code) => reject(new Error(`chromium exited (${code}): ${err}`)));
    setTimeout(() => reject(new Error("chromium did not start: " + err)), 20000);
  });
  return { chrome, port };
}

// A DevTools session over one page target: send() and waitEvent().
async function connect(port) {
  const targets = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
  const page = targets.find((t) => t.type === "page");
  const ws = new WebSocket(page.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => { ws.on("open", resolve); ws.on("error", reject); });
  let nextId = 1;
  const pending = new Map(), listeners = [];
  ws.on("message", (raw) => {
    const msg = JSON.parse(raw);
    if (msg.id && pending.has(msg.id)) {
      const { resolve, reject } = pending.get(msg.id);
      pending.delete(msg.id);
      msg.error ? reject(new Error(JSON.stringify(msg.error))) : resolve(msg.result);
    } else if (msg.method) {
      for (const l of listeners) l(msg);
    }
  });
  const send = (method, params = {}) => new Promise((resolve, reject) => {
    const id = nextId++;
    pending.set(id, { resolve, reject });
    ws.send(JSON.stringify({ id, method, params }));
  });
  const on = (fn) => listeners.push(fn);
  const waitEvent = (method) => new Promise((resolve) => on((m) => m.method === method && resolve(m.params)));
  return { ws, send, on, waitEvent };
}

async function evaluate(s, expression) {
  const r = await s.send("Runtime.evaluate", { expression, returnByValue: true, awaitPromise: true });
  if (r.exceptionDetails) throw new Error("page error: " + JSON.stringify(r.exceptionDetails));
  return r.result.value;
}

async function waitFor(s, expression, what, ms = 30000) {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(50)) {
    const v = await evaluate(s, expression);
    if (v) return v;
  }
  throw new Error("timed out waiting for " + what);
}

// A real click at the centre of an element.
async function click(s, selector) {
  const box = await evaluate(s, `(() => { const r = document.querySelector(${JSON.stringify(selector)}).getBoundingClientRect();
    return { x: r.x + r.width / 2, y: r.y + r.height / 2 }; })()`);
  for (const type of ["mousePressed", "mouseReleased"])
    await s.send("Input.dispatchMouseEvent", { type, x: box.x, y: box.y, button: "left", clickCount: 1 });
}

async function typeAndSend(s, text) {
  await evaluate(s, `document.getElementById("input").focus()`);
  await s.send("Input.insertText", { text });
  await click(s, "#send");
}

const lastReply = `document.querySelector("#messages .message.assistant:last-of-type")`;

// The first message and its reply (and a follow-up turn), with what the page shows.
async function exchange(s, out) {
  await typeAndSend(s, args.message);
  await waitFor(s, `${lastReply}?.dataset.done === "true"`, "the reply");
  trace("reply done");
  out.reply = await evaluate(s, `${lastReply}.querySelector(".text").textContent`);
  out.stats = await evaluate(s, `Object.assign({}, ${lastReply}.querySelector(".stats")?.dataset)`);
  out.stats_text = await evaluate(s, `${lastReply}.querySelector(".stats")?.textContent`);
  if (args["follow-up"]) {
    // The conversation goes on: its earlier turns come from the prefix cache.
    await typeAndSend(s, args["follow-up"]);
    await waitFor(s, `document.querySelectorAll("#messages .message.assistant").length === 2 &&
      ${lastReply}.dataset.done === "true"`, "the second reply");
    out.follow_up_stats = await evaluate(s, `Object.assign({}, ${lastReply}.querySelector(".stats")?.dataset)`);
    trace("second reply done");
  }
  out.messages = await evaluate(s, `document.querySelectorAll("#messages .message").length`);
  // The live panel, after its next poll (once a second). After a follow-up
  // the cache has hits, so wait until the panel shows them: a fixed sleep
  // raced the poll on a loaded machine.
  if (args["follow-up"]) {
    await waitFor(s, `!["–", "0.0 %"].includes(document.getElementById("st-hits").textContent)`,
      "the live panel's hit rate");
  } else {
    await sleep(1100);
  }
  out.panel = await evaluate(s, `({ running: document.getElementById("st-running").textContent,
    kv: document.getElementById("st-kv").textContent, hits: document.getElementById("st-hits").textContent })`);
  if (args.screenshot) {
    const shot = await s.send("Page.captureScreenshot", { format: "png" });
    writeFileSync(args.screenshot, Buffer.from(shot.data, "base64"));
  }
}

async function main() {
  const profile = mkdtempSync(join(tmpdir(), "kvlm-chromium-"));
  const { chrome, port } = await launch(profile);
  const out = { dialogs: [] };
  try {
    trace("chromium up");
    const s = await connect(port);
    await s.send("Page.enable");
    await s.send("Runtime.enable");
    // The API-key prompt: answer it and count how often it comes.
    s.on((m) => {
      if (m.method !== "Page.javascriptDialogOpening") return;
      out.dialogs.push(m.params.type);
      s.send("Page.handleJavaScriptDialog", { accept: true, promptText: args.key || "" });
    });
    const loaded = s.waitEvent("Page.loadEventFired");
    await s.send("Page.navigate", { url: args.url });
    await loaded;
    out.header = await waitFor(s, `document.getElementById("model").textContent.startsWith("model …") ? "" :
      [...document.querySelectorAll("header .pill")].map((e) => e.textContent).join(" | ")`, "the model name");
    trace("page up");
    await evaluate(s, `document.getElementById("max-tokens").value = "24"; document.getElementById("temperature").value = "0";
      document.getElementById("temperature-value").textContent = "0"`);
    if (args.message) await exchange(s, out);
    if (args.stop) {
      // A long reply, stopped once text streams: the page shows it stopped.
      await evaluate(s, `document.getElementById("max-tokens").value = "${args.stop}"`);
      await typeAndSend(s, "Tell me a very long story.");
      await waitFor(s, `${lastReply}?.querySelector(".text").textContent.length > 0`, "the long reply to start");
      if (process.env.KVLM_WEB_TRACE) trace("stop: " + JSON.stringify(await evaluate(s, `(() => { const b = document.getElementById("stop");
        const r = b.getBoundingClientRect(); const at = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
        return { disabled: b.disabled, at: at && at.id, len: document.querySelector("#messages .message.assistant:last-of-type .text").textContent.length }; })()`)));
      await click(s, "#stop");
      trace("clicked");
      await waitFor(s, `${lastReply}?.dataset.done === "true"`, "the stopped reply");
      out.stopped = await evaluate(s, `Object.assign({}, ${lastReply}.querySelector(".stats")?.dataset)`);
      trace("stopped");
    }
    // A reload keeps the key: no second prompt.
    const reloaded = s.waitEvent("Page.loadEventFired");
    await s.send("Page.reload");
    await reloaded;
    await waitFor(s, `!document.getElementById("model").textContent.startsWith("model …")`, "the model after reload");
    out.dialogs_after_reload = out.dialogs.length;
    trace("reloaded");
    s.ws.close();
  } finally {
    if (chrome.exitCode === null && chrome.signalCode === null) {
      const exited = new Promise((r) => chrome.once("exit", r));
      process.kill(-chrome.pid, "SIGKILL");  // the browser and its helpers (renderer, GPU, crashpad)
      await exited;
    }
    // A helper may still be writing its last file as it dies.
    rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  }
  // Exit once written: idle keep-alive sockets would hold the process open.
  process.stdout.write(JSON.stringify(out) + "\n", () => process.exit(0));
}

main().catch((e) => { console.error(e.stack || String(e)); process.exit(1); });
