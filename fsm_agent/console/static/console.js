// fsm-agent console: the one script of its pages. Journal text is only ever put on the
// page with textContent (never innerHTML); data comes as JSON from this origin.
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
    for (const input of form.querySelectorAll("input")) {
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

  // --- one run: the live panel --------------------------------------------------------
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
    if (log && state.seq !== lastSeq && lastSeq !== null) {
      const t = state.last;
      const text = "seq " + t.seq + " · " + (t.source || "start") + " → " + t.dest +
        (t.trigger ? " [" + t.trigger + "]" : "") + (t.note ? " · " + t.note : "");
      log.appendChild(el("li", text));
    }
    lastSeq = state.seq;
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
  let lastSeq = null;
  function tick() {
    const live = document.getElementById("live");
    if (!live || live.dataset.ended === "1" || left === null) return;
    left = Math.max(0, left - 1000);
    const node = document.getElementById("live-clock");
    if (node) node.textContent = "wall clock left " + Math.floor(left / 1000) + " s";
  }

  function followLive(runId) {
    const live = document.getElementById("live");
    if (!live || live.dataset.ended === "1") return;
    lastSeq = Number(document.getElementById("live-seq").textContent);
    const source = new EventSource("/api/runs/" + encodeURIComponent(runId) + "/live");
    source.addEventListener("state", (e) => showLive(JSON.parse(e.data)));
    source.addEventListener("ended", (e) => {
      showLive(JSON.parse(e.data));
      source.close();
      live.dataset.ended = "1";
      // the halt record, replay and timeline are drawn by the server: show them
      window.setTimeout(() => window.location.reload(), 300);
    });
    window.setInterval(tick, 1000);
  }

  // --- one run: stepping through the transitions (j/k, arrows, click) -------------------
  function stepper(runId) {
    const rows = Array.from(document.querySelectorAll("#timeline tr[data-seq]"));
    const detail = document.getElementById("step-detail");
    if (!rows.length || !detail) return;
    let at = -1;

    function section(title, value) {
      const box = el("div", null, "step-part");
      box.appendChild(el("h3", title));
      box.appendChild(el("pre", JSON.stringify(value, null, 2)));
      return box;
    }

    async function show(i) {
      at = Math.max(0, Math.min(rows.length - 1, i));
      rows.forEach((r, j) => r.classList.toggle("current", j === at));
      rows[at].scrollIntoView({ block: "nearest" });
      const seq = rows[at].dataset.seq;
      detail.replaceChildren(el("p", "step seq " + seq + " …", "muted"));
      const reply = await fetch(
        "/api/runs/" + encodeURIComponent(runId) + "/events/" + encodeURIComponent(seq)
      );
      const ev = await reply.json();
      const head = el("p", null, "step-head");
      head.appendChild(el("strong", "seq " + ev.seq + " · " + ev.kind + " "));
      head.appendChild(
        el("code", (ev.source || "start") + " → " + ev.dest + (ev.trigger ? " [" + ev.trigger + "]" : ""))
      );
      const facts = ev.facts || {};
      detail.replaceChildren(
        head,
        section("guards", ev.guards),
        section("budget check", ev.check),
        section("reply", facts.reply === undefined ? null : facts.reply),
        section("tool call and receipts", facts.tool === undefined ? null : facts.tool),
        section("snapshot", ev.snapshot)
      );
      detail.dataset.seq = String(ev.seq);
    }

    rows.forEach((r, j) => r.addEventListener("click", () => show(j)));
    document.addEventListener("keydown", (e) => {
      const tag = (e.target && e.target.tagName) || "";
      if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA") return;
      if (["j", "ArrowDown", "ArrowRight"].includes(e.key)) {
        e.preventDefault();
        show(at + 1);
      } else if (["k", "ArrowUp", "ArrowLeft"].includes(e.key)) {
        e.preventDefault();
        show(at <= 0 ? 0 : at - 1);
      }
    });
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
      followLive(run.dataset.run);
      stepper(run.dataset.run);
    }
  } else if (page === "charts") {
    charts();
  }
})();
