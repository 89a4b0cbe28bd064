// The compare page's curves (docs/runs-and-curves.md#compare-runs): one metric of every compared
// run overlaid, as values or as % change against the baseline run at the same step. Reads the
// curve workspace's JSON (curves.json, downsampled) for the chosen key.
(function () {
  "use strict";
  const HEIGHT = 300;
  const COLORS = ["#0b5cad", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490", "#a16207", "#be185d"];

  // The baseline's value at the newest of its steps at or before `step` (its series is sorted).
  function baselineAt(base, step) {
    let lo = 0, hi = base.step.length - 1, found = null;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (base.step[mid] <= step) { found = base.value[mid]; lo = mid + 1; } else { hi = mid - 1; }
    }
    return found;
  }

  function aligned(payload, baselineId, mode) {
    const steps = Array.from(new Set(payload.series.flatMap((s) => s.step))).sort((a, b) => a - b);
    const base = payload.series.find((s) => s.run === baselineId);
    const columns = payload.order.map((runId) => {
      const series = payload.series.find((s) => s.run === runId) || { step: [], value: [] };
      const byStep = new Map(series.step.map((step, i) => [step, series.value[i]]));
      return steps.map((step) => {
        const v = byStep.has(step) ? byStep.get(step) : null;
        if (v == null || mode !== "change") return v;
        const b = base ? baselineAt(base, step) : null;
        return b ? ((v - b) / Math.abs(b)) * 100 : null;
      });
    });
    return [steps, ...columns];
  }

  function draw(box, payload, baselineId, key, mode, state) {
    if (state.plot) { state.plot.destroy(); state.plot = null; }
    box.textContent = "";
    if (!payload.series.some((s) => s.step.length)) { box.textContent = "No points of " + key + " yet."; return; }
    const series = [{ label: "step" }, ...payload.order.map((runId, i) => ({
      label: payload.runs[runId].name + (runId === baselineId ? " (baseline)" : ""),
      stroke: COLORS[i % COLORS.length], width: runId === baselineId ? 2.5 : 1.5, spanGaps: true,
    }))];
    state.plot = new uPlot({
      width: Math.max(320, box.clientWidth || 900), height: HEIGHT, series: series,
      scales: { x: { time: false } },
      axes: [window.studioStepAxis({ label: "training step" }),
             { label: mode === "change" ? "% change against the baseline" : key, size: 60 }],
    }, aligned(payload, baselineId, mode), box);
  }

  function start() {
    const box = document.getElementById("compare-chart");
    if (!box || typeof uPlot === "undefined") return;
    const keySelect = document.getElementById("compare-key"), modeSelect = document.getElementById("compare-mode");
    const baselineId = Number(box.dataset.baseline);
    const state = { plot: null, mode: null };
    window.studioCompareChart = state; // what a browser test reads
    function load() {
      const key = keySelect.value, mode = modeSelect.value;
      fetch(box.dataset.url + "&key=" + encodeURIComponent(key), { credentials: "same-origin" })
        .then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
        .then((payload) => { draw(box, payload, baselineId, key, mode, state); state.mode = mode; })
        .catch(() => { box.textContent = "The curves could not be loaded."; });
    }
    window.addEventListener("resize", () => {
      if (state.plot) state.plot.setSize({ width: Math.max(320, box.clientWidth), height: HEIGHT });
    });
    keySelect.addEventListener("change", load);
    modeSelect.addEventListener("change", load);
    load();
  }

  document.addEventListener("DOMContentLoaded", start);
})();
