// Small behaviours every page may use; each page works without this script.
// - The runs table gets a "select all" box in its header (selection itself is plain checkboxes).
(function () {
  "use strict";

  function addSelectAll(root) {
    root.querySelectorAll("table.runs th.select").forEach(function (cell) {
      if (cell.querySelector("input")) return;
      var box = document.createElement("input");
      box.type = "checkbox";
      box.setAttribute("aria-label", "Select every run on this page");
      box.dataset.selectAll = "";
      box.addEventListener("change", function () {
        cell.closest("table").querySelectorAll("td.select input[type=checkbox]").forEach(function (input) {
          input.checked = box.checked;
        });
      });
      cell.appendChild(box);
    });
  }

  document.addEventListener("DOMContentLoaded", function () { addSelectAll(document); });
  document.addEventListener("htmx:afterSettle", function (event) { addSelectAll(event.target); });
})();
