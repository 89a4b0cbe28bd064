// The x axis of every per-step chart (the curve workspace, the run page's time breakdown): ticks at
// whole steps only, printed as integers. A tick at step 1.05 names no step; uPlot's default
// increments would draw ten of them between steps 1 and 2.
(function () {
  "use strict";
  const INCRS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1e3, 2e3, 2500, 5e3, 1e4, 2e4, 25e3, 5e4,
    1e5, 2e5, 25e4, 5e5, 1e6, 2e6, 5e6, 1e7, 2e7, 5e7, 1e8, 1e9];

  // uPlot axis options for a step axis; `extra` adds to them (a label, a size).
  window.studioStepAxis = function (extra) {
    return Object.assign({ incrs: INCRS, values: (u, ticks) => ticks.map((v) => String(Math.round(v))) }, extra || {});
  };
})();
