// GET /: a chat page in plain HTML and JavaScript, no build step and no
// external resources. It keeps the conversation in the page, streams each
// answer from /v1/chat/completions (fetch + ReadableStream, server-sent
// events parsed by hand) and can stop a reply (AbortController; the server
// sees the closed connection and frees the slot). /?ask=TEXT sends TEXT as
// the first message on load.
#include "server/server.h"

namespace ptxlm::server {

const std::string& chat_page_html() {
    static const std::string page = R"PTXLM(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ptxlm chat</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0; display: flex; flex-direction: column; height: 100vh; }
  header { padding: 8px 12px; background: #223; color: #eee; display: flex; gap: 12px; align-items: center; flex-wrap: wrap; }
  header input { width: 5em; }
  header label { font-size: 13px; }
  #log { flex: 1; overflow-y: auto; padding: 12px; }
  .msg { white-space: pre-wrap; margin: 6px 0; padding: 8px 10px; border-radius: 6px; max-width: 80ch; }
  .user { background: #dde8ff; margin-left: auto; }
  .assistant { background: #f1f1f1; }
  .error { background: #fdd; }
  .stats { color: #666; font-size: 12px; margin: 0 0 8px 4px; }
  form { display: flex; gap: 8px; padding: 10px; border-top: 1px solid #ccc; }
  textarea { flex: 1; font: inherit; min-height: 3em; }
</style>
</head>
<body>
<header>
  <b>ptxlm</b> <span id="model">…</span>
  <label>system <input id="system" style="width: 16em" placeholder="(none)"></label>
  <label>temperature <input id="temp" type="number" min="0" max="2" step="0.1" value="0.7"></label>
  <label>max tokens <input id="max" type="number" min="1" value="256"></label>
  <label>API key <input id="key" type="password" style="width: 8em"></label>
  <button id="reset" type="button">new chat</button>
</header>
<div id="log"></div>
<form id="form">
  <textarea id="input" placeholder="Message (Enter sends, Shift+Enter for a new line)"></textarea>
  <button id="send" type="submit">Send</button>
</form>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let history = [];
let controller = null;

function headers() {
  const h = { "Content-Type": "application/json" };
  if ($("key").value) h["Authorization"] = "Bearer " + $("key").value;
  return h;
}

function add(cls, text) {
  const d = document.createElement("div");
  d.className = "msg " + cls;
  d.textContent = text;
  $("log").appendChild(d);
  $("log").scrollTop = $("log").scrollHeight;
  return d;
}

async function loadModel() {
  try {
    const r = await fetch("/v1/models");
    const j = await r.json();
    $("model").textContent = r.ok ? j.data[0].id + " (context " + j.data[0].context_length + ")" : j.error.message;
    if (!r.ok) setTimeout(loadModel, 1000);
  } catch (e) { $("model").textContent = String(e); }
}

async function send(text) {
  history.push({ role: "user", content: text });
  add("user", text);
  const out = add("assistant", "");
  const messages = ($("system").value ? [{ role: "system", content: $("system").value }] : []).concat(history);
  controller = new AbortController();
  $("send").textContent = "Stop";
  let answer = "";
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), signal: controller.signal,
      body: JSON.stringify({ messages, stream: true, stream_options: { include_usage: true },
                             temperature: Number($("temp").value), max_tokens: Number($("max").value) }),
    });
    if (!r.ok) throw new Error((await r.json()).error.message);
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buf = "", stats = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        if (!event.startsWith("data: ")) continue;
        const data = event.slice(6);
        if (data === "[DONE]") continue;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        const c = j.choices && j.choices[0];
        if (c && c.delta && c.delta.content) { answer += c.delta.content; out.textContent = answer; }
        if (j.timings) stats = j.timings.predicted_n + " tokens, " + j.timings.predicted_per_second.toFixed(1) + " tok/s";
        if (j.usage) stats += " · prompt " + j.usage.prompt_tokens + " (" + j.usage.prompt_tokens_details.cached_tokens + " cached)";
        $("log").scrollTop = $("log").scrollHeight;
      }
    }
    const s = document.createElement("div");
    s.className = "stats";
    s.textContent = stats;
    out.after(s);
  } catch (e) {
    if (e.name !== "AbortError") add("error", String(e.message || e));
  } finally {
    history.push({ role: "assistant", content: answer });
    controller = null;
    $("send").textContent = "Send";
  }
}

$("form").addEventListener("submit", (e) => {
  e.preventDefault();
  if (controller) { controller.abort(); return; }
  const text = $("input").value.trim();
  if (!text) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("form").requestSubmit(); }
});
$("reset").addEventListener("click", () => { history = []; $("log").textContent = ""; });
loadModel();
// /?ask=TEXT[&temp=T][&max=N] sends TEXT at once (a link that starts a chat;
// the headless-browser test uses it). The body's data-state says when the answer is complete.
const params = new URLSearchParams(location.search);
if (params.has("temp")) $("temp").value = params.get("temp");
if (params.has("max")) $("max").value = params.get("max");
if (params.get("ask")) send(params.get("ask")).then(() => { document.body.dataset.state = "answered"; });
</script>
</body>
</html>
)PTXLM";
    return page;
}

}  // namespace ptxlm::server
