// scanstore console: a small single-page app over the read API. No framework, no build.
// Every value from the server is inserted as text (createTextNode / textContent), never
// parsed as HTML. The owner token lives only in sessionStorage.
"use strict";

(function () {
  const TOKEN_KEY = "scanstore.token";
  const POLL_MS = 2000;
  const UNSETTLED = ["pending", "running", "retrying"];
  const main = document.getElementById("main");
  // Bumped on every navigation, so a poll of a page left behind stops by itself.
  let generation = 0;

  // ---- DOM helpers (text only) ----
  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }
  function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); return el; }
  function badge(status, attrs) {
    return h("span", Object.assign({ class: "badge " + String(status || "").replace(/[^a-z_]/g, "") }, attrs || {}),
      String(status || "—").replace(/_/g, " "));
  }
  function when(t) {
    if (!t) return "—";
    const d = new Date(t);
    return isNaN(d) ? String(t) : d.toLocaleString();
  }
  function num(n) { return typeof n === "number" ? n.toLocaleString() : "—"; }
  function shortId(id) { return String(id || "").slice(0, 8); }

  // ---- API ----
  function token() { return sessionStorage.getItem(TOKEN_KEY); }
  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }
  async function api(path) {
    const r = await fetch(path, { headers: { Authorization: "Bearer " + token() } });
    let body = null;
    try { body = await r.json(); } catch (_) { body = null; }
    if (r.status === 401) { signOut("Your token was not accepted. Sign in again."); throw new ApiError(401, "unauthorized"); }
    if (!r.ok) {
      const msg = body && body.error && body.error.message ? body.error.message : "HTTP " + r.status;
      throw new ApiError(r.status, msg);
    }
    return body;
  }
  function failure(e) { return h("p", { class: "notice", role: "alert" }, e.message || String(e)); }

  // ---- sign in ----
  function signOut(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    renderSignIn(message);
  }
  function renderSignIn(message) {
    generation++;
    document.getElementById("nav").hidden = true;
    const input = h("input", { type: "password", id: "token", autocomplete: "off", required: true, placeholder: "own_…" });
    const form = h("form", { class: "stack", id: "signin-form", onsubmit: async (ev) => {
      ev.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      try {
        await api("/api/v1/tasks?size=1");
        route();
      } catch (e) {
        if (e.status !== 401) { sessionStorage.removeItem(TOKEN_KEY); form.prepend(failure(e)); }
      }
    } },
      h("label", {}, "Owner API token", input),
      h("div", { class: "actions" }, h("button", { class: "primary", type: "submit" }, "Sign in")));
    clear(main).appendChild(h("div", { class: "panel signin" },
      h("h1", {}, "Sign in"),
      h("p", { class: "sub" }, "Use your owner token. It is kept only in this browser tab."),
      message ? h("p", { class: "notice" }, message) : null,
      form));
    input.focus();
  }

  // ---- task list ----
  function targetsCell(t) {
    const shown = (t.targets || []).slice(0, 3).map((x) => h("span", { class: "chip mono" }, x.value));
    const more = t.targets_total > shown.length ? h("span", { class: "muted" }, "+" + (t.targets_total - shown.length)) : null;
    return h("td", {}, shown, more);
  }
  function tagsCell(tags) {
    return h("td", { class: "tags" }, (tags || []).map((x) => h("span", { class: "chip" }, x)));
  }
  async function renderTasks() {
    const gen = ++generation;
    const tbody = h("tbody");
    const more = h("button", { class: "secondary", type: "button", hidden: true }, "Load more");
    const panel = h("div", { class: "panel" },
      h("table", { id: "tasks" },
        h("thead", {}, h("tr", {}, h("th", {}, "Task"), h("th", {}, "Kind"), h("th", {}, "Status"),
          h("th", {}, "Targets"), h("th", {}, "Tags"), h("th", { class: "num" }, "Endpoints"),
          h("th", {}, "Assets"), h("th", {}, "Created"))),
        tbody),
      h("div", { class: "actions" }, more));
    clear(main).append(h("h1", {}, "Tasks"), h("p", { class: "sub" }, "Your scan tasks, newest first."), panel);
    let next = null;
    async function load() {
      more.hidden = true;
      try {
        const body = await api("/api/v1/tasks?size=50" + (next ? "&after=" + encodeURIComponent(next) : ""));
        if (gen !== generation) return;
        for (const t of body.tasks) {
          tbody.appendChild(h("tr", { "data-task": t.id },
            h("td", {}, h("a", { href: "#/tasks/" + encodeURIComponent(t.id), class: "mono" }, shortId(t.id))),
            h("td", {}, t.kind.replace(/_/g, " ")),
            h("td", {}, badge(t.status)),
            targetsCell(t), tagsCell(t.tags),
            h("td", { class: "num" }, num(t.counters.endpoints_total)),
            h("td", {}, badge(t.projection_status)),
            h("td", { class: "muted" }, when(t.created_at))));
        }
        if (!tbody.firstChild) tbody.appendChild(h("tr", {}, h("td", { colspan: 8, class: "empty" }, "No tasks yet.")));
        next = body.next;
        more.hidden = !next;
      } catch (e) { panel.prepend(failure(e)); }
    }
    more.addEventListener("click", load);
    await load();
  }

  // ---- task page ----
  function stat(k, v) { return h("div", { class: "stat" }, h("div", { class: "k" }, k), h("div", { class: "v" }, v)); }
  function executionRow(e) {
    const p = e.projection || {};
    return h("tr", { "data-execution": e.id },
      h("td", { class: "mono" }, shortId(e.id)),
      h("td", {}, badge(e.status),
        e.failure_reason ? h("div", { class: "muted", "data-failure-reason": "" }, e.failure_reason) : null),
      h("td", { class: "num", title: e.lease_expires_at ? "lease until " + when(e.lease_expires_at) : "" }, num(e.attempts)),
      h("td", { class: "num" }, num(e.counts.endpoints)),
      h("td", { class: "num" }, num(e.counts.dns_records)),
      h("td", { class: "muted" }, when(e.started_at)),
      h("td", { class: "muted" }, when(e.finished_at)),
      h("td", {}, badge(e.projection_status, { "data-projection-status": e.projection_status })),
      h("td", { class: "num" }, num(p.processed_endpoints)),
      h("td", { class: "num", "data-closed": "" }, e.closing
        ? h("span", { title: "close run " + e.closing.status }, num(e.closing.closed_endpoints))
        : h("span", { class: "muted", title: "no port scope: closes nothing" }, "—")),
      h("td", { class: "num" }, num(p.attempts)),
      h("td", {}, p.last_error_class ? badge(p.last_error_class) : h("span", { class: "muted" }, "—")));
  }
  async function renderTask(id) {
    const gen = ++generation;
    const head = h("div", { class: "panel", id: "task-head" }, h("p", { class: "muted" }, "Loading…"));
    const live = h("span", { class: "live", id: "live" }, h("span", { class: "dot" }), h("span", {}, ""));
    const execBody = h("tbody");
    const execPanel = h("div", { class: "panel" },
      h("div", { class: "panel-head" }, h("h2", {}, "Executions"), live),
      h("table", { id: "executions" },
        h("thead", {}, h("tr", {}, h("th", {}, "Execution"), h("th", {}, "Status"), h("th", { class: "num" }, "Claims"), h("th", { class: "num" }, "Endpoints"),
          h("th", { class: "num" }, "DNS"), h("th", {}, "Started"), h("th", {}, "Finished"), h("th", {}, "Asset publication"),
          h("th", { class: "num" }, "Published"), h("th", { class: "num" }, "Closed"), h("th", { class: "num" }, "Attempts"), h("th", {}, "Last error"))),
        execBody));
    const resultsPanel = h("div", { class: "panel", id: "results" });
    clear(main).append(h("a", { href: "#/tasks", class: "crumb" }, "← All tasks"), head, execPanel, resultsPanel);

    async function refresh() {
      if (gen !== generation) return;
      let settled = true;
      try {
        const [task, execs] = await Promise.all([
          api("/api/v1/tasks/" + encodeURIComponent(id)),
          api("/api/v1/tasks/" + encodeURIComponent(id) + "/executions?size=200"),
        ]);
        if (gen !== generation) return;
        clear(head).append(
          h("div", { class: "panel-head" },
            h("h1", {}, "Task ", h("span", { class: "mono" }, task.id)),
            h("span", {}, badge(task.status), " ", badge(task.projection_status, { id: "task-projection" }))),
          h("p", { class: "sub" }, task.kind.replace(/_/g, " "), " · created ", when(task.created_at)),
          h("div", {}, (task.targets || []).map((x) => h("span", { class: "chip mono" }, x.value)),
            task.targets_total > (task.targets || []).length ? h("span", { class: "muted" }, " and " + (task.targets_total - task.targets.length) + " more") : null),
          h("div", { class: "tags" }, (task.tags || []).map((x) => h("span", { class: "chip" }, x))),
          h("div", { class: "grid" },
            stat("Executions", num(task.counters.executions_total)),
            stat("Succeeded", num(task.counters.executions_succeeded)),
            stat("Endpoints", num(task.counters.endpoints_total)),
            stat("DNS records", num(task.counters.dns_records_total))));
        clear(execBody);
        for (const e of execs.executions) execBody.appendChild(executionRow(e));
        if (!execs.executions.length) execBody.appendChild(h("tr", {}, h("td", { colspan: 12, class: "empty" }, "No executions yet.")));
        settled = !execs.executions.some((e) => UNSETTLED.includes(e.projection_status));
      } catch (e) {
        if (e.status === 401) return;
        execPanel.prepend(failure(e));
        settled = false;
      }
      live.classList.toggle("on", !settled);
      live.setAttribute("data-state", settled ? "settled" : "refreshing");
      live.lastChild.textContent = settled ? "Publication settled" : "Publishing assets — refreshing every 2 s";
      if (!settled) setTimeout(refresh, POLL_MS);
    }
    await refresh();
    renderResults(resultsPanel, id, gen);
  }

  // nmap's notation for a service reached through TLS: ssl/http.
  function serviceName(e) { return e.service ? (e.tunnel ? e.tunnel + "/" + e.service : e.service) : null; }
  function stateBadge(state) { return h("span", { class: "state " + (state || "open") }, state || "open"); }
  function endpointChip(e) {
    const what = [serviceName(e), e.product, e.version].filter(Boolean).join(" ");
    const title = [e.banner, (e.cpe || []).join(" ")].filter(Boolean).join("\n");
    return h("span", { class: "chip", title: title },
      h("b", {}, e.port + "/" + e.transport), what ? " " + what : "",
      e.state && e.state !== "open" ? [" ", stateBadge(e.state)] : null);
  }
  // What a scanner knew beyond the service: CPEs, hostnames, extra info, and script output
  // collapsed. Text nodes only, whatever the scanner wrote.
  function detailsCell(a) {
    const parts = [];
    if (a.cpe && a.cpe.length) parts.push(h("div", { "data-cpe": "" }, a.cpe.map((c) => h("span", { class: "chip mono" }, c))));
    if (a.hostnames && a.hostnames.length) {
      parts.push(h("div", { class: "muted", "data-hostnames": "" }, a.hostnames.map((n) => n.name + (n.source === "ptr" ? " (PTR)" : "")).join(", ")));
    }
    if (a.extra_info) parts.push(h("div", { class: "muted" }, a.extra_info));
    if (a.scripts && a.scripts.length) {
      parts.push(h("details", { "data-scripts": "" },
        h("summary", {}, a.scripts.length === 1 ? "1 script" : a.scripts.length + " scripts"),
        a.scripts.map((x) => h("pre", {}, x.id + ": " + x.output))));
    }
    return h("td", { class: "details" }, parts.length ? parts : "—");
  }
  async function renderResults(panel, id, gen) {
    const summary = h("span", { class: "muted", id: "results-summary" });
    const tbody = h("tbody");
    const more = h("button", { class: "secondary", type: "button", hidden: true }, "Load more IPs");
    clear(panel).append(
      h("div", { class: "panel-head" }, h("h2", {}, "Results by IP"), summary),
      h("table", { id: "results-table" },
        h("thead", {}, h("tr", {}, h("th", {}, "IP"), h("th", { class: "num" }, "Endpoints"), h("th", {}, "Ports and services"))),
        tbody),
      h("div", { class: "actions" }, more));
    let next = null;
    async function load() {
      more.hidden = true;
      try {
        const body = await api("/api/v1/tasks/" + encodeURIComponent(id) + "/results?size=100" + (next ? "&after=" + encodeURIComponent(next) : ""));
        if (gen !== generation) return;
        if (body.totals) {
          summary.textContent = num(body.totals.endpoints.value) + " endpoints on " + num(body.totals.ips.value) +
            (body.totals.ips.relation === "gte" ? "+" : "") + " IPs" + (body.complete ? "" : " · executions still running");
        }
        for (const g of body.ips) {
          tbody.appendChild(h("tr", {},
            h("td", { class: "mono ipcell" }, g.ip),
            h("td", { class: "num" }, num(g.endpoint_count)),
            h("td", {}, g.endpoints.map(endpointChip))));
        }
        if (!tbody.firstChild) tbody.appendChild(h("tr", {}, h("td", { colspan: 3, class: "empty" }, "No results yet.")));
        next = body.next;
        more.hidden = !next;
      } catch (e) { if (e.status !== 401) panel.prepend(failure(e)); }
    }
    more.addEventListener("click", load);
    await load();
  }

  // ---- asset search ----
  function renderSearch() {
    const gen = ++generation;
    const field = (name, label, attrs) => {
      const input = h("input", Object.assign({ type: "text", name: name, id: "f-" + name }, attrs || {}));
      return [h("label", {}, label, input), input];
    };
    const [qL, q] = field("q", "Text (service, product, banner, scripts)", { placeholder: "nginx" });
    const [ipL, ip] = field("ip", "IP or CIDR", { placeholder: "10.0.0.0/8" });
    const [portL, port] = field("port", "Port", { placeholder: "443", inputmode: "numeric" });
    const [svcL, svc] = field("service", "Service", { placeholder: "https" });
    const [tagL, tag] = field("tag", "Tag");
    const [seenL, seen] = field("seen_since", "Seen since", { placeholder: "2026-11-01T00:00:00Z" });
    const [prodL, prod] = field("product", "Product", { placeholder: "OpenSSH" });
    const [cpeL, cpe] = field("cpe", "CPE (or its start)", { placeholder: "cpe:/a:openbsd:openssh" });
    const [hostL, host] = field("hostname", "Hostname", { placeholder: "www.example.com" });
    const state = h("select", { name: "state", id: "f-state" },
      ["", "open", "closed", "filtered", "unfiltered", "open|filtered", "closed|filtered"].map((v) => h("option", { value: v }, v || "any")));
    const stateL = h("label", {}, "State", state);
    const global = h("input", { type: "checkbox", id: "f-global" });
    // Open services, and apart from them the closed ones (by a scan's close run or a
    // closed or filtered observation); a chosen state lists that state alone.
    const open = assetList("assets", "search-summary", "Assets", false);
    const closed = assetList("closed-assets", "closed-summary", "Closed services", true);
    const form = h("form", { class: "filters", id: "search-form", onsubmit: (ev) => {
      ev.preventDefault();
      const p = new URLSearchParams();
      p.set("size", "50");
      for (const [k, input] of [["q", q], ["ip", ip], ["port", port], ["service", svc], ["tag", tag], ["seen_since", seen],
        ["product", prod], ["cpe", cpe], ["hostname", host], ["state", state]]) {
        if (input.value.trim()) p.set(k, input.value.trim());
      }
      if (global.checked) p.set("scope", "global");
      const path = p.has("q") ? "/api/v1/search?" : "/api/v1/assets?";
      open.start(path + p.toString());
      closed.panel.hidden = p.has("state");
      if (!p.has("state")) {
        p.set("status", "closed");
        closed.start(path + p.toString());
      }
    } }, qL, ipL, portL, svcL, tagL, seenL, prodL, cpeL, hostL, stateL,
      h("label", { class: "check" }, global, "Global view (admins)"),
      h("div", {}, h("button", { class: "primary", type: "submit" }, "Search")));
    closed.panel.hidden = true;
    clear(main).append(
      h("h1", {}, "Assets"),
      h("p", { class: "sub" }, "The current asset view: every endpoint your scans found, as last published."),
      h("div", { class: "panel" }, form),
      open.panel,
      closed.panel);

    // A table of assets that pages with "Load more"; closed ones show when and by which
    // execution they closed instead of when they were last seen.
    function assetList(id, summaryId, title, closedView) {
      const tbody = h("tbody");
      const summary = h("span", { class: "muted", id: summaryId });
      const more = h("button", { class: "secondary", type: "button", hidden: true }, "Load more");
      const errors = h("div");
      let next = null, base = null;
      async function load() {
        more.hidden = true;
        clear(errors);
        try {
          const body = await api(base + (next ? "&after=" + encodeURIComponent(next) : ""));
          if (gen !== generation) return;
          if (body.total) summary.textContent = num(body.total.value) + (body.total.relation === "gte" ? "+" : "") + (body.total.value === 1 ? " asset" : " assets");
          for (const a of body.assets) {
            tbody.appendChild(h("tr", { "data-asset": a.ip + ":" + a.port + "/" + a.transport },
              h("td", { class: "mono ipcell" }, a.ip),
              h("td", {}, h("b", {}, a.port + "/" + a.transport)),
              h("td", { "data-state": a.state }, stateBadge(a.state)),
              h("td", {}, serviceName(a) || "—"),
              h("td", {}, [a.product, a.version].filter(Boolean).join(" ") || "—"),
              h("td", { class: "muted mono", title: a.banner || "" }, (a.banner || "").slice(0, 80)),
              detailsCell(a),
              h("td", { class: "tags" }, (a.tags || []).map((x) => h("span", { class: "chip" }, x))),
              closedView
                ? h("td", { class: "muted", title: a.closed_by ? "closed by execution " + a.closed_by : "" }, when(a.closed_at))
                : h("td", { class: "muted" }, when(a.last_seen))));
          }
          if (!tbody.firstChild) tbody.appendChild(h("tr", {}, h("td", { colspan: 9, class: "empty" }, closedView ? "No closed services." : "No matching assets.")));
          next = body.next;
          more.hidden = !next;
        } catch (e) { if (e.status !== 401) errors.appendChild(failure(e)); }
      }
      more.addEventListener("click", load);
      const panel = h("div", { class: "panel", id: id + "-panel" },
        h("div", { class: "panel-head" }, h("h2", {}, title), summary),
        errors,
        h("table", { id: id },
          h("thead", {}, h("tr", {}, h("th", {}, "IP"), h("th", {}, "Port"), h("th", {}, "State"), h("th", {}, "Service"),
            h("th", {}, "Product"), h("th", {}, "Banner"), h("th", {}, "Details"), h("th", {}, "Tags"), h("th", {}, closedView ? "Closed" : "Last seen"))),
          tbody),
        h("div", { class: "actions" }, more));
      return {
        panel,
        start(b) { base = b; next = null; clear(tbody); summary.textContent = ""; return load(); },
      };
    }
    q.focus();
  }

  // ---- routing ----
  function route() {
    if (!token()) { renderSignIn(); return; }
    document.getElementById("nav").hidden = false;
    const hash = location.hash.replace(/^#/, "") || "/tasks";
    const parts = hash.split("/").filter(Boolean);
    for (const a of document.querySelectorAll("[data-nav]")) {
      a.classList.toggle("active", a.getAttribute("data-nav") === (parts[0] === "search" ? "search" : "tasks"));
    }
    if (parts[0] === "tasks" && parts[1]) renderTask(decodeURIComponent(parts[1]));
    else if (parts[0] === "search") renderSearch();
    else renderTasks();
  }
  document.getElementById("signout").addEventListener("click", () => signOut());
  window.addEventListener("hashchange", route);
  route();
})();
