// The curves page's one island: reads /t/<team>/curves.json (downsampled on the server, each
// bucket's min and max), draws one uPlot chart per metric with every chosen run overlaid, smooths
// with a debiased EMA, polls while a run is live, and opens a step's rollouts on click.
(function () {
  "use strict";
  const POLL_MS = 3000;
  const COLORS = ["#0b5cad", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490", "#a16207", "#4d7c0f"];

  function ema(values, weight) {
    // Debiased like TensorBoard / Adam: early points are not pulled towards zero.
    const out = [];
    let mean = 0, n = 0;
    for (const v of values) {
      if (v === null || !Number.isFinite(v)) { out.push(null); continue; }
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

  function chartData(payload, key, axis, weight) {
    const tables = [], meta = [];
    payload.series.forEach((s, i) => {
      if (s.key !== key || s.step.length === 0) return;
      const run = payload.runs[s.run];
      tables.push([xValues(s, run, axis), s.value, ema(s.value, weight)]);
      meta.push({ run: s.run, name: run.name, color: COLORS[i % COLORS.length], series: s, x: xValues(s, run, axis) });
    });
    if (tables.length === 0) return null;
    return { data: uPlot.join(tables), meta };
  }

  function stepAt(meta, x) {
    const i = meta.x.indexOf(x);
    return i >= 0 ? meta.series.step[i] : null;
  }

  function nearestSeries(u, idx, meta) {
    // Each run has two uPlot series (raw extremes, smoothed); pick the run whose raw point is nearest the cursor.
    let best = null, bestDist = Infinity;
    meta.forEach((m, k) => {
      const y = u.data[1 + 2 * k][idx];
      if (y === null || y === undefined) return;
      const dist = Math.abs(u.valToPos(y, "y") - u.cursor.top);
      if (dist < bestDist) { best = m; bestDist = dist; }
    });
    return best;
  }

  function build(figure, built, payload) {
    const holder = figure.querySelector(".chart");
    const series = [{ label: built.axis === "time" ? "time" : built.axis }];
    built.meta.forEach((m) => {
      series.push({ label: m.name + " (min/max)", stroke: m.color + "55", width: 1, points: { show: false } });
      series.push({ label: m.name, stroke: m.color, width: 2, points: { show: false } });
    });
    const opts = {
      width: Math.max(holder.clientWidth, 400), height: 280, series,
      scales: { x: { time: built.axis === "time" } },
      cursor: { drag: { x: true, y: false } },
      hooks: {
        ready: [(u) => u.over.addEventListener("click", () => {
          const idx = u.cursor.idx;
          if (idx === null || idx === undefined) return;
          const meta = nearestSeries(u, idx, u._studio.meta);
          if (!meta) return;
          const step = stepAt(meta, u.data[0][idx]);
          if (step !== null) window.location.href = payload.runs[meta.run].rollouts_url + step + "/";
        })],
      },
    };
    const chart = new uPlot(opts, built.data, holder);
    chart._studio = built;
    return chart;
  }

  function start(root) {
    const status = document.getElementById("curves-status");
    const axisInput = document.getElementById("x-axis");
    const smoothing = document.getElementById("smoothing");
    const smoothingValue = document.getElementById("smoothing-value");
    const charts = new Map();
    let payload = null;

    function draw() {
      const axis = axisInput.value, weight = parseFloat(smoothing.value) || 0;
      let points = 0;
      root.querySelectorAll("figure.curve").forEach((figure) => {
        const key = figure.dataset.key;
        const built = chartData(payload, key, axis, weight);
        const old = charts.get(key);
        if (!built) return;
        built.axis = axis;
        points += built.meta.reduce((sum, m) => sum + m.series.step.length, 0);
        const sameShape = old && old._studio.axis === axis && old._studio.meta.length === built.meta.length;
        if (sameShape) { old._studio = built; old.setData(built.data); }
        else { if (old) old.destroy(); charts.set(key, build(figure, built, payload)); }
      });
      root.dataset.points = String(points);
      window.studioCharts = charts;
    }

    async function refresh() {
      const response = await fetch(root.dataset.url, { headers: { Accept: "application/json" } });
      if (!response.ok) { status.textContent = "Could not load the curves (HTTP " + response.status + ")."; return; }
      payload = await response.json();
      draw();
      status.textContent = payload.live ? "Live: updating every " + POLL_MS / 1000 + " s." : "";
      if (payload.live) setTimeout(refresh, POLL_MS);
    }

    axisInput.addEventListener("change", () => payload && draw());
    smoothing.addEventListener("input", () => { smoothingValue.textContent = smoothing.value; if (payload) draw(); });
    refresh();
  }

  document.addEventListener("DOMContentLoaded", () => {
    const root = document.getElementById("curves");
    if (root && window.uPlot) start(root);
  });
})();
