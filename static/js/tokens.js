// The token view of the trajectory page: each response token coloured by the chosen per-token signal
// (docs/rollouts.md#token-signals). The data sits in a JSON block beside each view; the spans are built
// in one pass into a fragment, their text set with textContent (never parsed as HTML), and one listener
// per view shows the hovered token and its value.
(function () {
  "use strict";

  // Diverging scales are centred where the signal means "nothing happened".
  var SCALES = {
    advantage: { kind: "diverging", centre: 0 },
    ratio: { kind: "diverging", centre: 1 },
    kl: { kind: "diverging", centre: 0 },
    log_prob: { kind: "sequential" },
    entropy: { kind: "sequential" },
    clipped: { kind: "binary" },
  };

  function finite(values) {
    return values.filter(function (v) { return v !== null && isFinite(v); });
  }

  function range(name, values) {
    var scale = SCALES[name] || { kind: "sequential" };
    var seen = finite(values);
    if (scale.kind === "binary") return { kind: "binary", low: 0, high: 1 };
    if (!seen.length) return { kind: scale.kind, low: 0, high: 0, centre: scale.centre || 0 };
    var low = Math.min.apply(null, seen), high = Math.max.apply(null, seen);
    if (scale.kind === "diverging") {
      var spread = Math.max(Math.abs(high - scale.centre), Math.abs(low - scale.centre)) || 1;
      return { kind: "diverging", low: scale.centre - spread, high: scale.centre + spread, centre: scale.centre };
    }
    return { kind: "sequential", low: low, high: high === low ? low + 1 : high };
  }

  // blue (low) - white - red (high) for diverging; white - purple for sequential and binary.
  function colour(r, value) {
    if (value === null || !isFinite(value)) return "#dddddd";
    var t = (value - r.low) / (r.high - r.low);
    t = Math.max(0, Math.min(1, t));
    if (r.kind === "diverging") {
      var s = Math.abs(t - 0.5) * 2;
      var fade = Math.round(255 - s * 170);
      return t >= 0.5 ? "rgb(255," + fade + "," + fade + ")" : "rgb(" + fade + "," + fade + ",255)";
    }
    var g = Math.round(255 - t * 150);
    return "rgb(" + Math.round(255 - t * 100) + "," + g + ",255)";
  }

  function format(value) {
    if (value === null || !isFinite(value)) return "n/a";
    return Math.abs(value) >= 1000 || (value !== 0 && Math.abs(value) < 0.001) ? value.toExponential(3) : value.toFixed(4);
  }

  function paint(view, data) {
    var name = view.querySelector("select.token-signal").value;
    var values = data.signals[name] || [];
    var r = range(name, values);
    var spans = view.querySelectorAll(".token-text span");
    for (var i = 0; i < spans.length; i++) spans[i].style.backgroundColor = colour(r, values[i]);
    var legend = view.querySelector(".token-legend");
    legend.textContent = "";
    var stops = r.kind === "binary" ? [0, 1] : [r.low, (r.low + r.high) / 2, r.high];
    stops.forEach(function (v) {
      var swatch = document.createElement("span");
      swatch.className = "token-swatch";
      swatch.style.backgroundColor = colour(r, v);
      swatch.textContent = r.kind === "binary" ? (v ? "clipped" : "not clipped") : format(v);
      legend.appendChild(swatch);
    });
  }

  function build(view) {
    var source = document.getElementById(view.dataset.tokens);
    if (!source) return;
    var data = JSON.parse(source.textContent);
    var text = view.querySelector(".token-text");
    var fragment = document.createDocumentFragment();
    for (var i = 0; i < data.tokens.length; i++) {
      var span = document.createElement("span");
      span.textContent = data.tokens[i];
      span.dataset.i = i;
      fragment.appendChild(span);
    }
    text.textContent = "";
    text.appendChild(fragment);
    var select = view.querySelector("select.token-signal");
    var tip = view.querySelector(".token-tip");
    select.addEventListener("change", function () { paint(view, data); });
    text.addEventListener("mouseover", function (event) {
      var i = event.target.dataset ? event.target.dataset.i : undefined;
      if (i === undefined) return;
      var values = data.signals[select.value] || [];
      tip.textContent = "token " + i + " " + JSON.stringify(data.tokens[i]) + " · " + select.value + " " + format(values[i]);
      tip.hidden = false;
    });
    paint(view, data);
    view.dataset.ready = "1";
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".token-view[data-tokens]").forEach(build);
  });
})();
