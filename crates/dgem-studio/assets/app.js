// Decision Studio: runs decisions through the /api routes (docs/studio.md).
// Plain ES module, no dependencies. Every number shown comes from the reply JSON.

import { KINDS, kindOf } from "./kinds.js";

const $ = (sel) => document.querySelector(sel);

/** Hesitation bands on the normalized entropy (reference.md §6, serving.md §6.5). */
export const BANDS = [
  { max: 0.16, key: "clear", label: "clear" },
  { max: 0.5, key: "unsure", label: "unsure" },
  { max: Infinity, key: "very_unsure", label: "very unsure" },
];

/** The band of a normalized entropy in [0, 1]: < 16 % clear, 16–50 % unsure, > 50 % very unsure. */
export function band(h) {
  if (h < BANDS[0].max) return BANDS[0];
  return h <= BANDS[1].max ? BANDS[1] : BANDS[2];
}

const state = { templates: [], backends: { default: "", available: [] }, healthTimer: 0, images: [] };

/** Image limits, the server's own (dgem_core::images): checked here first so a bad file is named at once. */
export const IMAGE_TYPES = ["image/png", "image/jpeg", "image/webp", "image/gif"];
export const MAX_IMAGES = 16;
export const MAX_IMAGE_BYTES = 10 * 1024 * 1024;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") node.textContent = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

const pct = (p) => `${(p * 100).toFixed(1)}%`;
const ms = (v) => (typeof v === "number" ? `${v.toFixed(v < 10 ? 1 : 0)} ms` : "—");

// The server's key (`API_KEY`), sent as `X-DGem-Key` on every call when set.
function withKey(init) {
  const field = document.getElementById("api-key");
  const key = field ? field.value.trim() : "";
  if (!key) return init;
  const next = { ...(init || {}) };
  next.headers = { ...(next.headers || {}), "X-DGem-Key": key };
  return next;
}

async function getJson(url, init) {
  let resp;
  try {
    resp = await fetch(url, withKey(init));
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new Error(`cannot reach ${url}: ${e.message}`);
  }
  const text = await resp.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!resp.ok) {
    const msg = body && typeof body.error === "string" ? body.error
      : body && body.error && body.error.message ? body.error.message
      : text || resp.statusText;
    throw new Error(`${resp.status}: ${msg}`);
  }
  if (body === null) throw new Error(`${url} did not answer JSON`);
  return { body, text, headers: resp.headers };
}

// ---------- errors, shown in place next to the form ----------

function showError(message) {
  const box = $("#form-error");
  box.textContent = message;
  box.hidden = false;
}

function clearError() {
  const box = $("#form-error");
  box.textContent = "";
  box.hidden = true;
}

// ---------- health pill ----------

async function pollHealth() {
  const pill = $("#health");
  let next = 3000;
  try {
    const { body } = await getJson("/api/health");
    const chosen = $("#backend").value || body.default_backend;
    const b = (body.backends || []).find((x) => x.name === chosen) || (body.backends || [])[0];
    if (b) {
      const phase = b.phase || (b.ready ? "ready" : "unknown");
      let text = `${b.name}: ${phase.replaceAll("_", " ")}`;
      if (typeof b.bytes_staged_gb === "number" && !b.ready) text += ` (${b.bytes_staged_gb.toFixed(1)} GB staged)`;
      if (b.breaker && b.breaker !== "closed") text += ` · breaker ${b.breaker.replace("_", "-")}`;
      pill.textContent = text;
      pill.dataset.phase = b.ready ? "ready" : phase;
      if (b.ready) next = 30000;
    } else {
      pill.textContent = `backend: ${body.status || "unknown"}`;
      pill.dataset.phase = "unknown";
    }
  } catch (e) {
    pill.textContent = "backend: unreachable";
    pill.dataset.phase = "unreachable";
  }
  clearTimeout(state.healthTimer);
  state.healthTimer = setTimeout(pollHealth, next);
}

// ---------- catalog and variables ----------

function renderTemplates() {
  const select = $("#template");
  select.replaceChildren();
  const groups = new Map();
  for (const t of state.templates) {
    const cat = t.category || "core";
    if (!groups.has(cat)) groups.set(cat, el("optgroup", { label: cat }));
    groups.get(cat).append(el("option", { value: t.id, text: t.name || t.id }));
  }
  for (const g of groups.values()) select.append(g);
  const preferred = state.templates.find((t) => t.id === "support_triage");
  if (preferred) select.value = preferred.id;
  renderVariables();
}

function currentTemplate() {
  return state.templates.find((t) => t.id === $("#template").value);
}

function renderVariables() {
  const t = currentTemplate();
  const box = $("#variables");
  box.replaceChildren(el("legend", { text: "Variables" }));
  $("#template-description").textContent = t ? t.description || "" : "";
  if (!t) return;
  // `samples` is the Samples field of the run options, not a text box here.
  const vars = (t.variables || []).filter((v) => v !== "samples");
  if (!vars.length) box.append(el("p", { class: "hint", text: "This policy reads no variables." }));
  for (const name of vars) {
    const id = `var-${name}`;
    const sample = (t.sample_vars || {})[name];
    box.append(
      el("label", { for: id, text: name }),
      el("textarea", { id, name, rows: 3, dataset: { variable: name } }),
    );
    box.querySelector(`#${CSS.escape(id)}`).value = sample === undefined ? "" : String(sample);
  }
  if (t.questions && t.questions.length) {
    const list = t.questions.map((q) => `${q.id} (${q.type})`).join(", ");
    box.append(el("p", { class: "hint", text: `Questions: ${list}` }));
  }
}

function variableValue(text) {
  const v = text.trim();
  if (/^-?\d+(\.\d+)?$/.test(v)) return Number(v);
  if (v === "true" || v === "false") return v === "true";
  return text;
}

// ---------- ad-hoc questions ----------

function addQuestion(q = { id: "", type: "boolean", question: "", options: "" }) {
  const frag = $("#question-row").content.cloneNode(true);
  const row = frag.querySelector("fieldset");
  // The type menu: one entry per question type (kinds.js).
  row.querySelector("[name=qtype]").append(
    ...Object.entries(KINDS).map(([value, k]) => el("option", { value, text: k.label })));
  row.querySelector("[name=qid]").value = q.id;
  row.querySelector("[name=qtype]").value = q.type;
  row.querySelector("[name=qtext]").value = q.question;
  row.querySelector("[name=qoptions]").value = q.options;
  row.querySelector(".remove").addEventListener("click", () => {
    row.remove();
    numberQuestions();
    $("#add-question").focus();
  });
  $("#questions").append(row);
  numberQuestions();
  return row;
}

function numberQuestions() {
  document.querySelectorAll("#questions fieldset").forEach((f, i) => {
    f.querySelector("legend").textContent = `Question ${i + 1}`;
  });
}

function customBody() {
  const raw = $("#state").value;
  let st = raw;
  const trimmed = raw.trim();
  if (trimmed.startsWith("{")) {
    try {
      st = JSON.parse(trimmed);
    } catch (e) {
      throw new Error(`state: looks like JSON but does not parse (${e.message}); fix it or write plain text`);
    }
  }
  if (!trimmed) throw new Error("state: write the text the questions are about");
  const rows = [...document.querySelectorAll("#questions fieldset")];
  if (!rows.length) throw new Error("questions: add at least one question");
  const questions = rows.map((row, i) => {
    const id = row.querySelector("[name=qid]").value.trim();
    const type = row.querySelector("[name=qtype]").value;
    const question = row.querySelector("[name=qtext]").value.trim();
    const options = row.querySelector("[name=qoptions]").value.split(",").map((s) => s.trim()).filter(Boolean);
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(id)) throw new Error(`question ${i + 1}: id must be letters, digits or _ (not starting with a digit). Given: "${id}"`);
    if (!question) throw new Error(`question ${i + 1} (${id}): write the question`);
    const kind = KINDS[type];
    if (kind.options && options.length < 2) throw new Error(`question ${i + 1} (${id}): a ${type} needs at least two options, comma separated`);
    const q = { id, type, question };
    if (kind.options) q.options = options;
    const none = row.querySelector("[name=qnone]");
    if (none && none.checked) {
      if (!kind.none) throw new Error(`question ${i + 1} (${id}): "none of these" is for ${Object.keys(KINDS).filter((k) => KINDS[k].none).join(" and ")} questions`);
      q.none_of_these = true;
    }
    return q;
  });
  return { state: st, questions };
}

// ---------- images ----------

function readAsDataUrl(file) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(String(r.result));
    r.onerror = () => reject(new Error(`images: could not read ${file.name}`));
    r.readAsDataURL(file);
  });
}

async function addImages(event) {
  clearError();
  const input = event.target;
  const problems = [];
  for (const file of [...input.files]) {
    if (state.images.length >= MAX_IMAGES) {
      problems.push(`images: at most ${MAX_IMAGES} images; ${file.name} was not added`);
      continue;
    }
    if (!IMAGE_TYPES.includes(file.type)) {
      problems.push(`images: ${file.name} is ${file.type || "of an unknown type"}; use PNG, JPEG, WebP or GIF`);
      continue;
    }
    if (file.size > MAX_IMAGE_BYTES) {
      problems.push(`images: ${file.name} is ${(file.size / 1048576).toFixed(1)} MiB; the limit is 10 MiB`);
      continue;
    }
    try {
      state.images.push({ name: file.name, url: await readAsDataUrl(file) });
    } catch (e) {
      problems.push(e.message);
    }
  }
  input.value = "";
  renderThumbs();
  if (problems.length) showError(problems.join("\n"));
}

function renderThumbs() {
  const list = $("#thumbs");
  list.replaceChildren();
  state.images.forEach((img, i) => {
    const remove = el("button", { type: "button", class: "remove", "aria-label": `Remove ${img.name}`, text: "Remove" });
    remove.addEventListener("click", () => {
      state.images.splice(i, 1);
      renderThumbs();
      $("#images").focus();
    });
    list.append(el("li", { dataset: { image: img.name } },
      el("img", { src: img.url, alt: img.name, width: 96, height: 96 }),
      el("span", { class: "name", text: img.name }), remove));
  });
}

// ---------- running ----------

function buildRequest() {
  const mode = document.querySelector("input[name=mode]:checked").value;
  const samples = Number($("#samples").value);
  const seed = Number($("#seed").value);
  if (!Number.isInteger(samples) || samples < 1 || samples > 32) throw new Error(`samples: must be a whole number from 1 to 32. Given: "${$("#samples").value}"`);
  if (!Number.isInteger(seed)) throw new Error(`seed: must be a whole number. Given: "${$("#seed").value}"`);
  const backend = $("#backend").value;
  let body;
  let url = "/api/decide";
  if (mode === "policy") {
    const t = currentTemplate();
    if (!t) throw new Error("template: pick a policy from the catalog");
    const variables = {};
    for (const area of document.querySelectorAll("#variables [data-variable]")) {
      if (area.value.trim() !== "") variables[area.dataset.variable] = variableValue(area.value);
    }
    body = { template: t.id, variables };
    url = `/api/decide/${t.id.split("/").map(encodeURIComponent).join("/")}`;
  } else {
    body = customBody();
  }
  body.samples = samples;
  body.seed = seed;
  if (state.images.length) body.images = state.images.map((i) => i.url);
  if (backend) body.backend = backend;
  // Optional post-read keys; the server checks their ranges and names a bad one.
  const number = (id) => ($(id).value.trim() === "" ? null : Number($(id).value));
  const t = number("#temperature");
  if (t !== null) body.temperature = t;
  const above = number("#abstain-above");
  if (above !== null) body.abstain_above = above;
  if ($("#cascade-mode").value) body.cascade_mode = $("#cascade-mode").value;
  return { url, body, backend };
}

/** Clear the previous decision's cards, summary, note and raw JSON. */
function clearResults() {
  $("#cards").replaceChildren();
  $("#summary").replaceChildren();
  $("#summary").hidden = true;
  $("#model-note").hidden = true;
  $("#raw-json").textContent = "";
  $("#raw").hidden = true;
}

/** On a narrow screen the results sit under the form: bring them into view. */
function revealResults() {
  if (window.matchMedia("(max-width: 899px)").matches) {
    $("#results").scrollIntoView({ behavior: "smooth", block: "start" });
    $("#results-heading").focus({ preventScroll: true });
  }
}

let running = null;

function cancelRun() {
  if (running) running.abort();
}

async function run(event) {
  event.preventDefault();
  if (running) return;
  clearError();
  let req;
  try {
    req = buildRequest();
  } catch (e) {
    // Old results would read as the answer to what is now on the form.
    clearResults();
    $("#results-status").textContent = "No decision: fix the field named next to the form.";
    showError(e.message);
    return;
  }
  const button = $("#run");
  const cancel = $("#cancel");
  const elapsed = $("#elapsed");
  const results = $("#results");
  const controller = new AbortController();
  running = controller;
  button.disabled = true;
  button.textContent = "Running…";
  cancel.hidden = false;
  results.setAttribute("aria-busy", "true");
  $("#results-status").textContent = "Running the decision…";
  const started = performance.now();
  const seconds = () => ((performance.now() - started) / 1000).toFixed(1);
  elapsed.textContent = "0.0 s";
  const ticker = setInterval(() => { elapsed.textContent = `${seconds()} s`; }, 100);
  try {
    const headers = { "Content-Type": "application/json", Accept: "application/json" };
    if (req.backend) headers["X-DGem-Backend"] = req.backend;
    const { body, text, headers: h } = await getJson(req.url, {
      method: "POST", headers, body: JSON.stringify(req.body), signal: controller.signal,
    });
    renderResult(body, text, h.get("X-DGem-Backend-Used"), req.body.samples, performance.now() - started);
    revealResults();
  } catch (e) {
    clearResults();
    if (e.name === "AbortError") {
      $("#results-status").textContent = `Cancelled after ${seconds()} s; nothing was decided.`;
    } else {
      showError(e.message);
      $("#results-status").textContent = "The decision failed; see the message next to the form.";
    }
  } finally {
    clearInterval(ticker);
    elapsed.textContent = `${seconds()} s`;
    running = null;
    button.disabled = false;
    button.textContent = "Run decision";
    cancel.hidden = true;
    results.setAttribute("aria-busy", "false");
  }
}

// ---------- results ----------

/** Probabilities of one answer: `probabilities`, else `distribution`. */
function probabilitiesOf(a) {
  return a.probabilities || a.distribution || {};
}

/** Normalized entropy of one answer: the field, else H(p) / ln K. */
function hesitationOf(a) {
  if (typeof a.normalized_entropy === "number") return a.normalized_entropy;
  const ps = Object.values(probabilitiesOf(a)).filter((p) => typeof p === "number");
  if (ps.length < 2) return 0;
  const h = -ps.reduce((s, p) => (p > 0 ? s + p * Math.log(p) : s), 0);
  return h / Math.log(ps.length);
}

/** The answer's text on its card, as its type writes it (kinds.js). */
function answerOf(a) {
  return kindOf(a).answer(a);
}

function summaryItem(term, value, key) {
  return el("div", { dataset: { key } }, el("dt", { text: term }), el("dd", { text: value }));
}

function renderResult(body, text, backendUsed, samples, clientMs) {
  const answers = body.answers || (body.decision && body.decision.answers) || {};
  const diagnostics = body.diagnostics || (body.decision && body.decision.diagnostics) || {};
  const timing = diagnostics.timing || {};
  const cards = $("#cards");
  cards.replaceChildren();
  let maxH = 0;
  let maxQ = "";
  for (const [qid, a] of Object.entries(answers)) {
    if (a === null) {
      cards.append(el("article", { class: "card", dataset: { question: qid } },
        el("h3", { text: qid }), el("p", { class: "hint", text: "Skipped: its ask_if condition was not met." })));
      continue;
    }
    const h = hesitationOf(a);
    if (h >= maxH) { maxH = h; maxQ = qid; }
    cards.append(renderCard(qid, a, h, samples));
  }
  const summary = $("#summary");
  summary.replaceChildren(
    summaryItem("Policy", body.template || "custom", "template"),
    summaryItem("Backend", backendUsed || body.backend_target || "—", "backend"),
    summaryItem("Model", body.model || "—", "model"),
    summaryItem("Queue", ms(timing.queue_ms), "queue_ms"),
    summaryItem("Forward", ms(timing.forward_ms ?? body.gpu_forward_ms), "forward_ms"),
    summaryItem("Total", ms(timing.total_ms), "total_ms"),
    summaryItem("Wall time", ms(body.wall_time_ms ?? clientMs), "wall_time_ms"),
    summaryItem("Highest hesitation", maxQ ? `${pct(maxH)} (${maxQ})` : "—", "max_hesitation"),
  );
  if (body.cascade) {
    const c = body.cascade;
    const what = c.triggered ? `escalated ${c.escalated_count} of ${c.total_slots}${c.model ? ` to ${c.model}` : ""}` : "nothing escalated";
    summary.append(summaryItem("Cascade", c.error ? `${what}; error: ${c.error}` : what, "cascade"));
  }
  summary.hidden = false;
  $("#raw-json").textContent = JSON.stringify(JSON.parse(text), null, 2);
  $("#raw").hidden = false;
  const n = Object.keys(answers).length;
  $("#results-status").textContent = `Decided ${n} question${n === 1 ? "" : "s"}; highest hesitation ${pct(maxH)} (${band(maxH).label}).`;
  // The model's own caveat (e.g. that the embedded 270M model is near chance),
  // shown as plain words next to the numbers it qualifies.
  const note = $("#model-note");
  note.textContent = typeof diagnostics.note === "string" ? `Note: ${diagnostics.note}` : "";
  note.hidden = !note.textContent;
}

function renderCard(qid, a, h, samples) {
  const probs = probabilitiesOf(a);
  const chosen = answerOf(a);
  const b = band(h);
  const top = Object.entries(probs).reduce((best, cur) => (best === null || cur[1] > best[1] ? cur : best), null);
  const headingId = `q-${qid}`;
  // The type's widget (kinds.js): a multi answer ticks a checkbox per
  // selected option beside a bar of that option's own probability.
  const kind = kindOf(a);
  const bars = el("ul", { class: kind.checkboxes ? "bars multi" : "bars", "aria-label": kind.bars(qid) });
  for (const [name, p] of Object.entries(probs)) {
    const fill = el("span", { class: "fill" });
    fill.style.width = `${Math.max(0, Math.min(1, p)) * 100}%`;
    const picked = kind.picked(a, name, top);
    const box = kind.checkboxes ? el("input", { type: "checkbox", disabled: "", "aria-label": `${name} selected` }) : null;
    if (box) box.checked = picked;
    bars.append(el("li", { class: picked ? "top" : null, dataset: { option: name, probability: String(p) } },
      ...(box ? [box] : []),
      el("span", { class: "name", text: name }),
      el("span", { class: "track", "aria-hidden": "true" }, fill),
      el("span", { class: "value", text: pct(p) })));
  }
  const meta = el("p", { class: "meta" },
    el("span", {}, "Hesitation ", el("span", { class: "band", dataset: { band: b.key }, title: typeof a.entropy === "number" ? `${a.entropy.toFixed(3)} nats` : null, text: `${pct(h)} (${b.label})` })));
  if (typeof a.confidence === "number") meta.append(el("span", { text: `${kind.confidence} ${pct(a.confidence)}` }));
  if (a.constrained) meta.append(el("span", { class: "constrained", text: `Constrained by the policy's rules (${pct(a.constraint_mass_removed || 0)} removed)` }));
  if (samples > 1 || typeof a.agreement === "number") {
    meta.append(el("span", { class: "agreement", text: `Agreement ${typeof a.agreement === "number" ? pct(a.agreement) : "—"}` }));
  }
  // Withheld answers keep their bars but say plainly not to act on them;
  // Stage-2 answers say who gave them (the bars are still Stage 1's).
  const notes = [];
  if (a.abstained) {
    notes.push(el("p", { class: "abstained", role: "note", text: `Abstained (${a.abstain_reason || "no reason given"}): "${chosen}" is only the most probable answer; do not act on it.` }));
  }
  if (typeof a.resolved_by === "string") {
    notes.push(el("p", { class: "resolved", role: "note", text: `Answered by stage 2 (${a.resolved_by})${a.explanation ? `: ${a.explanation}` : ""}. The bars show stage 1.` }));
  }
  return el("article", { class: "card", "aria-labelledby": headingId, dataset: { question: qid, hesitation: String(h), band: b.key, abstained: a.abstained ? "true" : "false" } },
    el("h3", { id: headingId, text: qid }),
    el("p", { class: "answer" }, "Answer: ", el("strong", { class: "chosen", text: a.abstained ? `${chosen} (abstained)` : chosen })),
    ...notes, meta, bars);
}

// ---------- start ----------

function setMode() {
  const mode = document.querySelector("input[name=mode]:checked").value;
  $("#policy-section").hidden = mode !== "policy";
  $("#custom-section").hidden = mode !== "custom";
}

async function init() {
  const form = $("#decide-form");
  form.addEventListener("submit", run);
  form.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
  document.querySelectorAll("input[name=mode]").forEach((r) => r.addEventListener("change", setMode));
  $("#template").addEventListener("change", renderVariables);
  $("#images").addEventListener("change", addImages);
  $("#cancel").addEventListener("click", cancelRun);
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && running) cancelRun();
  });
  $("#backend").addEventListener("change", pollHealth);
  $("#add-question").addEventListener("click", () => addQuestion().querySelector("[name=qid]").focus());
  addQuestion({ id: "urgent", type: "boolean", question: "Does this need someone today?", options: "" });
  addQuestion({ id: "team", type: "choice", question: "Which team should handle it?", options: "billing, support, engineering" });
  setMode();
  const problems = [];
  try {
    const { body } = await getJson("/api/backends");
    state.backends = body;
    const select = $("#backend");
    for (const name of body.available || []) select.append(el("option", { value: name, text: name }));
    if (body.default) select.value = body.default;
  } catch (e) {
    problems.push(`backends: ${e.message}`);
  }
  pollHealth();
  try {
    const { body } = await getJson("/api/templates");
    state.templates = body.templates || [];
    renderTemplates();
  } catch (e) {
    problems.push(`templates: ${e.message}`);
  }
  if (problems.length) showError(problems.join("\n"));
  document.body.dataset.ready = "true";
}

init();
