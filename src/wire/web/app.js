// kvlm's chat page: streams replies from /v1/chat/completions (or
// /v1/completions for models without a chat template), shows each reply's
// token counts and speed from the usage chunk, and polls /v1/status.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORAGE = "kvlm.apiKey";
const state = { history: [], chat: true, controller: null, busy: false, keyRefused: false, polling: false };

// --- API key: asked for once, on the first 401, and kept in localStorage.
function apiKey() { return localStorage.getItem(KEY_STORAGE) || ""; }

function askForKey() {
  const key = window.prompt("This server needs an API key (sent as 'Authorization: Bearer KEY'):", apiKey());
  if (key === null) {
    state.keyRefused = true;  // no more prompts from the status poll; the header button asks again
    $("key-button").hidden = false;
    return false;
  }
  state.keyRefused = false;
  localStorage.setItem(KEY_STORAGE, key.trim());
  $("key-button").hidden = false;
  return true;
}

async function api(path, options = {}, retried = false) {
  const headers = Object.assign({ "Content-Type": "application/json" }, options.headers || {});
  const sentKey = apiKey();
  if (sentKey) headers.Authorization = "Bearer " + sentKey;
  const res = await fetch(path, Object.assign({}, options, { headers }));
  if (res.status !== 401 || retried) return res;
  // Requests that were in flight together all get a 401: only the first
  // asks, the others retry with the key it stored.
  if (apiKey() !== sentKey || (!state.keyRefused && askForKey())) return api(path, options, true);
  return res;
}

// --- The live panel.
async function refreshStatus() {
  if (state.polling) return;  // a slow server: one poll at a time
  state.polling = true;
  try {
    const res = await api("/v1/status");
    if (!res.ok) return;
    const s = await res.json();
    $("model").textContent = "model " + s.model;
    $("context").textContent = "context " + s.max_model_len + " tokens";
    setMode(s.chat_template);
    $("st-running").textContent = s.requests_running;
    $("st-waiting").textContent = s.requests_waiting;
    $("st-kv").textContent = `${s.kv_blocks_used} / ${s.kv_blocks_total}`;
    $("st-kv-bar").style.width = (s.kv_blocks_total ? 100 * s.kv_blocks_used / s.kv_blocks_total : 0) + "%";
    $("st-hits").textContent = (100 * s.prefix_cache_hit_rate).toFixed(1) + " %";
    $("st-note").textContent = s.draining ? "The server is shutting down." :
      `${s.requests_finished} requests served, ${s.generation_tokens_total} tokens generated.`;
  } catch (e) {
    $("st-note").textContent = "Server unreachable.";
  } finally {
    state.polling = false;
  }
}

function setMode(chat) {
  state.chat = chat;
  $("mode").textContent = chat ? "chat" : "completion (no chat template)";
  $("system-label").hidden = !chat;
  $("input").placeholder = chat ? "Type a message (Enter sends, Shift+Enter for a new line)"
                                : "Type the start of a text to continue";
}

// --- Messages.
function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "message " + role;
  const body = document.createElement("span");
  body.className = "text";
  body.textContent = text;
  div.appendChild(body);
  $("messages").appendChild(div);
  scrollToEnd();
  return div;
}

// Scrolls the message pane (not the page) to its end.
function scrollToEnd() { $("messages").scrollTop = $("messages").scrollHeight; }

function showStats(div, stats) {
  const span = document.createElement("span");
  span.className = "stats";
  for (const [k, v] of Object.entries(stats)) span.dataset[k] = v;
  const parts = [`prompt ${stats.promptTokens} tokens (${stats.cachedTokens} cached)`,
                 `${stats.completionTokens} generated`, `TTFT ${stats.ttftMs} ms`, `${stats.tokensPerS} tokens/s`];
  if (stats.stopped === "true") parts.push("stopped");
  span.textContent = parts.join(" · ");
  div.appendChild(span);
}

// Reads an SSE body, calling onEvent with each JSON payload until [DONE].
async function readEvents(res, onEvent) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        onEvent(JSON.parse(data));
      }
    }
  }
}

function requestBody(userText) {
  const body = {
    stream: true, stream_options: { include_usage: true },
    temperature: parseFloat($("temperature").value), top_p: parseFloat($("top-p").value),
    max_tokens: parseInt($("max-tokens").value, 10) || 256,
  };
  if (!state.chat) return Object.assign(body, { prompt: userText });
  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  return Object.assign(body, { messages: messages.concat(state.history, [{ role: "user", content: userText }]) });
}

async function send(userText) {
  setBusy(true);
  addMessage("user", userText);
  const reply = addMessage("assistant", "");
  const textEl = reply.querySelector(".text");
  if (!state.chat) {
    const echo = document.createElement("span");
    echo.className = "prompt-echo";
    echo.textContent = userText;
    reply.insertBefore(echo, textEl);
  }
  const start = performance.now();
  let first = 0, last = 0, text = "", usage = null, stopped = false;
  // Text reaches the page once per frame: a fast model sends hundreds of
  // chunks a second, and laying out each one would starve the page.
  let shown = 0, frame = 0;
  const render = () => {
    frame = 0;
    textEl.append(text.slice(shown));
    shown = text.length;
    scrollToEnd();
  };
  state.controller = new AbortController();
  try {
    const res = await api(state.chat ? "/v1/chat/completions" : "/v1/completions",
                          { method: "POST", body: JSON.stringify(requestBody(userText)), signal: state.controller.signal });
    if (!res.ok) {
      const err = await res.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || `HTTP ${res.status}`);
    }
    await readEvents(res, (chunk) => {
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) usage = chunk.usage;
      const c = chunk.choices && chunk.choices[0];
      const delta = c ? (state.chat ? c.delta && c.delta.content : c.text) : "";
      if (!delta) return;
      last = performance.now();
      if (!first) first = last;
      text += delta;
      if (!frame) frame = requestAnimationFrame(render);
    });
  } catch (e) {
    if (frame) cancelAnimationFrame(frame);
    render();
    if (e.name === "AbortError") {
      stopped = true;
    } else {
      reply.classList.add("error");
      textEl.textContent = text + (text ? "\n" : "") + "Error: " + e.message;
    }
  }
  if (frame) cancelAnimationFrame(frame);
  if (shown < text.length) render();
  if (state.chat && text) state.history.push({ role: "user", content: userText }, { role: "assistant", content: text });
  const generated = usage ? usage.completion_tokens : null;
  if (usage || stopped) {
    // Decode speed between the first and last token. A short reply arrives
    // in a few reads whose timing says little (tens of thousands of
    // tokens/s), so under 100 ms it is taken over the whole request instead.
    const n = generated === null ? 0 : generated;
    const decode = last - first >= 100;
    const decodeS = (decode ? last - first : last - start) / 1000;
    showStats(reply, {
      promptTokens: usage ? usage.prompt_tokens : "?",
      cachedTokens: usage && usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : 0,
      completionTokens: generated === null ? "?" : generated,
      ttftMs: first ? Math.round(first - start) : "?",
      tokensPerS: n > 1 && decodeS > 0 ? ((decode ? n - 1 : n) / decodeS).toFixed(1) : "?",
      stopped: String(stopped),
    });
  }
  reply.dataset.done = "true";
  setBusy(false);
  refreshStatus();
}

function setBusy(busy) {
  state.busy = busy;
  $("send").disabled = busy;
  $("stop").disabled = !busy;
  if (!busy) state.controller = null;
}

// --- Wiring.
$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("input").value;
  if (!text.trim() || state.busy) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    $("composer").requestSubmit();
  }
});
// Aborting the fetch closes the connection; the server cancels the request.
$("stop").addEventListener("click", () => state.controller && state.controller.abort());
$("clear").addEventListener("click", () => { state.history = []; $("messages").replaceChildren(); });
$("key-button").addEventListener("click", askForKey);
$("key-button").hidden = !apiKey();
for (const [input, out] of [["temperature", "temperature-value"], ["top-p", "top-p-value"]])
  $(input).addEventListener("input", () => { $(out).textContent = $(input).value; });

refreshStatus();
setInterval(refreshStatus, 1000);
