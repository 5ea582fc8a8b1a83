// context-assembler preview: picks a request, sends it with the settings to
// POST /api/assemble and draws the answer. Every text from the server is set
// with textContent, never parsed as HTML.
"use strict";

/** Milliseconds the slider must rest before a request is sent. */
const DEBOUNCE_MS = 60;

const $ = (id) => document.getElementById(id);
const state = {
  // {source: "example:NAME"} or {request: "pasted text"}
  current: null,
  overrides: {},
  // Answers to older requests than the last one shown are dropped, and so
  // are answers for an earlier load (another request picked since).
  sent: 0,
  shown: 0,
  loaded: 0,
  timer: 0,
  rangeSet: false,
  // The fingerprint of the last answer drawn (base64, no content): sent as
  // previousFingerprint when "Compare with the previous assembly" is on.
  previous: null,
};

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = String(text);
  return e;
}

/** A non-2xx answer: the server's error body and the HTTP status. */
class ApiFailure extends Error {
  constructor(error, status) {
    super(error.message);
    this.error = error;
    this.status = status;
  }
}

/** The error of a non-JSON answer body. */
function notJson(status, text) {
  return { code: `HTTP_${status}`, message: text.slice(0, 500), details: {} };
}

/** The JSON of a GET; a non-2xx answer throws an ApiFailure with its body. */
async function getJson(path) {
  const r = await fetch(path);
  const text = await r.text();
  let body = null;
  try {
    body = JSON.parse(text);
  } catch (_) {
    body = null;
  }
  if (!r.ok || body === null) {
    throw new ApiFailure(body && body.error ? body.error : notJson(r.status, text), r.status);
  }
  return body;
}

async function init() {
  try {
    const [models, examples] = await Promise.all([getJson("/api/models"), getJson("/api/examples")]);
    const model = $("model");
    model.append(new Option("(the request's model)", ""));
    for (const m of models.models) {
      const how = [m.tokenizer, m.exact ? "exact" : "estimated", m.chatTemplate ? "chat template" : null, m.contextWindow]
        .filter((x) => x !== null)
        .join(", ");
      model.append(new Option(`${m.name}${m.prefix ? "-*" : ""} (${how})`, m.name));
    }
    const policy = $("policy");
    policy.append(new Option("(the request's policy)", ""));
    for (const p of models.policies) policy.append(new Option(p, p));
    const source = $("source");
    for (const x of examples.examples) source.append(new Option(x.title, x.source));
    source.append(new Option("(pasted or opened)", "pasted"));
    source.addEventListener("change", () => {
      if (source.value === "pasted") {
        $("paste-box").open = true;
        return;
      }
      load({ source: source.value });
    });
    $("paste-go").addEventListener("click", () => {
      source.value = "pasted";
      load({ request: $("paste").value });
    });
    $("open-file").addEventListener("change", (ev) => {
      const file = ev.target.files[0];
      if (!file) return;
      file.text().then((text) => {
        $("paste").value = text;
        $("paste-box").open = true;
        source.value = "pasted";
        load({ request: text });
      });
    });
    $("budget").addEventListener("input", () => {
      $("budget-value").textContent = `${Number($("budget").value).toLocaleString()} tokens`;
      state.overrides.maxInputTokens = Number($("budget").value);
      schedule();
    });
    $("reserve").addEventListener("input", () => {
      const v = $("reserve").value;
      if (v === "") delete state.overrides.outputReserve;
      else state.overrides.outputReserve = Number(v);
      schedule();
    });
    model.addEventListener("change", () => {
      if (model.value) state.overrides.model = model.value;
      else delete state.overrides.model;
      state.rangeSet = false;
      schedule();
    });
    policy.addEventListener("change", () => {
      if (policy.value) state.overrides.policy = policy.value;
      else delete state.overrides.policy;
      schedule();
    });
    // Compares the next assembly with the one shown: nothing is sent now.
    $("compare").addEventListener("change", () => drawDivergence(null, false, null));
    // The FILE.json of the command line if given, else the first example.
    const initial = examples.examples.find((x) => x.source === "file") || examples.examples[0];
    if (initial) {
      source.value = initial.source;
      load({ source: initial.source });
    }
  } catch (e) {
    if (e instanceof ApiFailure) showError(e.error, e.status);
    else showError({ code: "UNREACHABLE", message: `cannot reach the preview server: ${e}`, details: {} });
  }
}

/** A new request: settings back to the request's own. */
function load(current) {
  clearTimeout(state.timer);
  state.current = current;
  // The first request of this load; answers to earlier ones are dropped.
  state.loaded = state.sent + 1;
  state.overrides = {};
  state.rangeSet = false;
  $("reserve").value = "";
  $("model").value = "";
  $("policy").value = "";
  send();
}

function schedule() {
  clearTimeout(state.timer);
  state.timer = setTimeout(send, DEBOUNCE_MS);
}

async function send() {
  if (!state.current) return;
  const seq = ++state.sent;
  const body = Object.assign({}, state.current, state.overrides);
  // Whether this answer is compared with an earlier one: only the one drawn
  // when it was sent.
  const compared = $("compare").checked && state.previous !== null;
  if (compared) body.previousFingerprint = state.previous;
  document.body.dataset.busy = "1";
  let status = 0;
  let answer;
  try {
    const r = await fetch("/api/assemble", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    status = r.status;
    const text = await r.text();
    try {
      answer = JSON.parse(text);
    } catch (_) {
      answer = { error: notJson(status, text) };
    }
  } catch (e) {
    answer = { error: { code: "UNREACHABLE", message: `cannot reach the preview server: ${e}`, details: {} } };
  }
  // Never the last one sent (a load sends at once), so busy stays set.
  if (seq < state.shown || seq < state.loaded) return;
  state.shown = seq;
  if (seq === state.sent) delete document.body.dataset.busy;
  if (answer.error) {
    showError(answer.error, status);
  } else {
    hideError();
    draw(answer.response, answer.view, compared);
    state.previous = answer.view.fingerprint || null;
  }
  document.body.dataset.seq = String(seq);
}

/** The panels dimmed while an error is shown. */
const PANELS = ["summary", "blocks", "messages", "warnings", "report", "cache", "plan-summary", "plan", "plan-fields", "divergence"];

function showError(error, status) {
  const box = $("error");
  box.replaceChildren();
  box.append(el("h2", "", `${error.code}${status ? ` (HTTP ${status})` : ""}`));
  box.append(el("div", "error-message", error.message));
  const details = error.details || {};
  const json = el("pre", "", JSON.stringify(details, null, 2));
  if (error.code === "BUDGET_OVERFLOW" && details.nonCuttableTokens !== undefined) {
    // Drawn; the same facts as JSON a click away.
    box.append(drawOverflow(details));
    const more = el("details", "error-json");
    more.append(el("summary", "", "as JSON"), json);
    box.append(more);
  } else if (Object.keys(details).length > 0) {
    box.append(json);
  }
  box.hidden = false;
  for (const id of PANELS) $(id).classList.add("stale");
}

/**
 * What each part that may never be cut needs of the budget it overflowed,
 * drawn as one bar against the budget and a table, largest first: the
 * parts add up to the overflow's non-cuttable tokens.
 */
function drawOverflow(d) {
  const box = el("div", "overflow");
  const need = Number(d.nonCuttableTokens || 0);
  const budget = Number(d.budget || 0);
  box.append(
    el(
      "p",
      "overflow-sum",
      `${need} tokens may never be cut; the budget is ${budget} (${need - budget} over). ` +
        "Lower these parts, raise max_input_tokens or lower output_reserve, or let a block be cut:",
    ),
  );
  const parts = [
    ["static-prefix", "static prefix", d.staticPrefixTokens],
    ["tools", "tool definitions", d.toolsTokens],
    ["query", "query", d.queryTokens],
    ["framing", "reply priming", d.framingTokens],
    ["template", "chat template", d.templateTokens],
  ]
    .map(([part, label, tokens]) => ({ part, label, tokens: Number(tokens || 0), note: "" }))
    .concat(
      (d.blocks || []).map((b) => ({
        part: `block-${b.index}`,
        label: `block ${b.name} (${b.kind})`,
        tokens: Number(b.tokens || 0),
        note: b.cuttable ? "its pinned items" : "the whole block: its priority never cuts",
      })),
    )
    .filter((p) => p.tokens > 0)
    .sort((a, b) => b.tokens - a.tokens);
  const scale = Math.max(1, need, budget);
  const bar = el("div", "overflow-bar");
  parts.forEach((p, i) => {
    const s = el("span", `part p${i % 6}`);
    s.style.width = `${(100 * p.tokens) / scale}%`;
    s.title = `${p.label}: ${p.tokens} tokens`;
    bar.append(s);
  });
  const line = el("i", "budget-line");
  line.style.left = `${(100 * budget) / scale}%`;
  line.title = `budget ${budget}`;
  bar.append(line);
  box.append(bar);
  const table = el("table", "overflow-parts");
  const head = el("tr");
  head.append(el("th", "", "part"), el("th", "", "tokens"), el("th", "", "share"), el("th", "", ""));
  table.append(head);
  parts.forEach((p, i) => {
    const tr = el("tr");
    tr.dataset.part = p.part;
    tr.dataset.tokens = p.tokens;
    const name = el("td");
    name.append(el("i", `swatch p${i % 6}`), p.label);
    tr.append(name, el("td", "num", p.tokens), el("td", "num", `${Math.round((100 * p.tokens) / Math.max(1, need))}%`));
    tr.append(el("td", "note", p.note));
    table.append(tr);
  });
  box.append(table);
  return box;
}

function hideError() {
  $("error").hidden = true;
  for (const id of PANELS) $(id).classList.remove("stale");
}

function draw(resp, view, compared) {
  const usage = resp.usage || {};
  const n = (v) => Number(v || 0);
  const offered = view.blocks.reduce((s, b) => s + n(b.offeredTokens), 0);
  if (!state.rangeSet) {
    // The slider spans what the model can take, up to a little over
    // everything offered, so that its useful range is most of its width.
    const room = n(usage.contextWindow) - n(usage.outputReserve);
    const want = Math.ceil(Math.max(n(usage.budget), n(usage.staticTokens) + offered) * 1.25);
    $("budget").max = String(Math.max(1, Math.min(room > 0 ? room : want, want)));
    $("budget").value = String(n(usage.budget));
    $("budget-value").textContent = `${n(usage.budget).toLocaleString()} tokens`;
    state.rangeSet = true;
  }
  const summary = $("summary");
  summary.replaceChildren();
  const part = (label, value) => {
    const s = el("span", "", `${label} `);
    s.append(el("b", "", value));
    summary.append(s, " \u00b7 ");
  };
  part("model", `${resp.model} (${usage.tokenizer}${usage.exact ? "" : ", estimated"})`);
  part("prompt", `${n(usage.totalTokens).toLocaleString()} / ${n(usage.budget).toLocaleString()} tokens`);
  part("cacheable", `${(view.cacheableShare * 100).toFixed(1)}%`);
  part("assembled in", `${(view.assembleMicros / 1000).toFixed(1)} ms`);
  drawBlocks(view.blocks);
  drawWarnings(view.warnings);
  drawMessages(resp, view);
  drawReport(resp.decisions || []);
  drawPlan(view.cachePlan);
  drawDivergence(view.divergence, compared, view.fingerprint);
}

/** What a chip's outcome means, where its name alone does not say. */
const OUTCOME_TITLES = {
  cleared: "kept, its tool result cleared (a placeholder or its compact form sent)",
  "thinking-dropped": "kept without its thinking (a closed tool cycle)",
  generated: "a turn summary the assembler wrote",
  unused: "not a candidate (empty)",
};

function drawBlocks(blocks) {
  const root = $("blocks");
  root.replaceChildren();
  const widest = Math.max(1, ...blocks.map((b) => Number(b.offeredTokens || 0)));
  for (const b of blocks) {
    const box = el("div", "block");
    box.id = `block-${b.index}`;
    box.dataset.block = b.name;
    const head = el("div", "block-head");
    const name = el("span");
    name.append(el("b", "", b.name), ` ${b.kind} \u00b7 priority ${b.priority} \u00b7 ${b.outcome}`);
    const nums = el(
      "span",
      "nums",
      `offered ${b.offeredIsLowerBound ? "\u2265" : ""}${b.offeredTokens} \u00b7 kept ${b.keptTokens}` +
        ` (compacted ${b.compactedTokens}) \u00b7 dropped ${b.offeredIsLowerBound ? "\u2265" : ""}${b.cutTokens}` +
        (b.clearedTokens ? ` \u00b7 cleared ${b.clearedTokens}` : ""),
    );
    head.append(name, nums);
    const bar = el("div", "bar");
    bar.style.width = `${Math.max(2, (100 * b.offeredTokens) / widest)}%`;
    bar.title = `offered ${b.offeredTokens} tokens`;
    const parts = [["kept", b.keptFullTokens], ["compacted", b.compactedTokens], ["cleared", b.clearedTokens], ["cut", b.cutTokens]];
    for (const [cls, v] of parts) {
      if (!v) continue;
      const s = el("span", cls);
      s.style.width = `${(100 * v) / Math.max(1, b.offeredTokens)}%`;
      s.title = `${cls}: ${v} tokens`;
      bar.append(s);
    }
    const items = el("div", "items");
    for (const it of b.items) {
      const chip = el("span", `item ${it.outcome}`, it.id);
      chip.dataset.id = it.id;
      chip.dataset.outcome = it.outcome;
      chip.title = `${it.id}: ${OUTCOME_TITLES[it.outcome] || it.outcome}`;
      items.append(chip);
    }
    box.append(head, bar, items);
    root.append(box);
  }
}

function flash(node) {
  if (!node) return;
  node.scrollIntoView({ behavior: "smooth", block: "center" });
  node.classList.add("flash");
  setTimeout(() => node.classList.remove("flash"), 1500);
}

function drawWarnings(warnings) {
  const root = $("warnings");
  root.replaceChildren();
  if (warnings.length === 0) root.append(el("li", "none", "none"));
  for (const w of warnings) {
    const li = el("li");
    li.append(el("code", "", w.code), ` ${w.message}`);
    for (const b of w.blocks) {
      const a = el("a", "", `\u2192 block ${b.name}`);
      a.addEventListener("click", () => flash($(`block-${b.index}`)));
      li.append(a);
    }
    for (const it of w.items) {
      const a = el("a", "", `\u2192 ${it.block}/${it.id}`);
      a.addEventListener("click", () => {
        const box = $(`block-${it.blockIndex}`);
        flash(box && Array.from(box.querySelectorAll(".item")).find((c) => c.dataset.id === it.id));
      });
      li.append(a);
    }
    if (w.staticPrefix) {
      const a = el("a", "", "\u2192 static prefix");
      a.addEventListener("click", () => flash(document.querySelector(".mark.boundary")));
      li.append(a);
    }
    root.append(li);
  }
}

const BREAKPOINT = {
  BREAKPOINT_KIND_END_OF_TOOLS: "end of tools",
  BREAKPOINT_KIND_END_OF_SYSTEM: "end of system",
  BREAKPOINT_KIND_END_OF_EXAMPLES: "end of examples",
  BREAKPOINT_KIND_LAST_STABLE_MESSAGE: "last stable message",
};

function drawMessages(resp, view) {
  const cache = resp.cache || {};
  const hints = resp.hints || {};
  const info = $("cache");
  info.replaceChildren();
  info.append("prefix hash ", el("code", "", cache.prefixHash || ""), ` \u00b7 static prefix ${Number(cache.prefixTokens || 0)} tokens`);
  info.append(` \u00b7 cacheable ${view.cacheableTokens} of ${view.promptTokens} tokens (${(view.cacheableShare * 100).toFixed(1)}%)`);
  if (hints.belowProviderMinimum) info.append(` \u00b7 below the provider minimum of ${hints.providerMinimumTokens} tokens: nothing cached`);
  const breakpoints = (hints.breakpoints || []).filter((b) => b.kind !== "BREAKPOINT_KIND_END_OF_TOOLS");
  const tools = (hints.breakpoints || []).filter((b) => b.kind === "BREAKPOINT_KIND_END_OF_TOOLS");
  if (tools.length) info.append(` \u00b7 breakpoint after tool ${Number(tools[0].index || 0)}`);
  const root = $("messages");
  root.replaceChildren();
  const statics = Number(view.staticMessages || 0);
  (resp.messages || []).forEach((m, i) => {
    const li = el("li", `msg${i < statics ? " static" : ""}`);
    // The marks between messages are list items too: number by index.
    li.value = i;
    const role = (m.role || "ROLE_UNSPECIFIED").replace("ROLE_", "").toLowerCase();
    li.append(el("div", "role", role + (m.toolCallId ? ` \u2192 ${m.toolCallId}` : "") + (m.toolCallIds ? ` calls ${m.toolCallIds.join(", ")}` : "")));
    li.append(el("pre", "", m.content || ""));
    li.id = `msg-${i}`;
    root.append(li);
    if (i === statics - 1) {
      root.append(el("li", "mark boundary", `\u25b2 static prefix ends (${statics} messages, hash ${(cache.prefixHash || "").slice(0, 16)}\u2026)`));
    }
    for (const b of breakpoints) {
      if (Number(b.index || 0) === i) root.append(el("li", "mark breakpoint", `\u2702 cache breakpoint: ${BREAKPOINT[b.kind] || b.kind}`));
    }
  });
}

/** A marker's reason, in words. */
const INEFFECTIVE = {
  below_minimum: "prefix below the provider's minimum: nothing cached",
  over_breakpoint_limit: "over the provider's limit of markers: left out",
  ttl_order: "TTL lowered to the one before it",
  volatile_before: "a volatile value lies before it: it never hits",
  lookback_exceeded: "too many content blocks back to the previous marker",
};

/** What a divergence's change means, in words. */
const CHANGE = {
  none: "identical to the previous prompt",
  appended: "the previous conversation is kept whole and new turns follow it",
  model_changed: "another model, tokenizer or cache salt",
  tools_changed: "the tool definitions changed",
  system_changed: "a static segment changed",
  volatile_value: "a volatile value in a static segment changed",
  window_step: "the conversation window moved: leading turns gone or summarized",
  summary_changed: "the summary message changed",
  turn_changed: "an earlier turn was edited, inserted or removed",
  item_reordered: "context items in another order",
  item_removed: "a context item of the previous prompt is gone",
  item_added: "a new context item",
  query_changed: "only the query differs",
};

/** A lifetime as the providers write it: 1h, 5m, 30s. */
function ttlText(s) {
  if (s === null || s === undefined) return "\u2014";
  if (s > 0 && s % 3600 === 0) return `${s / 3600}h`;
  if (s > 0 && s % 60 === 0) return `${s / 60}m`;
  return `${s}s`;
}

/** Where a marker or a divergence is: tool i, or message i and its role. */
function place(target, index, role) {
  return target === "tool" ? `tool ${index}` : `message ${index}${role ? ` (${role})` : ""}`;
}

function drawPlan(plan) {
  const n = (v) => Number(v || 0).toLocaleString();
  const summary = $("plan-summary");
  summary.replaceChildren();
  summary.append("provider ", el("b", "provider", plan.provider), ` \u00b7 cacheable ${n(plan.cacheableTokens)} tokens`);
  summary.append(` \u00b7 ${plan.markers.length} marker${plan.markers.length === 1 ? "" : "s"}`);
  const body = $("plan").tBodies[0];
  body.replaceChildren();
  if (plan.markers.length === 0) {
    const tr = el("tr", "none");
    const td = el("td", "", `no markers: ${plan.provider} takes none for this prompt (it caches a stable prefix by itself, or nothing is cacheable)`);
    td.colSpan = 5;
    tr.append(td);
    body.append(tr);
  }
  for (const m of plan.markers) {
    const tr = el("tr", `marker${m.effective ? "" : " ineffective"}`);
    tr.dataset.effective = String(m.effective);
    const where = el("td", "", place(m.target, m.index, m.role));
    where.append(el("div", "sub", (BREAKPOINT[`BREAKPOINT_KIND_${m.kind.toUpperCase()}`] || m.kind)));
    if (m.target === "message") {
      where.classList.add("link");
      where.addEventListener("click", () => flash($(`msg-${m.index}`)));
    }
    const field = el("td");
    field.append(el("code", "", m.field.name), " ", el("code", "json", m.field.json));
    const ok = m.effective ? "\u2713" : "\u2717";
    const why = m.reason ? ` ${INEFFECTIVE[m.reason] || m.reason}` : "";
    const eff = el("td", m.effective ? "yes" : "no", ok + why);
    if (m.reason) eff.dataset.reason = m.reason;
    tr.append(where, field, el("td", "num", ttlText(m.ttlSeconds)), el("td", "num", n(m.prefixTokens)), eff);
    body.append(tr);
  }
  const fields = $("plan-fields");
  fields.replaceChildren();
  fields.append("request fields: ");
  if (plan.requestFields.length === 0) fields.append("none");
  plan.requestFields.forEach((f, i) => {
    if (i) fields.append(", ");
    fields.append(el("code", "", f.name), " ", el("code", "json", f.json));
  });
}

/** The divergence panel: `d` (or null) for an answer `compared` with the
 * previous one or not; `fingerprint` of the answer drawn (null: only the
 * control changed). */
function drawDivergence(d, compared, fingerprint) {
  const root = $("divergence");
  for (const li of document.querySelectorAll("#messages .diverged")) li.classList.remove("diverged");
  for (const li of document.querySelectorAll("#messages .mark.diverges")) li.remove();
  root.replaceChildren();
  delete root.dataset.change;
  if (!$("compare").checked) {
    root.append(el("p", "none", "Off: tick \u201cCompare with the previous assembly\u201d to see where the next assembly diverges from the one shown."));
  } else if (!compared || !d) {
    let text;
    if (fingerprint === null && state.previous !== null) text = "On: the next assembly will be compared with the one shown.";
    else if (fingerprint === null) text = "No previous assembly yet: the next one will be the first to compare with.";
    else text = "No previous assembly to compare with: the next assembly will be compared with this one.";
    root.append(el("p", "none", text));
  } else {
    const n = (v) => Number(v || 0).toLocaleString();
    root.dataset.change = d.change;
    const head = el("p", "change");
    head.append(el("code", d.breaksPrefix ? "breaks" : "keeps", d.change), ` ${CHANGE[d.change] || ""}`);
    const dl = el("dl");
    const row = (k, v) => dl.append(el("dt", "", k), v instanceof Node ? v : el("dd", "", v));
    row("part", d.part ? `${d.part}${d.id ? ` ${d.id}` : ""}` : "\u2014 (identical)");
    const msg = el("dd", "link", place("message", d.messageIndex, d.role));
    msg.addEventListener("click", () => flash($(`msg-${d.messageIndex}`)));
    row("at", msg);
    row("token offset", `${n(d.tokenOffset)} tokens shared before it`);
    row("servable", `${n(d.servableTokens)} of them the provider's cache can still serve`);
    root.append(head, dl);
    if (d.part) {
      const li = $(`msg-${d.messageIndex}`);
      if (li) {
        li.classList.add("diverged");
        li.before(el("li", "mark diverges", `\u25bc diverges here: ${d.change}${d.id ? ` at ${d.id}` : ""}`));
      }
    }
  }
  if (fingerprint) root.append(el("p", "fingerprint", `this prompt's fingerprint ${fingerprint.slice(0, 24)}\u2026 (${atob(fingerprint).length} bytes, hashes and counts only)`));
  else if (state.previous) root.append(el("p", "fingerprint", `the assembly shown has fingerprint ${state.previous.slice(0, 24)}\u2026`));
}

function drawReport(decisions) {
  const body = $("report").tBodies[0];
  body.replaceChildren();
  for (const d of decisions) {
    const tr = el("tr");
    const outcome = (d.outcome || "").replace("OUTCOME_", "").toLowerCase();
    const kind = (d.kind || "").replace("BLOCK_KIND_", "").toLowerCase();
    tr.append(el("td", "", d.name), el("td", "", kind), el("td", "num", d.priority || 0), el("td", `o-${outcome}`, outcome));
    tr.append(el("td", "num", `${d.tokensOfferedIsLowerBound ? "\u2265" : ""}${d.tokensOffered || 0}`), el("td", "num", d.tokensKept || 0));
    tr.append(el("td", "", d.reason || ""));
    body.append(tr);
  }
}

document.addEventListener("DOMContentLoaded", init);
