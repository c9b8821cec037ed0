// The tidings console's page: hash routes over the JSON API (docs/console.md).
// Every value shown comes from topics any producer may write: it is set as text, never as HTML.
"use strict";

const state = { session: null, timer: null, route: null };
const POLL_MS = 2000;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "text") node.textContent = String(value);
    else if (name === "on") for (const [event, handler] of Object.entries(value)) node.addEventListener(event, handler);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function link(hash, text, attrs) { return el("a", { href: hash, ...(attrs || {}) }, text); }
const enc = encodeURIComponent;

async function api(method, path, body) {
  const options = { method, headers: { "Accept": "application/json" }, credentials: "same-origin" };
  if (method === "POST") {
    options.headers["Content-Type"] = "application/json";
    options.headers["X-CSRF-Token"] = state.session ? state.session.csrf : "";
    options.body = JSON.stringify(body || {});
  }
  const response = await fetch("/api/" + path, options);
  let data;
  try { data = await response.json(); } catch (e) { data = { error: "no JSON answer (" + response.status + ")" }; }
  if (!response.ok) { const error = new Error(data.error || String(response.status)); error.status = response.status; throw error; }
  return data;
}

function say(text, isError) {
  const box = document.getElementById("message");
  box.textContent = text;
  box.className = isError ? "error" : "";
  box.hidden = false;
}

function ask(text) {
  // An in-page confirmation: a dialog the browser cannot be told to skip by another page.
  return new Promise((resolve) => {
    const box = document.getElementById("confirm");
    document.getElementById("confirm-text").textContent = text;
    box.hidden = false;
    const done = (answer) => { box.hidden = true; yes.onclick = no.onclick = null; resolve(answer); };
    const yes = document.getElementById("confirm-yes"), no = document.getElementById("confirm-no");
    yes.onclick = () => done(true);
    no.onclick = () => done(false);
  });
}

async function act(question, method, path, body, after) {
  if (question && !(await ask(question))) return;
  try {
    const answer = await api(method, path, body);
    say("done: " + JSON.stringify(answer));
    if (after) after(answer);
    render(true);
  } catch (error) { say(error.message, true); }
}

function statusCell(status) { return el("td", { class: "status s-" + (status || "none"), text: status || "-" }); }

function table(headers, rows) {
  return el("table", {}, el("thead", {}, el("tr", {}, headers.map((h) => el("th", { text: h })))), el("tbody", {}, rows));
}

function facts(pairs) {
  return el("table", { class: "facts" }, el("tbody", {}, pairs.filter((p) => p[1] !== null && p[1] !== undefined && p[1] !== "")
    .map(([name, value]) => el("tr", {}, el("th", { text: name }), el("td", {}, value instanceof Node ? value : String(value))))));
}

function duration(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(3) + " s";
  if (ms < 3600000) return Math.floor(ms / 60000) + " min " + Math.floor((ms % 60000) / 1000) + " s";
  return Math.floor(ms / 3600000) + " h " + Math.floor((ms % 3600000) / 60000) + " min";
}

// -- pages -------------------------------------------------------------------------------------

const INSTANCE_PAGE = { workflow: "workflow", saga: "saga", aggregate: "aggregate", deadletter: "deadletter" };

function rowLink(row) {
  if (row.kind === "deadletter") return "#/deadletter/" + enc(row.id);
  // A schedule, an orchestration and a flow element have no page of their own: their row says it all.
  if (!INSTANCE_PAGE[row.kind]) return null;
  return "#/" + INSTANCE_PAGE[row.kind] + "/" + enc(row.name) + "/" + enc(row.id);
}

async function overview() {
  const data = await api("GET", "overview");
  const rows = data.kinds.map((k) => el("tr", { "data-kind": k.kind, "data-name": k.name },
    el("td", { text: k.kind }),
    el("td", {}, k.total === null ? k.name : link("#/list/" + k.kind + (k.kind === "schedule" ? "" : "?name=" + enc(k.name)), k.name)),
    el("td", { class: "num total", text: k.total === null ? "-" : k.total }),
    el("td", {}, k.total === null ? el("span", { text: k.note }) :
      Object.entries(k.counts).map(([status, count]) => el("span", { class: "count s-" + status, "data-status": status },
        status + " ", el("b", { text: count }), " ")))));
  const letters = data.deadletters;
  return [el("h1", { text: "Overview of " + data.app }),
    table(["kind", "name", "total", "by status"], rows),
    el("h2", {}, link("#/list/deadletters", "Dead letters")),
    el("p", { id: "deadletter-total" }, el("b", { text: letters.total }), " dead letters",
      Object.keys(letters.counts).length ? ": " + Object.entries(letters.counts).map(([t, n]) => t + " " + n).join(", ") : "")];
}

async function list(kind, params) {
  const query = new URLSearchParams();
  for (const name of ["name", "q", "page"]) if (params.get(name)) query.set(name, params.get(name));
  for (const status of params.getAll("status")) query.append("status", status);
  const data = await api("GET", "instances/" + enc(kind) + "?" + query.toString());
  const out = [el("h1", { text: kind === "deadletters" ? "Dead letters" : kind + " instances" })];
  const names = (state.session.kinds[kind] || []);
  const nameSelect = el("select", { id: "filter-name" }, el("option", { value: "", text: "every " + kind }),
    names.map((n) => el("option", { value: n, text: n, selected: params.get("name") === n })));
  const statusInput = el("input", { id: "filter-status", placeholder: "status, e.g. RUNNING", value: params.getAll("status").join(",") });
  const search = el("input", { id: "filter-q", placeholder: "id contains…", value: params.get("q") || "" });
  const apply = () => {
    const next = new URLSearchParams();
    if (nameSelect.value) next.set("name", nameSelect.value);
    for (const s of statusInput.value.split(",").map((x) => x.trim()).filter(Boolean)) next.append("status", s);
    if (search.value) next.set("q", search.value);
    location.hash = "#/list/" + kind + "?" + next.toString();
  };
  out.push(el("form", { class: "filters", id: "filters", on: { submit: (e) => { e.preventDefault(); apply(); } } },
    names.length ? nameSelect : null, kind === "aggregate" ? null : statusInput, search,
    el("button", { type: "submit", id: "filter-apply", text: "Filter" })));
  const counts = Object.entries(data.counts).map(([s, n]) => s + " " + n).join(", ");
  out.push(el("p", { id: "counts", "data-total": data.total }, el("b", { text: data.total }), " matched", counts ? ": " + counts : ""));
  const rows = data.rows.map((row) => {
    const target = rowLink(row);
    return el("tr", { class: "row", "data-name": row.name, "data-id": row.id, "data-status": row.status || "" },
      el("td", { text: row.name }), el("td", {}, target ? link(target, row.id) : row.id), statusCell(row.status),
      el("td", { text: row.at || row.next_due || "-" }), el("td", { class: "value", text: row.detail || "" }),
      kind === "schedule" && state.session.allow_actions ? scheduleAction(row) : null);
  });
  out.push(table(["name", "id", "status", kind === "schedule" ? "next due" : "since", "detail"], rows));
  const page = data.page, pages = data.pages;
  const go = (n) => { const p = new URLSearchParams(params); p.set("page", n); location.hash = "#/list/" + kind + "?" + p.toString(); };
  out.push(el("div", { class: "pager" },
    el("button", { type: "button", id: "page-prev", disabled: page <= 1, on: { click: () => go(page - 1) }, text: "‹ newer" }),
    el("span", { id: "page", text: "page " + page + " of " + pages }),
    el("button", { type: "button", id: "page-next", disabled: page >= pages, on: { click: () => go(page + 1) }, text: "older ›" })));
  if (kind === "workflow" && state.session.allow_actions && data.total > 0) {
    const cancellable = (data.counts.RUNNING || 0) + (data.counts.PARKED || 0);
    const statuses = params.getAll("status").length ? params.getAll("status").map((s) => s.toUpperCase()) : ["RUNNING", "PARKED"];
    const chosen = statuses.filter((s) => s === "RUNNING" || s === "PARKED");
    const expect = chosen.reduce((sum, s) => sum + (data.counts[s] || 0), 0);
    if (cancellable && expect) {
      out.push(el("button", { type: "button", class: "danger", id: "cancel-batch", text: "Cancel the " + expect + " running or parked instances matched",
        on: { click: () => act("Cancel " + expect + " instances (" + chosen.join(", ") + (params.get("q") ? ", id contains " + params.get("q") : "") + ")?",
          "POST", "cancel", { workflow: params.get("name") || null, status: chosen, q: params.get("q") || "", expect }) } }));
    }
  }
  return out;
}

function scheduleAction(row) {
  const action = row.status === "paused" ? "resume" : row.status === "active" ? "pause" : null;
  if (!action) return el("td", {});
  return el("td", {}, el("button", { type: "button", class: "schedule-" + action, "data-id": row.id, text: action,
    on: { click: () => act(action[0].toUpperCase() + action.slice(1) + " schedule " + row.id + "?", "POST", "schedules/" + enc(row.id) + "/" + action, {}) } }));
}

async function workflow(name, id) {
  const data = await api("GET", "workflows/" + enc(name) + "/" + enc(id));
  const d = data.describe;
  const status = d.status ? d.status.status : (d.ended ? d.ended.outcome.toUpperCase() : "RUNNING");
  const out = [el("h1", {}, "workflow " + name + " ", el("span", { class: "mono", text: id }), " ",
    el("span", { id: "status", class: "status s-" + status, "data-status": status, text: status }))];
  out.push(facts([
    ["summary", d.summary],
    ["since", d.status ? d.status.since : null],
    ["reason", d.status ? d.status.reason : null],
    ["started", d.started ? d.started.at + " with " + d.started.input : null],
    ["ended", d.ended ? d.ended.at + " " + d.ended.outcome + (d.ended.result !== null ? ": " + d.ended.result : "") + (d.ended.error ? ": " + d.ended.error : "") : null],
    ["parent", d.parent ? link("#/workflow/" + enc(d.parent.workflow) + "/" + enc(d.parent.id), d.parent.workflow + " " + d.parent.id, { id: "parent" }) : null],
    ["cancel requested", d.cancel_requested],
    ["waiting on", d.waiting.length ? d.waiting.map((w) => "step " + w.step + " " + w.kind + (w.name ? " " + w.name : "") + " since " + w.since + (w.due ? ", due " + w.due : "")).join("; ") : null],
    ["signals not consumed", d.pending_signals.length ? d.pending_signals.map((s) => s.name + " " + s.payload).join("; ") : null],
    ["last failure", d.last_failure ? "step " + d.last_failure.step + " (" + (d.last_failure.name || "") + ") " + (d.last_failure.kind || "") + ": " + d.last_failure.message : null],
  ]));
  if (d.children.length) {
    out.push(el("h2", { text: "Children" }), table(["step", "child", "status", "reported"], d.children.map((c) =>
      el("tr", { class: "child" }, el("td", { text: c.step }), el("td", {}, link("#/workflow/" + enc(c.workflow) + "/" + enc(c.id), c.workflow + " " + c.id)),
        statusCell(c.status ? c.status.status : null), el("td", { text: c.reported || "" })))));
  }
  out.push(el("h2", { text: "Timeline" }));
  out.push(el("ol", { class: "timeline", id: "timeline" }, data.timeline.map(timelineEntry)));
  if (state.session.allow_actions && !d.ended) {
    const signalName = el("input", { id: "signal-name", placeholder: "signal name", required: true });
    const payload = el("textarea", { id: "signal-payload", placeholder: "JSON payload, e.g. true" });
    out.push(el("h2", { text: "Act" }), el("form", { id: "signal-form", on: { submit: (e) => {
      e.preventDefault();
      let value = null;
      if (payload.value.trim()) {
        try { value = JSON.parse(payload.value); } catch (err) { say("the payload is not JSON: " + err.message, true); return; }
      }
      act(null, "POST", "workflows/" + enc(name) + "/" + enc(id) + "/signal", { signal: signalName.value, payload: value });
    } } }, signalName, payload, el("button", { type: "submit", id: "signal-send", text: "Send signal" })),
    el("button", { type: "button", class: "danger", id: "cancel", text: "Cancel this instance",
      on: { click: () => act("Cancel " + name + " " + id + "?", "POST", "workflows/" + enc(name) + "/" + enc(id) + "/cancel", {}) } }));
  }
  return { nodes: out, running: !d.ended };
}

function timelineEntry(entry) {
  const meta = (text) => el("span", { class: "meta", text });
  switch (entry.type) {
    case "step":
      return el("li", { class: "step " + entry.state, "data-step": entry.step, "data-kind": entry.kind || "", "data-state": entry.state },
        el("span", { class: "what", text: "step " + entry.step + " " + (entry.kind || "?") + (entry.name ? " " + entry.name : "") }),
        meta(entry.state), meta(entry.started_at || ""),
        entry.duration_ms !== null ? meta((entry.state === "running" ? "for " : "took ") + duration(entry.duration_ms)) : null,
        entry.attempts !== null ? meta("attempt " + entry.attempts) : null,
        entry.due_at ? meta("due " + entry.due_at) : null,
        entry.result !== null ? el("div", { class: "mono result", text: "→ " + entry.result }) : null,
        entry.error ? el("div", { class: "mono failed error", text: (entry.error.kind || "error") + ": " + entry.error.message }) : null);
    case "started":
      return el("li", { class: "started" }, el("span", { class: "what", text: "started" }), meta(entry.at),
        el("div", { class: "mono", text: "input " + entry.input }));
    case "signal":
      return el("li", { class: "signal", "data-signal": entry.name }, el("span", { class: "what", text: "signal " + entry.name }), meta(entry.at),
        el("div", { class: "mono", text: entry.payload }));
    case "cancel_requested":
      return el("li", { class: "cancel" }, el("span", { class: "what", text: "cancel requested" }), meta(entry.at));
    case "child_outcome":
      return el("li", { class: "child" }, el("span", { class: "what", text: "child of step " + entry.step + " " + entry.outcome }), meta(entry.at));
    case "ended":
      return el("li", { class: "ended " + (entry.outcome === "finished" ? "completed" : "failed") },
        el("span", { class: "what", text: "ended " + entry.outcome }), meta(entry.at), meta("after " + duration(entry.duration_ms)),
        entry.result !== null ? el("div", { class: "mono", text: "→ " + entry.result }) : null,
        entry.error ? el("div", { class: "mono failed", text: entry.error.message }) : null);
    default:
      return el("li", {}, el("span", { class: "what", text: entry.type }));
  }
}

async function saga(name, id) {
  const data = await api("GET", "sagas/" + enc(name) + "/" + enc(id));
  const d = data.describe;
  const out = [el("h1", {}, "saga " + name + " ", el("span", { class: "mono", text: id }), " ",
    el("span", { id: "status", class: "status s-" + d.status, "data-status": d.status, text: d.status }))];
  out.push(el("h2", { text: "Transitions" }));
  out.push(table(["seq", "entered", "transition", "cause", "state", "commands sent", "reason"], data.transitions.map((t) =>
    el("tr", { class: "transition", "data-seq": t.seq },
      el("td", { class: "num", text: t.seq }), el("td", { text: new Date(t.entered_at_ms).toISOString() }),
      el("td", { text: t.transition + (t.ended ? " (ended)" : "") }), el("td", { class: "value", text: t.cause || "" }),
      el("td", { class: "value", text: JSON.stringify(t.state) }),
      el("td", {}, t.commands.map((c) => el("div", { class: "mono command" },
        c.type + " → ", link("#/aggregate/" + enc(c.aggregate) + "/" + enc(c.aggregate_id), c.aggregate + " " + c.aggregate_id),
        " " + JSON.stringify(c.command) + (c.expect_within_ms ? " (expects a reply within " + duration(c.expect_within_ms) + ")" : "")))),
      el("td", { text: t.reason || "" })))));
  return { nodes: out, running: d.status === "RUNNING" };
}

async function aggregate(name, id) {
  const data = await api("GET", "aggregates/" + enc(name) + "/" + enc(id));
  return [el("h1", {}, "aggregate " + name + " ", el("span", { class: "mono", text: id }), " version " + data.version),
    table(["version", "stored", "type", "payload", "correlation"], data.events.map((e) => el("tr", { class: "event", "data-version": e.version },
      el("td", { class: "num", text: e.version }), el("td", { text: e.erased ? "erased" : e.at }), el("td", { text: e.type || "" }),
      el("td", { class: "value", text: e.erased ? "" : JSON.stringify(e.payload) }), el("td", { class: "mono", text: e.correlation_id || "" }))))];
}

async function deadletter(letterId) {
  const data = await api("GET", "deadletters/" + enc(letterId));
  const l = data.letter, r = data.replay;
  const out = [el("h1", {}, "dead letter ", el("span", { class: "mono", text: letterId }))];
  out.push(facts([
    ["error", l.error_type || (l.unreadable ? "unreadable" : "")],
    ["reason", l.reason || l.unreadable],
    ["origin", l.origin ? l.origin.topic + " partition " + l.origin.partition + " offset " + l.origin.offset : null],
    ["written", l.timestamp],
    ["key", l.key],
    ["value", el("span", { class: "mono", text: (l.value || "") + (l.value_encoding === "base64" ? " (base64)" : "") })],
    ["size", l.original_size !== undefined ? l.original_size + " bytes" + (l.truncated ? " (truncated)" : "") : null],
    ["send back", el("span", { id: "replay-verdict", text: r.allowed ? "to " + r.topic + " partition " + r.partition : "not possible: " + r.reason })],
  ]));
  if (state.session.allow_actions && r.allowed) {
    out.push(el("button", { type: "button", id: "replay", text: "Send it back to " + r.topic,
      on: { click: () => act("Send this letter's " + r.value_bytes + " bytes back to " + r.topic + " partition " + r.partition + "? The worker decides it again.",
        "POST", "deadletters/" + enc(letterId) + "/replay", { confirm: true }) } }));
  }
  return out;
}

async function schedules(params) {
  return list("schedule", params);
}

// -- routing -------------------------------------------------------------------------------------

function parseRoute() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter((p) => p !== "").map(decodeURIComponent);
  return { parts, params: new URLSearchParams(query || "") };
}

async function render(quiet) {
  clearTimeout(state.timer);
  const { parts, params } = parseRoute();
  const main = document.getElementById("main");
  if (!quiet) document.getElementById("message").hidden = true;
  let running = false, nodes;
  try {
    if (parts.length === 0) nodes = await overview();
    else if (parts[0] === "list" && parts[1] === "schedule") nodes = await schedules(params);
    else if (parts[0] === "list") nodes = await list(parts[1], params);
    else if (parts[0] === "workflow") ({ nodes, running } = await workflow(parts[1], parts[2]));
    else if (parts[0] === "saga") ({ nodes, running } = await saga(parts[1], parts[2]));
    else if (parts[0] === "aggregate") nodes = await aggregate(parts[1], parts[2]);
    else if (parts[0] === "deadletter") nodes = await deadletter(parts[1]);
    else nodes = [el("p", { text: "no such page" })];
    if (document.activeElement && main.contains(document.activeElement) && document.activeElement.matches("input, textarea, select")) {
      // The user is typing: leave the page as it is and look again later.
      state.timer = setTimeout(() => render(true), POLL_MS);
      return;
    }
    main.replaceChildren(...nodes);
    document.getElementById("updated").textContent = "updated " + new Date().toISOString().slice(11, 19) + " UTC" + (running ? " · live" : "");
  } catch (error) {
    main.replaceChildren(el("p", { class: "failed", id: "error", text: error.message }));
  }
  // A running instance and the lists are looked at again every POLL_MS: no reload needed.
  if (running || parts.length === 0 || parts[0] === "list") state.timer = setTimeout(() => render(true), running ? POLL_MS : POLL_MS * 2);
}

async function start() {
  try {
    state.session = await api("GET", "session");
  } catch (error) {
    document.getElementById("main").replaceChildren(el("p", { class: "failed", text: error.message }));
    return;
  }
  document.getElementById("app").textContent = state.session.app;
  const mode = document.getElementById("mode");
  mode.textContent = state.session.allow_actions ? "actions allowed" : "read-only";
  mode.className = state.session.allow_actions ? "actions" : "";
  window.addEventListener("hashchange", () => render(false));
  render(false);
}

document.addEventListener("DOMContentLoaded", start);
