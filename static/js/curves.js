// The curve workspace's one island. It reads /t/<team>/curves.json (downsampled on the server: each
// bucket's min and max) and draws one uPlot chart per panel with every chosen run overlaid:
// - each run keeps one colour (its place among the chosen runs) in every panel;
// - seeds of one experiment can be drawn as a group: the mean, and a min–max band;
// - smoothing is a debiased EMA; the y axis of a panel can be log-scaled;
// - crosshairs are shared (uPlot cursor sync); a drag zooms every panel and reads the zoomed step
//   range again from the server (raw points once it is short); the zoom survives live updates;
// - a double-click zooms out; a click on a point opens that step's rollouts;
// - each panel downloads as CSV (a server link, raw points) and as PNG (its canvas).
// Without this script the page still lists the panels with their CSV links.
(function () {
  "use strict";
  const POLL_MS = 2000;
  const PALETTE = ["#0b5cad", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490", "#a16207", "#4d7c0f",
    "#be185d", "#334155", "#9333ea", "#047857"];
  const GROUP_BUCKETS = 490; // as many as the server's display buckets
  const SYNC_KEY = "studio-curves";

  function color(index) { return PALETTE[index % PALETTE.length]; }

  function ema(values, weight) {
    // Debiased like TensorBoard / Adam: early points are not pulled towards zero.
    const out = [];
    let mean = 0, n = 0;
    for (const v of values) {
      if (v === null || v === undefined || !Number.isFinite(v)) { out.push(null); continue; }
      mean = weight * mean + (1 - weight) * v;
      n += 1;
      out.push(weight > 0 ? mean / (1 - Math.pow(weight, n)) : v);
    }
    return out;
  }

  function xValues(series, run, axis) {
    if (axis === "time") return series.ts;
    if (axis === "samples") return series.step.map((s) => s * run.samples_per_step);
    return series.step;
  }

  function axisX(step, run, axis) { return axis === "samples" ? step * run.samples_per_step : step; }

  // Where each drawn run was resumed (docs/resume.md#the-curve): the x of every resume step, with the
  // run's colour; none on the time axis, where the attempts follow one another anyway.
  function resumeMarks(built, runs) {
    if (built.view.axis === "time") return [];
    return built.items.filter((item) => item.kind === "run").flatMap((item) =>
      (runs[item.run].resumed_from || []).map((step) => ({
        x: axisX(step, runs[item.run], built.view.axis), color: item.color, text: "resumed" })));
  }

  // Where each drawn fork leaves its parent (docs/checkpoints.md#lineage): only when forks continue
  // their parents' curves, the one view where the fork's own steps begin after the parent's step S.
  function forkMarks(built, runs) {
    if (built.view.axis === "time") return [];
    return built.items.filter((item) => item.kind === "run" && runs[item.run].forked_from && item.series.forked_at > 0)
      .map((item) => {
        const origin = runs[item.run].forked_from;
        return { x: axisX(item.series.forked_at, runs[item.run], built.view.axis), color: item.color,
          text: "forked from " + origin.name + " step " + origin.step };
      });
  }

  // A dashed vertical line and its text at each mark, drawn over the plot after the series. The
  // panel's data-marks lists the texts drawn, as the canvas does not say them.
  function drawMarks(u, marks) {
    const ctx = u.ctx;
    const dpr = window.devicePixelRatio || 1;
    const shown = marks.filter((mark) => {
      const x = Math.round(u.valToPos(mark.x, "x", true));
      return x >= u.bbox.left && x <= u.bbox.left + u.bbox.width;
    });
    u.root.closest("figure").dataset.marks = shown.map((mark) => mark.text).join(" | ");
    shown.forEach((mark) => {
      const x = Math.round(u.valToPos(mark.x, "x", true));
      ctx.save();
      ctx.strokeStyle = mark.color;
      ctx.fillStyle = mark.color;
      ctx.setLineDash([4, 4]);
      ctx.lineWidth = dpr;
      ctx.beginPath();
      ctx.moveTo(x, u.bbox.top);
      ctx.lineTo(x, u.bbox.top + u.bbox.height);
      ctx.stroke();
      ctx.font = Math.round(10 * dpr) + "px sans-serif";
      // Left of the line when the text would pass the right edge, so it is never cut off.
      const nearRight = x + ctx.measureText(mark.text).width + 6 * dpr > u.bbox.left + u.bbox.width;
      ctx.textAlign = nearRight ? "right" : "left";
      ctx.fillText(mark.text, nearRight ? x - 3 * dpr : x + 3 * dpr, u.bbox.top + 12 * dpr);
      ctx.restore();
    });
  }

  // A group's mean, min and max per x bucket, over the runs that have a point in the bucket (each
  // run's points in a bucket are averaged first). Exact per step while the series are raw.
  function groupStats(members) {
    let lo = Infinity, hi = -Infinity;
    members.forEach((m) => m.x.forEach((x) => { lo = Math.min(lo, x); hi = Math.max(hi, x); }));
    if (!Number.isFinite(lo)) return null;
    const width = Math.max(1, Math.ceil((hi - lo + 1) / GROUP_BUCKETS));
    const perRun = members.map((m) => {
      const sums = new Map();
      m.x.forEach((x, i) => {
        const y = m.y[i];
        if (y === null || !Number.isFinite(y)) return;
        const bucket = Math.floor((x - lo) / width);
        const sum = sums.get(bucket) || [0, 0];
        sum[0] += y; sum[1] += 1;
        sums.set(bucket, sum);
      });
      return sums;
    });
    const buckets = Array.from(new Set(perRun.flatMap((sums) => Array.from(sums.keys())))).sort((a, b) => a - b);
    const out = { x: [], mean: [], min: [], max: [] };
    buckets.forEach((bucket) => {
      const values = perRun.map((sums) => sums.get(bucket)).filter(Boolean).map((s) => s[0] / s[1]);
      out.x.push(lo + bucket * width);
      out.mean.push(values.reduce((a, b) => a + b, 0) / values.length);
      out.min.push(Math.min(...values));
      out.max.push(Math.max(...values));
    });
    return out;
  }

  function positive(values, log) {
    return log ? values.map((v) => (v !== null && v > 0 ? v : null)) : values;
  }

  // What one panel draws: a list of items (runs and groups) and the uPlot data joined on x.
  function chartData(payload, key, view) {
    const bySeries = new Map();
    payload.series.forEach((s) => { if (s.key === key && s.step.length) bySeries.set(s.run, s); });
    if (bySeries.size === 0) return null;
    const order = payload.order;
    const items = [];
    const grouped = new Set();
    if (view.grouped && view.axis !== "time") {
      payload.groups.forEach((group) => {
        const members = group.runs.filter((id) => bySeries.has(id));
        if (members.length < 2) return;
        members.forEach((id) => grouped.add(id));
        const stats = groupStats(members.map((id) => {
          const s = bySeries.get(id);
          return { x: xValues(s, payload.runs[id], view.axis), y: s.value };
        }));
        if (stats) items.push({ kind: "group", name: group.name + " (" + members.length + " seeds)", runs: members,
          color: color(order.indexOf(group.runs[0])), stats });
      });
    }
    order.forEach((id, index) => {
      if (!bySeries.has(id) || grouped.has(id)) return;
      const s = bySeries.get(id);
      items.push({ kind: "run", run: id, name: payload.runs[id].name, color: color(index), series: s,
        x: xValues(s, payload.runs[id], view.axis) });
    });
    const tables = items.map((item) => {
      if (item.kind === "group") {
        const st = item.stats;
        return [st.x, positive(ema(st.mean, view.weight), view.log), positive(ema(st.min, view.weight), view.log),
          positive(ema(st.max, view.weight), view.log)];
      }
      return [item.x, positive(item.series.value, view.log), positive(ema(item.series.value, view.weight), view.log)];
    });
    return { data: uPlot.join(tables), items, view, key };
  }

  function seriesOptions(built) {
    const series = [{ label: built.view.axis }];
    const bands = [];
    built.items.forEach((item) => {
      if (item.kind === "group") {
        series.push({ label: item.name, stroke: item.color, width: 2, points: { show: false }, spanGaps: true });
        series.push({ label: item.name + " min", stroke: item.color + "66", width: 1, points: { show: false }, spanGaps: true });
        series.push({ label: item.name + " max", stroke: item.color + "66", width: 1, points: { show: false }, spanGaps: true });
        bands.push({ series: [series.length - 1, series.length - 2], fill: item.color + "26" });
      } else {
        series.push({ label: item.name + " (min/max)", stroke: item.color + "55", width: 1, points: { show: false }, spanGaps: true });
        series.push({ label: item.name, stroke: item.color, width: 2, points: { show: false }, spanGaps: true });
      }
    });
    return { series, bands };
  }

  // The value each item shows at the cursor: a run's smoothed line, a group's mean.
  function mainSeriesIndex(built) {
    const out = [];
    let index = 1;
    built.items.forEach((item) => {
      out.push({ item, index: item.kind === "group" ? index : index + 1 });
      index += item.kind === "group" ? 3 : 2;
    });
    return out;
  }

  function formatValue(v) {
    if (v === null || v === undefined) return "—";
    return Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(3) : String(Number(v.toPrecision(4)));
  }

  // Y ticks carry as many decimals as their spacing needs: uPlot's default prints at most three, so
  // ticks 0.0005 apart read "0.002, 0.002, 0.001". Log scales space ticks unevenly: formatValue.
  function decimalsOf(incr) {
    let decimals = 0;
    while (decimals < 12 && Math.abs(Math.round(incr * 10 ** decimals) - incr * 10 ** decimals) > 1e-6) decimals++;
    return decimals;
  }

  function yTicks(u, ticks, axisIndex, space, incr) {
    if (u.scales.y.distr === 3 || !(incr > 0)) return ticks.map(formatValue);
    const decimals = decimalsOf(incr);
    return ticks.map((v) => (Math.abs(v) >= 1e6 || (incr < 1e-6 && v !== 0) ? v.toExponential(2) : v.toFixed(decimals)));
  }

  // uPlot pads a flat line by a share of its value, and a flat line at 0 (no KL yet, no tool
  // errors) by a thousand: an axis of 0 to 100 for a curve that never leaves 0. Around 0 it gets
  // -1 to 1; every other range is uPlot's own.
  function yRange(u, min, max) {
    if (min === 0 && max === 0) return [-1, 1];
    return uPlot.rangeNum(min, max, 0.1, true);
  }

  function start(root) {
    const status = document.getElementById("curves-status");
    const axisInput = document.getElementById("x-axis");
    const smoothing = document.getElementById("smoothing");
    const smoothingValue = document.getElementById("smoothing-value");
    const groupBox = document.getElementById("group-seeds");
    const charts = new Map();
    const state = { payload: null, zoom: null, timer: null, refreshes: 0, polls: 0, inFlight: false, again: false };
    window.studioCharts = charts;
    window.studioCurves = state;

    function keys() { return Array.from(root.querySelectorAll("figure.panel")).map((f) => f.dataset.key); }

    function view(figure) {
      return { axis: axisInput.value, weight: parseFloat(smoothing.value) || 0, log: figure.dataset.log === "1",
        grouped: groupBox ? groupBox.checked : false };
    }

    function zoomsOnServer() { return axisInput.value === "step"; }

    function dataUrl() {
      const url = new URL(root.dataset.url, window.location.href);
      url.searchParams.delete("key");
      keys().forEach((key) => url.searchParams.append("key", key));
      if (state.zoom && zoomsOnServer()) {
        url.searchParams.set("lo", String(Math.max(0, Math.floor(state.zoom.min))));
        url.searchParams.set("hi", String(Math.ceil(state.zoom.max)));
      }
      return url.toString();
    }

    function updateCsvLinks() {
      root.querySelectorAll("figure.panel").forEach((figure) => {
        const link = figure.querySelector("a.csv");
        const url = new URL(link.href, window.location.href);
        url.searchParams.delete("lo"); url.searchParams.delete("hi");
        if (state.zoom && zoomsOnServer()) {
          url.searchParams.set("lo", String(Math.max(0, Math.floor(state.zoom.min))));
          url.searchParams.set("hi", String(Math.ceil(state.zoom.max)));
        }
        link.href = url.toString();
      });
      root.dataset.zoom = state.zoom ? Math.floor(state.zoom.min) + "-" + Math.ceil(state.zoom.max) : "";
    }

    function zoomTo(min, max) {
      if (!(max > min)) return;
      const same = state.zoom && Math.abs(state.zoom.min - min) < 1e-9 && Math.abs(state.zoom.max - max) < 1e-9;
      if (same) return;
      state.zoom = { min, max };
      charts.forEach((u) => u.setScale("x", { min, max }));
      updateCsvLinks();
      if (zoomsOnServer()) refreshSoon(120);
    }

    function zoomOut() {
      state.zoom = null;
      updateCsvLinks();
      if (zoomsOnServer()) refreshSoon(0); else draw(true);
    }

    function refreshSoon(delay) {
      clearTimeout(state.timer);
      state.timer = setTimeout(refresh, delay);
    }

    function stepAt(item, x) {
      const i = item.x.indexOf(x);
      return i >= 0 ? item.series.step[i] : null;
    }

    function nearestRun(u, idx) {
      // Pick the run whose raw point is nearest the cursor (groups have no single run to open).
      let best = null, bestDist = Infinity;
      mainSeriesIndex(u._studio).forEach(({ item, index }) => {
        if (item.kind !== "run") return;
        const y = u.data[index - 1][idx];
        if (y === null || y === undefined) return;
        const dist = Math.abs(u.valToPos(y, "y") - u.cursor.top);
        if (dist < bestDist) { best = item; bestDist = dist; }
      });
      return best;
    }

    function build(figure, built) {
      const holder = figure.querySelector(".chart");
      holder.textContent = "";
      const { series, bands } = seriesOptions(built);
      const readout = figure.querySelector(".readout");
      let downAt = null;
      const opts = {
        width: Math.max(holder.clientWidth, 300), height: 230, series, bands,
        legend: { show: false },
        scales: { x: { time: built.view.axis === "time" }, y: built.view.log ? { distr: 3 } : { range: yRange } },
        axes: [
          built.view.axis === "time" ? {} : window.studioStepAxis(), // whole steps (or samples)
          { size: 60, values: yTicks },
        ],
        cursor: {
          sync: { key: SYNC_KEY, setSeries: false },
          drag: { x: true, y: false, setScale: false },
          bind: { dblclick: () => () => { zoomOut(); return null; } },
        },
        hooks: {
          // u._studio is set once the constructor returned; its first draw happens inside it
          draw: [(u) => {
            const shown = u._studio || built, runs = state.payload.runs;
            drawMarks(u, resumeMarks(shown, runs).concat(forkMarks(shown, runs)));
          }],
          setSelect: [(u) => {
            if (u.select.width > 2) {
              const min = u.posToVal(u.select.left, "x"), max = u.posToVal(u.select.left + u.select.width, "x");
              u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
              zoomTo(min, max);
            }
          }],
          setCursor: [(u) => {
            const idx = u.cursor.idx;
            if (idx === null || idx === undefined) { readout.textContent = ""; return; }
            const parts = [(u._studio.view.axis === "time" ? "time " : u._studio.view.axis + " ") + u.data[0][idx]];
            mainSeriesIndex(u._studio).forEach(({ item, index }) => parts.push(item.name + ": " + formatValue(u.data[index][idx])));
            readout.textContent = parts.join(" · ");
          }],
          ready: [(u) => {
            u.over.addEventListener("mousedown", (e) => { downAt = [e.clientX, e.clientY]; });
            u.over.addEventListener("click", (e) => {
              const dragged = downAt && Math.hypot(e.clientX - downAt[0], e.clientY - downAt[1]) > 4;
              downAt = null;
              const idx = u.cursor.idx;
              if (dragged || idx === null || idx === undefined) return;
              const item = nearestRun(u, idx);
              if (!item) return;
              const step = stepAt(item, u.data[0][idx]);
              if (step !== null) window.location.href = state.payload.runs[item.run].rollouts_url + step + "/";
            });
          }],
        },
      };
      const chart = new uPlot(opts, built.data, holder);
      chart._studio = built;
      if (state.zoom) chart.setScale("x", state.zoom);
      return chart;
    }

    function sameShape(old, built) {
      const a = old._studio, b = built;
      return a.view.axis === b.view.axis && a.view.log === b.view.log && a.items.length === b.items.length &&
        a.items.every((item, i) => item.kind === b.items[i].kind && item.color === b.items[i].color);
    }

    function draw(resetScales) {
      if (!state.payload) return;
      let points = 0;
      root.querySelectorAll("figure.panel").forEach((figure) => {
        const key = figure.dataset.key;
        const built = chartData(state.payload, key, view(figure));
        const old = charts.get(key);
        if (!built) {
          if (old) { old.destroy(); charts.delete(key); }
          figure.querySelector(".chart").innerHTML = "";
          const empty = document.createElement("p");
          empty.className = "empty no-data";
          empty.textContent = "No data yet for the chosen runs.";
          figure.querySelector(".chart").appendChild(empty);
          return;
        }
        points += built.items.reduce((sum, item) => sum + (item.kind === "run" ? item.series.step.length : item.stats.x.length), 0);
        if (old && sameShape(old, built)) {
          old._studio = built;
          old.setData(built.data, resetScales || !state.zoom);
          if (state.zoom) old.setScale("x", state.zoom);
        } else {
          if (old) old.destroy();
          charts.set(key, build(figure, built));
        }
      });
      root.dataset.points = String(points);
      colourSwatches();
    }

    function colourSwatches() {
      const payload = state.payload;
      document.querySelectorAll(".swatch[data-color]").forEach((swatch) => {
        swatch.style.background = color(Number(swatch.dataset.color));
      });
      if (!payload || !groupBox || !groupBox.checked) return;
      payload.groups.forEach((group) => {
        if (group.runs.length < 2) return;
        const first = color(payload.order.indexOf(group.runs[0]));
        group.runs.forEach((id) => {
          const swatch = document.querySelector("label.check input[value='" + id + "'] + .swatch");
          if (swatch) swatch.style.background = first;
        });
      });
    }

    async function poll() {
      state.polls += 1;
      root.dataset.polls = String(state.polls);
      await refresh();
    }

    async function refresh() {
      clearTimeout(state.timer);
      if (state.inFlight) { state.again = true; return; }
      state.inFlight = true;
      try {
        const response = await fetch(dataUrl(), { headers: { Accept: "application/json" } });
        if (!response.ok) { status.textContent = "Could not load the curves (HTTP " + response.status + ")."; return; }
        state.payload = await response.json();
        draw(false);
        state.refreshes += 1;
        root.dataset.refreshes = String(state.refreshes);
        root.dataset.source = Array.from(new Set(state.payload.series.map((s) => s.source))).join(",");
        status.textContent = state.payload.live ? "Live: updating every " + POLL_MS / 1000 + " s." : "";
        if (state.payload.live) state.timer = setTimeout(poll, POLL_MS);
      } finally {
        state.inFlight = false;
        if (state.again) { state.again = false; refreshSoon(0); }
      }
    }

    function postLayout(form) {
      // getAttribute: the form's hidden input named "action" shadows form.action.
      fetch(form.getAttribute("action"), { method: "POST", body: new FormData(form), headers: { Accept: "application/json" } });
    }

    root.querySelectorAll("form.panel-form").forEach((form) => {
      form.addEventListener("submit", (event) => {
        const figure = form.closest("figure.panel");
        event.preventDefault();
        postLayout(form);
        if (form.dataset.action === "log") {
          figure.dataset.log = figure.dataset.log === "1" ? "0" : "1";
          form.querySelector("button").textContent = figure.dataset.log === "1" ? "linear y" : "log y";
          draw(true);
        } else if (form.dataset.action === "remove") {
          const chart = charts.get(figure.dataset.key);
          if (chart) chart.destroy();
          charts.delete(figure.dataset.key);
          figure.remove();
          root.dataset.keys = keys().join("|");
        }
      });
    });

    root.querySelectorAll("button.png").forEach((button) => {
      button.hidden = false;
      button.addEventListener("click", () => {
        const figure = button.closest("figure.panel");
        const chart = charts.get(figure.dataset.key);
        if (chart) savePng(figure.dataset.key, chart);
      });
    });

    axisInput.addEventListener("change", () => { state.zoom = null; updateCsvLinks(); refreshSoon(0); });
    smoothing.addEventListener("input", () => { smoothingValue.textContent = smoothing.value; draw(false); });
    if (groupBox) groupBox.addEventListener("change", () => draw(true));
    refresh();
  }

  function savePng(key, chart) {
    // The chart's canvas (lines, axes, grid) on white, under the panel's title.
    const source = chart.ctx.canvas;
    const ratio = source.width / chart.width;
    const out = document.createElement("canvas");
    out.width = source.width;
    out.height = source.height + Math.round(32 * ratio);
    const ctx = out.getContext("2d");
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, out.width, out.height);
    ctx.fillStyle = "#1d232a";
    ctx.font = Math.round(15 * ratio) + "px system-ui, sans-serif";
    ctx.fillText(key, Math.round(8 * ratio), Math.round(22 * ratio));
    ctx.drawImage(source, 0, Math.round(32 * ratio));
    out.toBlob((blob) => {
      const link = document.createElement("a");
      link.href = URL.createObjectURL(blob);
      link.download = key.replace(/[^A-Za-z0-9._-]+/g, "_") + ".png";
      document.body.appendChild(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 1000);
    }, "image/png");
  }

  document.addEventListener("DOMContentLoaded", () => {
    const root = document.getElementById("curves");
    if (root && window.uPlot) start(root);
  });
})();
