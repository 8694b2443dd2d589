"""The console page (controller/console/app.py serves it): HTML, JavaScript and CSS as strings.

No build step and no asset from the internet. The script polls `/api/cluster` every second and
redraws with DOM calls and `textContent` only (names come from brokers and clients: never
parsed as HTML). Stable hooks for tests and scripts: `#replica-sets [data-replica-set=NAME]
.master-address`, `#controllers`, `#topics`, `#tables` (rows `[data-table=TOPIC]`), `#groups`,
`#elections`, `#updated`.
"""

from __future__ import annotations

import html

__all__ = ["CONSOLE_CSS", "CONSOLE_HTML", "CONSOLE_JS", "login_page"]

CONSOLE_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>rocketha console</title>
<link rel="stylesheet" href="/console.css">
</head>
<body>
<header>
  <h1>rocketha</h1>
  <span id="updated">connecting...</span>
  <span id="leader"></span>
  <form id="logout" method="post" action="/logout" hidden>
    <span id="viewer"></span>
    <input type="hidden" name="csrf" id="logout-csrf">
    <button type="submit">Log out</button>
  </form>
</header>
<main>
  <section><h2>Controllers</h2><table id="controllers"></table></section>
  <section><h2>Replica sets</h2><div id="replica-sets"></div></section>
  <section><h2>Topics</h2><table id="topics"></table></section>
  <section><h2>Topic tables</h2><table id="tables"></table></section>
  <section><h2>Consumer groups</h2><table id="groups"></table></section>
  <section><h2>Recent master elections</h2><table id="elections"></table></section>
  <section id="errors-section"><h2>Unreachable</h2><ul id="errors"></ul></section>
</main>
<script src="/console.js"></script>
</body>
</html>
"""

CONSOLE_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1b1f24; background: #f6f7f9; }
header { display: flex; gap: 1.5em; align-items: baseline; padding: .6em 1.2em;
         background: #20252b; color: #fff; }
header h1 { font-size: 1.2em; margin: 0; }
#updated.stale { color: #ff8a80; }
main { padding: .5em 1.2em 2em; }
h2 { font-size: 1.05em; margin: 1.2em 0 .4em; }
h3 { font-size: 1em; margin: .8em 0 .3em; }
table { border-collapse: collapse; background: #fff; min-width: 40em; }
th, td { border: 1px solid #d8dde3; padding: .25em .6em; text-align: left; }
th { background: #eef1f4; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.replica-set { background: #fff; border: 1px solid #d8dde3; padding: .4em .8em .8em;
               margin-bottom: .8em; }
.role-MASTER { color: #0a7c2f; font-weight: 600; }
.role-SLAVE { color: #1f5fbf; }
.dead, .bad { color: #c62828; font-weight: 600; }
.muted { color: #6b7480; }
#errors-section.empty { display: none; }
#logout { margin-left: auto; }
#logout button { margin-left: .6em; }
.login { max-width: 24em; margin: 3em auto; background: #fff; border: 1px solid #d8dde3;
         padding: 1em 1.4em 1.4em; }
.login label { display: block; margin: .8em 0 .2em; }
.login input[type=text], .login input[type=password] { width: 100%; box-sizing: border-box; }
.login button { margin-top: 1.2em; }
.login .refusal { color: #c62828; font-weight: 600; }
"""

CONSOLE_JS = r"""
"use strict";
const REFRESH_MS = 1000;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function fill(table, headers, rows) {
  table.replaceChildren();
  const head = el("tr");
  headers.forEach((h) => head.appendChild(el("th", h)));
  table.appendChild(head);
  if (rows.length === 0) {
    const tr = el("tr");
    const td = el("td", "none", "muted");
    td.colSpan = headers.length;
    tr.appendChild(td);
    table.appendChild(tr);
  }
  rows.forEach((cells) => {
    const tr = el("tr");
    cells.forEach((cell) => {
      if (cell instanceof Node) { const td = el("td"); td.appendChild(cell); tr.appendChild(td); }
      else tr.appendChild(el("td", cell === undefined || cell === null ? "-" : cell,
                              typeof cell === "number" ? "num" : ""));
    });
    table.appendChild(tr);
  });
}

function time(ms) { return ms ? new Date(ms).toLocaleTimeString() : "-"; }

function drawControllers(view) {
  fill(document.getElementById("controllers"),
       ["node", "address", "role", "term", "leader", "commit index", "applied index"],
       view.controllers.map((c) => c.reachable
         ? ["n" + c.node_id, c.address,
            el("span", c.role, c.role === "leader" ? "role-MASTER" : ""), c.term,
            c.leader_id === null ? "none" : "n" + c.leader_id, c.commit_index, c.applied_index]
         : ["?", c.address, el("span", "unreachable", "dead"), null, null, null, null]));
  const leader = document.getElementById("leader");
  leader.textContent = view.leader ? "Raft leader n" + view.leader.node_id + " @ " +
    view.leader.address : "no Raft leader";
}

function drawReplicaSets(view) {
  const box = document.getElementById("replica-sets");
  box.replaceChildren();
  if (view.replica_sets.length === 0) {
    box.appendChild(el("p", "no replica set registered", "muted"));
  }
  view.replica_sets.forEach((rs) => {
    const card = el("div", null, "replica-set");
    card.dataset.replicaSet = rs.name;
    const title = el("h3");
    title.appendChild(el("span", rs.name + " - master "));
    if (rs.master_broker_id === null) {
      title.appendChild(el("span", "none (offline)", "bad master-address"));
    } else {
      title.appendChild(el("span", rs.master_address, "role-MASTER master-address"));
      title.appendChild(el("span", " (broker " + rs.master_broker_id + ")"));
    }
    title.appendChild(el("span", ", epoch " + rs.master_epoch + ", SyncStateSet [" +
      rs.sync_state_set.join(", ") + "] (epoch " + rs.sync_state_set_epoch + ")", "muted"));
    card.appendChild(title);
    const table = el("table");
    fill(table, ["broker", "address", "role", "alive", "in SyncStateSet", "epoch",
                 "max position", "confirm position", "lag (bytes)"],
         rs.brokers.map((b) => [b.broker_id, b.address,
           el("span", b.role || (b.alive ? "?" : "DOWN"), "role-" + (b.role || "x")),
           el("span", b.alive ? "yes" : "no", b.alive ? "" : "dead"),
           b.in_sync_state_set ? "yes" : "no", b.master_epoch, b.max_log_position,
           b.confirm_log_position, b.lag_bytes]));
    card.appendChild(table);
    const tier = rs.tier || {};
    card.appendChild(el("p", tier.enabled
      ? "tier " + tier.url + ": " + (tier.state || "?") + ", " + (tier.uploaded_segments ?? 0) +
        " segment(s) uploaded, " + (tier.pending_segments ?? 0) + " waiting, " +
        (tier.upload_failures ?? 0) + " failed upload(s)" +
        (tier.last_error ? ", last error: " + tier.last_error : "")
      : "tier: off", "muted"));
    box.appendChild(card);
  });
}

function drawTopics(view) {
  fill(document.getElementById("topics"),
       ["topic", "replica set", "queues (read/write)", "perm", "messages", "per queue (min-max)"],
       view.topics.map((t) => [t.name, t.replica_set, t.read_queue_nums + "/" + t.write_queue_nums,
         t.perm, t.messages, t.queues.map((q) => q.queue_id + ": " + q.min_queue_offset + "-" +
           q.max_queue_offset).join("  ")]));
}

function drawTables(view) {
  const table = document.getElementById("tables");
  fill(table, ["topic", "replica set", "lag (messages)", "lag (seconds)", "last commit",
               "version", "commits", "rows", "last error", "table"],
       view.tables.map((t) => [t.topic, t.replica_set, t.lag_messages, t.lag_seconds,
         time(t.last_commit_ms), t.last_version, t.commits, t.rows,
         t.last_error || t.maintenance_error ? el("span", [
             t.last_error ? t.last_error + " (at " + time(t.last_error_ms) + (
               t.failures_in_a_row ? ", " + t.failures_in_a_row + " failed pass(es) in a row)"
                 : ", passes succeed since)") : "",
             t.maintenance_error ? "upkeep: " + t.maintenance_error : ""].filter(Boolean)
             .join("; "), t.failures_in_a_row || t.maintenance_error ? "bad" : "muted")
           : "none",
         t.uri]));
  const rows = table.querySelectorAll("tr");
  view.tables.forEach((t, i) => { rows[i + 1].dataset.table = t.topic; });
}

function drawGroups(view) {
  fill(document.getElementById("groups"),
       ["group", "topic", "replica set", "lag (messages)", "per queue (committed/end)"],
       view.groups.map((g) => [g.group, g.topic, g.replica_set, g.lag,
         g.queues.map((q) => q.queue_id + ": " + q.committed + "/" + q.max_queue_offset +
           " (lag " + q.lag + ")").join("  ")]));
}

function drawElections(view) {
  fill(document.getElementById("elections"),
       ["applied at", "replica set", "epoch", "new master", "Raft entry"],
       view.elections.map((e) => [time(e.applied_at_ms), e.broker_name, e.master_epoch,
         e.master_broker_id === null ? "none (no eligible broker)"
           : "broker " + e.master_broker_id + " @ " + e.master_address, e.entry_index]));
}

function drawErrors(view) {
  const list = document.getElementById("errors");
  list.replaceChildren();
  view.errors.forEach((text) => list.appendChild(el("li", text)));
  document.getElementById("errors-section").className = view.errors.length ? "" : "empty";
}

async function refresh() {
  const updated = document.getElementById("updated");
  try {
    const response = await fetch("/api/cluster", {cache: "no-store"});
    if (response.status === 401) {  // the session expired or ended: log in again
      window.location.assign("/login");
      return;
    }
    if (!response.ok) throw new Error("HTTP " + response.status);
    const view = await response.json();
    drawControllers(view);
    drawReplicaSets(view);
    drawTopics(view);
    drawTables(view);
    drawGroups(view);
    drawElections(view);
    drawErrors(view);
    updated.textContent = "updated " + time(view.generated_at_ms);
    updated.className = "";
  } catch (err) {
    updated.textContent = "console unreachable (" + err.message + "); retrying";
    updated.className = "stale";
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}

async function showViewer() {  // who is logged in, and the token "Log out" must carry
  const response = await fetch("/api/session", {cache: "no-store"});
  if (!response.ok) return;
  const session = await response.json();
  if (!session.user) return;
  document.getElementById("viewer").textContent = session.user;
  document.getElementById("logout-csrf").value = session.csrf;
  document.getElementById("logout").hidden = false;
}

showViewer().catch(() => {});
refresh();
"""


def login_page(csrf: str, refusal: str = "") -> str:
    """The login form (no script: the strict Content-Security-Policy holds); `refusal` is the
    one line saying why the last attempt failed. Both are escaped."""
    line = f'<p class="refusal" id="refusal">{html.escape(refusal)}</p>' if refusal else ""
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>rocketha console: log in</title>
<link rel="stylesheet" href="/console.css">
</head>
<body>
<header><h1>rocketha</h1></header>
<main>
<form class="login" method="post" action="/login" autocomplete="off">
  <h2>Log in to view the cluster</h2>
  {line}
  <label for="access_key">Access key</label>
  <input type="text" id="access_key" name="access_key" required>
  <label for="secret_key">Secret key</label>
  <input type="password" id="secret_key" name="secret_key" required>
  <input type="hidden" name="csrf" value="{html.escape(csrf)}">
  <button type="submit" id="login-button">Log in</button>
</form>
</main>
</body>
</html>
"""
