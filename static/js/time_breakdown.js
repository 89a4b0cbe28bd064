// The run page's time breakdown: one stacked bar per training step (seconds in each part the backend
// timed, and "waiting", the rest of the step), and generated tokens per second below it. It reads
// runs/<id>/time.json (webapp.monitoring.time_breakdown) and, while the run is live, again every 5 s.
(function () {
  "use strict";
  const POLL_MS = 5000;
  const PLOT_HEIGHT = 260, TOKENS_HEIGHT = 160;
  const COLORS = ["#0b5cad", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490", "#a16207", "#4d7c0f",
    "#be185d", "#334155", "#9333ea", "#94a3b8"];

  function label(key) { return key.replace(/^timing\//, "").replace(/_s$/, "").replace(/_/g, " "); }

  function stacked(data) {
    const keys = Object.keys(data.series);
    const sums = data.steps.map(() => 0);
    const layers = keys.map((key) => data.series[key].map((v, i) => (sums[i] += v || 0)));
    // Drawn top layer first, so each lower one paints over it: a stack without uPlot's bands.
    const order = keys.map((_, i) => i).reverse();
    return {
      data: [data.steps, ...order.map((i) => layers[i])],
      series: [{ label: "step" }, ...order.map((i) => ({
        label: label(keys[i]), stroke: COLORS[i % COLORS.length], fill: COLORS[i % COLORS.length],
        paths: uPlot.paths.bars({ size: [0.8, 40] }), points: { show: false },
        value: (u, v, si, idx) => { const raw = data.series[keys[i]][idx]; return raw == null ? "—" : raw.toFixed(3) + " s"; },
      }))],
    };
  }

  // Half a step either side of the first and last step: their bars are drawn whole, and the
  // tokens chart below lines up with them.
  const stepScale = { time: false, range: (u, min, max) => [min - 0.5, max + 0.5] };

  function draw(box, tokensBox, data, state) {
    const width = Math.max(320, box.clientWidth || 900);
    if (state.plot) { state.plot.destroy(); state.plot = null; }
    if (state.tokens) { state.tokens.destroy(); state.tokens = null; }
    if (!data.steps.length) { box.textContent = "No step timings reported yet."; return; }
    box.textContent = "";
    const stack = stacked(data);
    state.plot = new uPlot({ width: width, height: PLOT_HEIGHT, series: stack.series,
      axes: [window.studioStepAxis({ label: "training step" }), { label: "seconds" }],
      // Bars stand on zero, whatever the smallest step.
      scales: { x: stepScale, y: { range: (u, min, max) => [0, max > 0 ? max * 1.05 : 1] } } }, stack.data, box);
    if (data.tokens_per_s.some((v) => v != null)) {
      state.tokens = new uPlot({ width: width, height: TOKENS_HEIGHT, scales: { x: stepScale },
        axes: [window.studioStepAxis({ label: "training step" }), { label: "tokens / s" }],
        series: [{ label: "step" }, { label: "generated tokens per second", stroke: "#0b5cad" }] },
      [data.steps, data.tokens_per_s], tokensBox);
    }
  }

  function start() {
    const box = document.getElementById("time-chart");
    if (!box || typeof uPlot === "undefined") return;
    const tokensBox = document.getElementById("tokens-chart");
    const state = { plot: null, tokens: null };
    window.studioTimeCharts = state; // what a browser test reads the drawn ticks from
    function load() {
      fetch(box.dataset.url, { credentials: "same-origin" })
        .then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
        .then((data) => draw(box, tokensBox, data, state))
        .catch(() => { box.textContent = "The step timings could not be read."; });
    }
    load();
    if (box.dataset.live === "1") setInterval(load, POLL_MS);
    // A narrower window narrows the charts, instead of leaving them past the page's right edge.
    window.addEventListener("resize", () => {
      const width = Math.max(320, box.clientWidth || 900);
      if (state.plot) state.plot.setSize({ width: width, height: PLOT_HEIGHT });
      if (state.tokens) state.tokens.setSize({ width: width, height: TOKENS_HEIGHT });
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
