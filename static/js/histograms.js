// The histograms page (docs/rollouts.md#histograms): a heat-map of a measure over every training
// step (columns of steps x value bins, darker = more trajectories) and one step's histogram, both
// drawn with uPlot. A click on a cell or a bar opens the rollout list filtered to its trajectories:
// the bars carry their URL; a cell adds its step range and value range to the rollout list's URL.
(function () {
  "use strict";
  const HEAT_HEIGHT = 320, BARS_HEIGHT = 240;
  const RGB = "11, 92, 173";

  function find(edges, value) {
    for (let i = 0; i < edges.length - 1; i++) if (value >= edges[i] && value < edges[i + 1]) return i;
    return -1;
  }

  function cellUrl(data, column, bin) {
    const query = new URLSearchParams({
      step_min: data.steps[column][0], step_max: data.steps[column][1], measure: data.measure,
      measure_min: String(data.edges[bin]), measure_below: String(data.edges[bin + 1]),
    });
    return data.rollouts_url + "?" + query.toString();
  }

  function drawCells(u, data) {
    const most = Math.max(1, ...data.counts.map((column) => Math.max(...column)));
    const ctx = u.ctx;
    ctx.save();
    data.counts.forEach((column, c) => {
      const x0 = u.valToPos(data.steps[c][0], "x", true), x1 = u.valToPos(data.steps[c][1] + 1, "x", true);
      column.forEach((count, b) => {
        if (!count) return;
        const y0 = u.valToPos(data.edges[b + 1], "y", true), y1 = u.valToPos(data.edges[b], "y", true);
        ctx.fillStyle = `rgba(${RGB}, ${(0.12 + 0.88 * Math.sqrt(count / most)).toFixed(3)})`;
        ctx.fillRect(x0, y0, Math.max(1, x1 - x0), Math.max(1, y1 - y0));
      });
    });
    ctx.restore();
  }

  function heatMap(box, data) {
    const first = data.steps[0][0], last = data.steps[data.steps.length - 1][1] + 1;
    const low = data.edges[0], high = data.edges[data.edges.length - 1];
    const opts = {
      width: Math.max(320, box.clientWidth || 900), height: HEAT_HEIGHT, legend: { show: false },
      cursor: { points: { show: false }, drag: { x: false, y: false } },
      scales: { x: { time: false, range: () => [first, last] }, y: { range: () => [low, high] } },
      axes: [window.studioStepAxis({ label: "training step" }), { label: data.label }],
      series: [{}, { label: data.label, show: false }],
      hooks: { draw: [(u) => drawCells(u, data)] },
    };
    const plot = new uPlot(opts, [data.steps.map((s) => s[0]), data.steps.map(() => null)], box);
    plot.over.addEventListener("click", () => {
      const x = plot.posToVal(plot.cursor.left, "x"), y = plot.posToVal(plot.cursor.top, "y");
      const column = data.steps.findIndex((s) => x >= s[0] && x < s[1] + 1), bin = find(data.edges, y);
      if (column >= 0 && bin >= 0 && data.counts[column][bin]) window.location.href = cellUrl(data, column, bin);
    });
    return plot;
  }

  function bars(box, data) {
    const opts = {
      width: Math.max(320, box.clientWidth || 900), height: BARS_HEIGHT, legend: { show: false },
      scales: { x: { time: false, range: (u, min, max) => [min - 0.5, max + 0.5] },
                y: { range: (u, min, max) => [0, Math.max(1, max * 1.05)] } },
      // A tick names its bin's lower edge; the bins' full ranges are in the table below.
      axes: [{ label: data.label, incrs: [1, 2, 5, 10], space: 48,
               values: (u, ticks) => ticks.map((t) => (data.bars[t] ? data.bars[t].tick : "")) },
             { label: "trajectories" }],
      series: [{}, { label: "trajectories", stroke: `rgb(${RGB})`, fill: `rgba(${RGB}, 0.6)`,
                     paths: uPlot.paths.bars({ size: [0.9, 80] }), points: { show: false } }],
    };
    const plot = new uPlot(opts, [data.bars.map((_, i) => i), data.bars.map((b) => b.count)], box);
    plot.over.addEventListener("click", () => {
      const i = Math.round(plot.posToVal(plot.cursor.left, "x"));
      if (data.bars[i] && data.bars[i].count) window.location.href = data.bars[i].url;
    });
    return plot;
  }

  function start() {
    const source = document.getElementById("histogram-data");
    if (!source || typeof uPlot === "undefined") return;
    const data = JSON.parse(source.textContent);
    const drawn = {};
    const heatBox = document.getElementById("heat-map"), barsBox = document.getElementById("histogram");
    if (heatBox && data.steps.length) drawn.heat = heatMap(heatBox, data);
    if (barsBox && data.bars.length) drawn.bars = bars(barsBox, data);
    window.studioHistograms = drawn; // what a browser test clicks on
    window.addEventListener("resize", () => {
      if (drawn.heat) drawn.heat.setSize({ width: Math.max(320, heatBox.clientWidth), height: HEAT_HEIGHT });
      if (drawn.bars) drawn.bars.setSize({ width: Math.max(320, barsBox.clientWidth), height: BARS_HEIGHT });
    });
  }

  document.addEventListener("DOMContentLoaded", start);
})();
