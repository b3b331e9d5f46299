// The Engram console's page: hash routes (#/cluster, #/audit, #/entry/N, #/entity, #/jobs,
// #/access), each rendered from one of the console's JSON views. Everything the cluster says
// (values agents wrote included) is put in the page as text, never as markup.
"use strict";

const token = new URLSearchParams(location.search).get("token") || "";

function el(tag, attrs, ...children) {
  const svg = ["svg", "rect", "line", "text", "circle", "title", "g"].includes(tag);
  const node = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") node.textContent = String(v);
    else node.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return node;
}

async function view(path, params) {
  const query = new URLSearchParams(params || {}).toString();
  const resp = await fetch(`/api/${path}${query ? "?" + query : ""}`, { headers: { "X-Engram-Token": token } });
  const body = await resp.json();
  if (!resp.ok) {
    const e = body.error || {};
    throw new Error(`${resp.status}${e.code ? " " + e.code : ""}: ${e.message || "no message"}`);
  }
  return body;
}

function time(ns) {
  if (!ns) return "—";
  return new Date(Number(ns) / 1e6).toISOString().replace("T", " ").replace("Z", " UTC");
}

function short(hex) {
  return hex ? hex.slice(0, 16) : "—";
}

function seconds(s) {
  if (s === null || s === undefined) return null;
  if (typeof s === "string") return s;
  return s < 1 ? `≤ ${(s * 1000).toPrecision(3)} ms` : `≤ ${s} s`;
}

function bytes(n) {
  if (n === null || n === undefined) return null;
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

function plural(n, one, many) {
  return `${n} ${n === 1 ? one : many}`;
}

function table(headers, rows) {
  return el("table", {}, el("tr", {}, headers.map((h) => el("th", { text: h }))), rows);
}

function td(value, cls) {
  return el("td", { class: cls || (typeof value === "number" ? "num" : null), text: value === null || value === undefined ? "—" : value });
}

function show(name, ...content) {
  const main = document.getElementById("view");
  main.replaceChildren(...content.flat().filter((c) => c !== null && c !== undefined));
  main.dataset.view = name;
  main.dataset.state = "ready";
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.nav === name);
}

function fail(name, err) {
  const main = document.getElementById("view");
  main.replaceChildren(el("h1", { text: name }), el("p", { class: "error", id: "error", text: String(err.message || err) }));
  main.dataset.view = name;
  main.dataset.state = "error";
}

async function cluster() {
  const c = await view("cluster");
  const reachable = c.nodes.filter((n) => n.reachable);
  const chain = Math.max(0, ...reachable.map((n) => n.chain_index));
  const behind = Math.max(0, ...reachable.map((n) => n.behind_entries || 0));
  const unpurged = reachable.filter((n) => n.redactions_applied_index > n.redactions_purged_index).length;
  const card = (figure, label, id) => el("div", { class: "card", id }, el("div", { class: "figure", text: figure }), el("div", { class: "label", text: label }));
  const rows = c.nodes.map((n) =>
    n.reachable
      ? el("tr", { "data-node": n.node_id },
          td(n.node_id), td(n.endpoint), td(n.role), td(n.term), td(n.applied_index), td(n.behind_entries),
          td(n.chain_index), el("td", { class: "hash", text: short(n.chain_head) }),
          el("td", { class: n.ready ? "ok" : "bad", text: n.ready ? "ready" : "not ready: " + n.not_ready }),
          td(`${n.redactions_applied_index} / ${n.redactions_purged_index}`))
      : el("tr", { class: "tampered" }, td("—"), td(n.endpoint), el("td", { colspan: 8, class: "bad", text: n.error })));
  const members = reachable.length ? reachable[0].members : [];
  const metricRows = reachable.map((n) => {
    const m = n.metrics;
    if (!m) return el("tr", { "data-metrics": n.node_id }, td(n.node_id), el("td", { colspan: 10, class: "bad", text: n.metrics_refused }));
    const bad = (v) => (v ? "bad num" : "num");
    return el("tr", { "data-metrics": n.node_id },
      td(n.node_id), td(m.requests), td(m.requests_failed), td(seconds(m.request_p99_seconds)),
      td(seconds(m.log_sync_p99_seconds)), td(bytes(m.store_bytes)), td(m.watches_open),
      td(m.watch_lag_entries), td(m.search_lag_entries), td(m.storage_corruptions, bad(m.storage_corruptions)),
      td(m.jobs_failed, bad(m.jobs_failed)));
  });
  show("cluster",
    el("h1", { text: "Cluster" }),
    el("div", { class: "cards" },
      card(c.leaders.length ? "node " + c.leaders.join(", ") : "none", "leader", "leader"),
      card(members.length, "members", "members"),
      card(chain, "audit entries (longest chain)", "chain"),
      card(behind, "entries the slowest node is behind", "behind"),
      card(unpurged, "nodes with a purge to do", "unpurged")),
    el("h2", { text: "Alarms" }),
    c.alarms.length
      ? el("ul", { id: "alarms" }, c.alarms.map((a) => el("li", { class: "bad", text: a })))
      : el("p", { id: "alarms", class: "ok", text: "No alarms." }),
    el("h2", { text: "Nodes" }),
    table(["Node", "Endpoint", "Role", "Term", "Applied", "Behind", "Chain entries", "Chain head", "Ready", "Redactions applied / purged"], rows),
    el("h2", { text: "Metrics" }),
    el("p", { class: "note", text: "Totals since each node started, from its metrics; a p99 is the bound of the histogram bucket that holds it." }),
    table(["Node", "Calls", "Failed", "Call p99", "Log sync p99", "Store", "Watches", "Watch lag", "Search lag", "Corruptions", "Jobs failed"], metricRows),
    el("h2", { text: "Members" }),
    table(["Id", "Address", "Voter"], members.map((m) => el("tr", {}, td(m.id), td(m.addr), td(m.voter ? "yes" : "learner")))));
}

async function audit(params) {
  const a = await view("audit", params);
  const rows = a.entries.slice().reverse().map((e) =>
    el("tr", { class: e.intact ? null : "tampered", "data-index": e.index, "data-intact": String(e.intact) },
      el("td", { class: "num" }, el("a", { href: `#/entry/${e.index}`, text: e.index })),
      td(e.tx), td(time(e.tx_time_ns)), td(e.namespace || "—", "namespace"), td(e.kind), td(e.datoms), td(e.author),
      el("td", { class: "hash", text: short(e.hash) }),
      el("td", { class: e.intact ? "check ok" : "check bad", text: e.intact ? "intact" : "TAMPERED: " + e.problems.join("; ") })));
  const nav = [];
  if (a.from > 1) {
    const older = Math.max(1, a.from - a.entries.length);
    nav.push(el("a", { href: `#/audit?from=${older}`, id: "older", text: "← older" }), " ");
  }
  const last = a.from + a.entries.length - 1;
  if (last < a.head) nav.push(el("a", { href: `#/audit?from=${last + 1}`, id: "newer", text: "newer →" }));
  const tampered = a.entries.filter((e) => !e.intact).length;
  show("audit",
    el("h1", { text: `Audit log of ${a.endpoint}` }),
    el("p", { class: tampered ? "banner bad" : "banner ok", id: "summary",
      text: tampered
        ? `${tampered} of ${a.entries.length} entries do not match their hashes or links`
        : `Entries ${a.from}–${last} of ${a.head}: each entry's bytes hash to its listed hash and link to the entry before.` }),
    el("p", {}, nav),
    table(["Index", "Tx", "Time", "Namespace", "Kind", "Datoms", "Signed by", "Hash", "Check"], rows),
    el("p", { class: "muted", text: "Open an entry to prove it against a signed checkpoint, step by step." }));
}

async function entry(index) {
  const p = await view("entry", { index });
  const steps = p.steps.map((s) =>
    el("li", { "data-ok": String(s.ok) }, el("span", { class: s.ok ? "ok" : "bad", text: s.ok ? "✓ " : "✗ " }), el("strong", { text: s.title }), el("span", { class: "detail", text: s.detail })));
  const e = p.entry;
  show("entry",
    el("h1", { text: `Audit entry ${p.index}` }),
    el("div", { class: p.verified ? "banner ok" : "banner bad", id: "verdict", "data-verdict": p.verified ? "verified" : "failed",
      text: p.verified
        ? `Verified: entry ${p.index} is in the log of ${p.checkpoint.size} entries the node signed, checked on this machine.`
        : `NOT verified: ${(p.steps.find((s) => !s.ok) || { detail: "no proof" }).detail}` }),
    e ? table(["Tx", "Time", "Namespace", "Kind", "Hash", "Links to"], [el("tr", {}, td(e.tx), td(time(e.tx_time_ns)), td(e.namespace || "—", "namespace"), td(e.kind), el("td", { class: "hash", text: e.hash }), el("td", { class: "hash", text: e.prev_hash }))]) : null,
    el("h2", { text: "The proof, step by step" }),
    el("ol", { class: "steps", id: "steps" }, steps),
    p.checkpoint ? el("details", {}, el("summary", { text: "The signed checkpoint" }), el("pre", { text: p.checkpoint.note })) : null,
    el("p", {}, el("a", { href: `#/audit?from=${Math.max(1, p.index - 10)}`, text: "← back to the log" })));
}

function entityForm(ns, entity) {
  const form = el("form", { id: "entity-form" },
    el("input", { name: "ns", placeholder: "namespace", value: ns || "" }),
    el("input", { name: "entity", placeholder: "entity id", value: entity || "" }),
    el("button", { type: "submit", text: "Show timeline" }));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.hash = `#/entity?${new URLSearchParams({ ns: form.ns.value, entity: form.entity.value })}`;
  });
  return form;
}

// Valid time across, one row per attribute (and branch); each assertion a bar from its valid
// start to its valid end (or to the right edge while it holds), each retraction a mark.
function timelineSvg(datoms) {
  const rowsOf = [...new Set(datoms.map((d) => (d.branch ? d.branch + " " : "") + d.attribute))];
  const starts = datoms.map((d) => Number(d.valid_from_ns));
  const ends = datoms.map((d) => Number(d.valid_to_ns || d.valid_from_ns));
  const lo = Math.min(...starts), last = Math.max(...ends, ...starts);
  // A tenth more on the right, so the newest datoms show as bars, not as slivers at the edge.
  const span = Math.max((last - lo) * 1.1, 1), hi = lo + span;
  const width = 900, left = 220, rowH = 26, height = rowsOf.length * rowH + 48;
  const x = (ns) => left + ((Number(ns) - lo) / span) * (width - left - 20);
  const svg = el("svg", { class: "timeline", width, height, viewBox: `0 0 ${width} ${height}`, id: "timeline" });
  rowsOf.forEach((r, i) => svg.appendChild(el("text", { x: 6, y: 20 + i * rowH + 12, text: r })));
  for (const d of datoms) {
    const row = rowsOf.indexOf((d.branch ? d.branch + " " : "") + d.attribute);
    const y = 20 + row * rowH;
    const color = d.redacted ? "#8c959f" : d.conflict ? "#bf8700" : d.current ? "#1a7f37" : "#0969da";
    const label = `tx ${d.tx} ${d.op} ${d.value === null ? "[" + (d.redacted || "no value") + "]" : d.value} by ${d.agent}`;
    if (d.op === "retract") {
      svg.appendChild(el("line", { x1: x(d.valid_from_ns), x2: x(d.valid_from_ns), y1: y, y2: y + 16, stroke: "#cf222e", "stroke-width": 3 }, el("title", { text: label })));
    } else {
      const end = d.valid_to_ns ? x(d.valid_to_ns) : width - 20;
      svg.appendChild(el("rect", { x: x(d.valid_from_ns), y, width: Math.max(end - x(d.valid_from_ns), 4), height: 16, fill: color, opacity: 0.75 }, el("title", { text: label })));
    }
  }
  svg.appendChild(el("text", { x: left, y: height - 22, text: time(lo) }));
  svg.appendChild(el("text", { x: width - 200, y: height - 22, text: time(hi) }));
  const legend = [["#1a7f37", "current"], ["#bf8700", "disagrees with the current value"], ["#0969da", "earlier, or on a branch"], ["#8c959f", "redacted"], ["#cf222e", "retraction"]];
  let at = 6;
  for (const [color, label] of legend) {
    svg.appendChild(el("rect", { x: at, y: height - 14, width: 10, height: 10, fill: color }));
    svg.appendChild(el("text", { x: at + 14, y: height - 5, text: label }));
    at += 34 + label.length * 6;
  }
  return svg;
}

async function entity(params) {
  if (!params.ns || !params.entity) {
    show("entity", el("h1", { text: "Entity timeline" }), entityForm(params.ns, params.entity));
    return;
  }
  const t = await view("entity", params);
  const rows = t.datoms.slice().sort((a, b) => a.tx - b.tx).map((d) =>
    el("tr", { class: d.conflict ? "conflict" : d.current ? "current" : null, "data-tx": d.tx, "data-attribute": d.attribute },
      td(d.tx), td(d.branch || "main"), td(d.attribute), td(d.op),
      td(d.value === null ? `[${d.redacted}${d.redacted_by_tx ? " by tx " + d.redacted_by_tx : ""}]` : d.value),
      td(time(d.valid_from_ns)), td(d.valid_to_ns ? time(d.valid_to_ns) : "open"), td(d.agent),
      td(d.conflict ? "disagrees with the current value" : d.current ? "current" : "")));
  const conflicts = t.datoms.filter((d) => d.conflict).length;
  show("entity",
    el("h1", { text: `Entity ${t.entity} in ${t.namespace}` }),
    entityForm(t.namespace, t.entity),
    el("p", { id: "entity-summary", text: `${plural(t.datoms.length, "datom", "datoms")}; ${conflicts === 1 ? "1 claim disagrees" : conflicts + " claims disagree"} with the current value; ${t.branches.length} of ${plural(t.branches_in_namespace, "branch", "branches")} wrote to it; read at tx ${t.applied_tx}${t.truncated ? " (the first datoms only)" : ""}.` }),
    el("h2", { text: "Valid time" }),
    timelineSvg(t.datoms),
    el("h2", { text: "Transaction time" }),
    table(["Tx", "Branch", "Attribute", "Op", "Value", "Valid from", "Valid to", "Agent", ""], rows));
}

function perNode(nodes, render) {
  return nodes.map((n) =>
    n.error
      ? el("div", {}, el("h2", { text: n.endpoint }), el("p", { class: "error", text: `${n.code || ""} ${n.error}` }))
      : el("div", { "data-node": n.node_id }, el("h2", { text: `Node ${n.node_id} (${n.endpoint})` }), render(n)));
}

async function jobs() {
  const j = await view("jobs", { limit: 50 });
  show("jobs", el("h1", { text: "Jobs" }), perNode(j.nodes, (n) =>
    table(["Seq", "Kind", "Outcome", "Started", "Took", "Subject", "Figures"], n.jobs.map((job) =>
      el("tr", { class: job.outcome === "failed" ? "tampered" : null },
        td(job.seq), td(job.kind), td(job.error ? `${job.outcome}: ${job.error}` : job.outcome, job.outcome === "failed" ? "bad" : null),
        td(time(job.started_ns)), td(job.ended_ns ? `${((job.ended_ns - job.started_ns) / 1e6).toFixed(1)} ms` : "—"),
        td(job.subject), td(Object.entries(job.figures).map(([k, v]) => `${k}=${v}`).join(" ")))))));
}

async function access(params) {
  const refused = params.refused === "1";
  const a = await view("access", refused ? { limit: 100, refused: 1 } : { limit: 100 });
  show("access", el("h1", { text: refused ? "Refused calls" : "Access log" }),
    el("p", {}, el("a", { href: refused ? "#/access" : "#/access?refused=1", text: refused ? "show every call" : "show refusals only" })),
    perNode(a.nodes, (n) => el("div", {},
      el("p", { class: "muted", text: `logging: ${n.logged_prefixes.length ? n.logged_prefixes.join(", ") : "nothing but refusals"}; last event ${n.head_seq}` }),
      table(["Seq", "Time", "Principal", "Call", "Namespace", "Entity", "Datoms", "Refused"], n.events.map((e) =>
        el("tr", { class: e.refused_code ? "refused" : null },
          td(e.seq), td(time(e.time_ns)), td(e.principal || "(unsigned)"), td(e.call), td(e.namespace || "—"),
          td(e.entity), td(e.datoms), td(e.refused_code ? `${e.refused_code}: ${e.refused_reason}` : "")))))));
}

async function route() {
  const [path, query] = (location.hash.slice(1) || "/cluster").split("?");
  const params = Object.fromEntries(new URLSearchParams(query || ""));
  const parts = path.split("/").filter(Boolean);
  const name = parts[0] || "cluster";
  document.getElementById("view").dataset.state = "loading";
  try {
    if (name === "cluster") await cluster();
    else if (name === "audit") await audit(params);
    else if (name === "entry") await entry(parts[1]);
    else if (name === "entity") await entity(params);
    else if (name === "jobs") await jobs();
    else if (name === "access") await access(params);
    else throw new Error(`no page ${path}`);
  } catch (err) {
    fail(name, err);
  }
}

window.addEventListener("hashchange", route);
route();
