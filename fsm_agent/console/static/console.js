// fsm-agent console: the one script of its pages. Data comes as JSON from this origin:
// journal text in it is put on the page with textContent (never innerHTML), and the parts
// the server draws again (escaped by the same code as the page) are parsed by DOMParser.
"use strict";

(function () {
  const page = document.body.dataset.page;
  const tokenMeta = document.querySelector('meta[name="console-token"]');
  const token = tokenMeta ? tokenMeta.content : null;

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  // --- operator acts (only in a console started with --allow-operator-acts) -----------
  function formBody(form) {
    const body = { caps: {} };
    for (const input of form.querySelectorAll("input, textarea")) {
      const name = input.name;
      if (name.startsWith("cap:")) {
        if (input.value.trim() !== "") body.caps[name.slice(4)] = Number(input.value);
      } else {
        body[name] = input.value;
      }
    }
    return body;
  }

  async function act(form) {
    const out = form.querySelector("output");
    out.textContent = "…";
    try {
      const reply = await fetch("/acts/" + encodeURIComponent(form.dataset.act), {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-Console-Token": token },
        body: JSON.stringify(formBody(form)),
        credentials: "same-origin",
      });
      const data = await reply.json();
      out.textContent = reply.ok ? data.message : "refused: " + data.error;
      out.className = reply.ok ? "ok" : "bad";
    } catch (err) {
      out.textContent = "failed: " + err;
      out.className = "bad";
    }
  }

  if (token) {
    for (const form of document.querySelectorAll("form.act")) {
      form.addEventListener("submit", (e) => {
        e.preventDefault();
        act(form);
      });
    }
  }

  // HTML the server drew (every journal string escaped by the same code as the page's),
  // as nodes: parsed by DOMParser, whose scripts never run (nor may any inline one: CSP).
  function drawn(html) {
    const doc = new DOMParser().parseFromString(html, "text/html");
    return Array.from(doc.body.childNodes);
  }

  function api(path) {
    return fetch(path, { credentials: "same-origin" }).then((reply) => reply.json());
  }

  // --- one run: the live panel --------------------------------------------------------
  function logTransition(log, t) {
    const item = el("li", null, "transition");
    item.dataset.seq = String(t.seq);
    const [first, ...rest] = t.lines;
    item.appendChild(el("div", "seq " + first, "t-head"));
    for (const line of rest) item.appendChild(el("div", line, "t-line"));
    log.appendChild(item);
  }

  function showLive(state) {
    const set = (id, text) => {
      const node = document.getElementById(id);
      if (node) node.textContent = text;
    };
    set("live-status", state.status);
    const status = document.getElementById("live-status");
    if (status) status.className = "status s-" + state.status;
    set("live-state", state.state);
    set("live-step", "step " + state.steps_used + "/" + state.max_steps);
    set("live-halt", state.halt_reason || "—");
    const live = document.getElementById("live");
    if (live) live.classList.toggle("unverified", !state.verified);
    const doubt = document.getElementById("live-unverified");
    if (doubt) {
      doubt.replaceChildren();
      if (!state.verified) {
        const mark = el("span", "UNVERIFIED", "badge bad unverified");
        mark.title = state.unverified || "";
        doubt.append(mark, " " + state.unverified_note);
      }
    }
    const log = document.getElementById("live-log");
    for (const t of state.transitions || []) if (log) logTransition(log, t);
    set("live-seq", state.seq);
    left = state.ended ? null : state.wall_clock_left_ms;
    set("live-clock", state.clock);
    for (const m of state.meters) {
      const box = Array.from(document.querySelectorAll("#meters .meter")).find(
        (b) => b.dataset.meter === m.name
      );
      if (!box) continue;
      const bar = box.querySelector("progress");
      bar.max = m.budget;
      bar.value = Math.min(m.used, m.budget);
      box.querySelector(".m-text").textContent = m.used + " / " + m.budget;
    }
  }

  let left = null;
  function tick() {
    const live = document.getElementById("live");
    if (!live || live.dataset.ended === "1" || left === null) return;
    left = Math.max(0, left - 1000);
    const node = document.getElementById("live-clock");
    if (node) node.textContent = "wall clock left " + Math.floor(left / 1000) + " s";
  }

  // The report's parts (header with the chain badge, halt record, usage, the path, the
  // replay, the timeline), drawn again by the server; one request at a time, the newest
  // state last.
  let drawing = null;
  let again = false;
  let waiting = [];
  function redraw(runId, after) {
    if (after) waiting.push(after);
    if (drawing) {
      again = true;
      return drawing;
    }
    drawing = (async () => {
      do {
        again = false;
        // the same page of the timeline as the page shows (`?upto=SEQ`, or the newest)
        const upto = new URLSearchParams(window.location.search).get("upto");
        const page = upto === null ? "" : "?upto=" + encodeURIComponent(upto);
        const data = await api("/api/runs/" + encodeURIComponent(runId) + "/parts" + page);
        if (!data.sections) continue;
        for (const [id, html] of Object.entries(data.sections)) {
          const old = document.getElementById(id);
          const nodes = drawn(html);
          if (old && nodes.length) old.replaceWith(...nodes);
        }
        if (steps) steps.redrawn();
        document.getElementById("run").dataset.drawn = String(Date.now());
      } while (again);
      drawing = null;
      const done = waiting;
      waiting = [];
      for (const fn of done) fn();
    })();
    return drawing;
  }

  function followLive(runId) {
    const live = document.getElementById("live");
    if (!live || live.dataset.ended === "1") return;
    const seq = Number(document.getElementById("live-seq").textContent);
    const source = new EventSource(
      "/api/runs/" + encodeURIComponent(runId) + "/live?after=" + encodeURIComponent(seq)
    );
    source.addEventListener("state", (e) => {
      const state = JSON.parse(e.data);
      showLive(state);
      if ((state.transitions || []).length) redraw(runId);
    });
    source.addEventListener("ended", (e) => {
      source.close();
      showLive(JSON.parse(e.data));
      live.dataset.ended = "1";
      const acts = document.getElementById("acts");
      if (acts) acts.remove();  // acts are for a live run
      redraw(runId, () => { live.dataset.final = "1"; });
    });
    window.setInterval(tick, 1000);
  }

  // --- one run: stepping through the transitions (j/k, arrows, click) -------------------
  // The step opens in a row right under the timeline row it shows, where the reader is.
  let steps = null;
  function stepper(runId) {
    const detail = el("div", null, "step-detail");
    detail.id = "step-detail";
    detail.setAttribute("aria-live", "polite");
    const holder = el("tr", null, "step-detail-row");
    const cell = el("td");
    cell.colSpan = 7;
    cell.appendChild(detail);
    holder.appendChild(cell);
    let seq = null;
    const rows = () => Array.from(document.querySelectorAll("#timeline tr[data-seq]"));

    function place() {
      const row = rows().find((r) => r.dataset.seq === seq);
      rows().forEach((r) => r.classList.toggle("current", r === row));
      if (!row) return null;
      row.after(holder);
      return row;
    }

    async function show(i) {
      const all = rows();
      if (!all.length) return;
      const row = all[Math.max(0, Math.min(all.length - 1, i))];
      seq = row.dataset.seq;
      place();
      detail.replaceChildren(el("p", "seq " + seq + " …", "muted"));
      row.scrollIntoView({ block: "nearest" });
      const data = await api(
        "/api/runs/" + encodeURIComponent(runId) + "/steps/" + encodeURIComponent(seq)
      );
      if (String(data.seq) !== seq) return;  // another step was chosen meanwhile
      detail.replaceChildren(...(data.html ? drawn(data.html) : [el("p", data.error, "bad")]));
      detail.dataset.seq = seq;
      // the row and as much of its step as fits, the row kept in sight
      const box = holder.getBoundingClientRect();
      if (box.bottom > window.innerHeight) {
        const top = row.getBoundingClientRect().top;
        window.scrollBy(0, Math.min(box.bottom - window.innerHeight + 8, top - 8));
      }
    }

    const at = () => rows().findIndex((r) => r.dataset.seq === seq);
    document.addEventListener("click", (e) => {
      const row = e.target.closest && e.target.closest("#timeline tr[data-seq]");
      if (row) show(rows().indexOf(row));
    });
    document.addEventListener("keydown", (e) => {
      const tag = (e.target && e.target.tagName) || "";
      if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA") return;
      if (["j", "ArrowDown", "ArrowRight"].includes(e.key)) {
        e.preventDefault();
        show(at() + 1);
      } else if (["k", "ArrowUp", "ArrowLeft"].includes(e.key)) {
        e.preventDefault();
        show(at() <= 0 ? 0 : at() - 1);
      }
    });
    // after the timeline is drawn again: the chosen row is marked and its step under it
    return { redrawn: () => { if (seq !== null) place(); } };
  }

  // --- the run list, kept up to date -------------------------------------------------
  const LIST_POLL_MS = 1500;
  function followList() {
    const list = document.getElementById("run-list");
    if (!list) return;
    async function look() {
      if (document.visibilityState === "visible") {
        const query = new URLSearchParams(window.location.search);
        if (list.dataset.version) query.set("version", list.dataset.version);
        try {
          const data = await api("/api/runs?" + query.toString());
          if (data.html !== undefined) {
            list.replaceChildren(...drawn(data.html));
            list.dataset.drawn = String(Date.now());
          }
          if (data.version) list.dataset.version = data.version;
        } catch (err) {
          // the console went away: keep what is shown, try again later
        }
      }
      window.setTimeout(look, LIST_POLL_MS);
    }
    window.setTimeout(look, LIST_POLL_MS);
  }

  // --- across runs: the charts ---------------------------------------------------------
  const PALETTE = ["#2563eb", "#16a34a", "#dc2626", "#d97706", "#7c3aed", "#0891b2",
    "#db2777", "#4b5563", "#65a30d", "#ea580c", "#0d9488", "#9333ea"];

  // a completed run is green wherever it is drawn; the other series take the rest in turn
  const OTHERS = PALETTE.filter((c) => c !== PALETTE[1]);
  function datasets(series) {
    let next = 0;
    return Object.keys(series).map((name) => ({
      label: name, data: series[name],
      backgroundColor: name === "completed" ? PALETTE[1] : OTHERS[next++ % OTHERS.length],
    }));
  }

  function bars(id, labels, series, stacked, horizontal) {
    const canvas = document.getElementById(id);
    if (!canvas || typeof Chart === "undefined") return;
    new Chart(canvas, {
      type: "bar",
      data: { labels: labels, datasets: datasets(series) },
      options: {
        animation: false, responsive: true, indexAxis: horizontal ? "y" : "x",
        scales: { x: { stacked: stacked }, y: { stacked: stacked, beginAtZero: true } },
      },
    });
  }

  function costChart(cost) {
    const canvas = document.getElementById("chart-cost");
    if (!canvas || typeof Chart === "undefined") return;
    new Chart(canvas, {
      data: {
        labels: cost.labels,
        datasets: [
          { type: "line", label: "cost ($)", data: cost.cost, yAxisID: "cost", borderColor: PALETTE[2], pointRadius: 1 },
          { type: "bar", label: "input tokens", data: cost.input_tokens, yAxisID: "tokens", backgroundColor: PALETTE[0], stack: "t" },
          { type: "bar", label: "output tokens", data: cost.output_tokens, yAxisID: "tokens", backgroundColor: PALETTE[1], stack: "t" },
        ],
      },
      options: {
        animation: false, responsive: true,
        scales: { x: { display: false, stacked: true }, tokens: { position: "left", beginAtZero: true, stacked: true },
          cost: { position: "right", beginAtZero: true, grid: { drawOnChartArea: false } } },
      },
    });
  }

  async function charts() {
    const summary = document.getElementById("charts-summary");
    const since = summary.dataset.since;
    const reply = await fetch("/api/charts?since=" + encodeURIComponent(since));
    const data = await reply.json();
    if (!reply.ok) {
      summary.textContent = "refused: " + data.error;
      return;
    }
    summary.textContent = data.runs + " runs started since " + since +
      (data.unverified_note ? " · " + data.unverified_note : "");
    summary.classList.toggle("bad", data.unverified > 0);
    bars("chart-over-time", data.over_time.labels, data.over_time.series, true, false);
    bars("chart-per-machine", data.per_machine.labels, data.per_machine.series, true, false);
    bars("chart-steps-share", data.steps_share.labels, data.steps_share.series, false, false);
    costChart(data.cost);
    const tools = data.tools.slice(0, 15);
    bars("chart-tools", tools.map((t) => t.tool), { "max ms": tools.map((t) => t.max_ms) }, false, true);
    const body = document.querySelector("#tools-table tbody");
    for (const t of data.tools) {
      const tr = document.createElement("tr");
      for (const v of [t.tool, t.calls, t.total_ms, t.max_ms]) tr.appendChild(el("td", v));
      body.appendChild(tr);
    }
  }

  if (page === "run") {
    const run = document.getElementById("run");
    if (run) {
      steps = stepper(run.dataset.run);
      followLive(run.dataset.run);
    }
  } else if (page === "runs") {
    followList();
  } else if (page === "charts") {
    charts();
  }
})();
