// The experiment form refills its Advanced section (htmx, outerHTML) whenever the preset, task, model
// or backend changes. Two things keep a refill from getting in the way of "Save experiment":
// - The copy the server sends comes closed: an Advanced section the user had opened is opened again
//   in the same task as the swap (htmx:afterSwap / htmx:oobAfterSwap fire before the browser lays the
//   page out), so the button below it does not move, not even for a frame. A section that closed
//   under the pointer moved the button away between press and release, and that click sent nothing.
// - A Save pressed while a refill is on its way (typing a model folder and clicking Save sends one
//   as the field loses focus) waits for it: the form sent then holds the chosen model's defaults,
//   not the previous model's.
// Without this script the form works the same, the section closing on each refill.
(function () {
  "use strict";
  let open = null; // the user's last choice for #advanced; null: the page's own
  const refills = new Set(); // refill requests (htmx GETs from the form) not answered yet
  let heldSave = null; // the submit button of a Save waiting for them

  // "toggle" does not bubble: listen in the capture phase.
  document.addEventListener("toggle", (event) => {
    if (event.target instanceof HTMLDetailsElement && event.target.id === "advanced") open = event.target.open;
  }, true);

  function keepOpen() {
    const advanced = document.getElementById("advanced");
    if (advanced && open !== null && advanced.open !== open) advanced.open = open;
  }

  document.addEventListener("htmx:afterSwap", keepOpen);
  document.addEventListener("htmx:oobAfterSwap", keepOpen);

  document.addEventListener("htmx:beforeRequest", (event) => {
    const asker = event.detail.elt;
    if (event.detail.requestConfig.verb === "get" && asker.closest && asker.closest("#experiment-form")) {
      refills.add(event.detail.xhr);
    }
  });

  // Fires after the swap, also when the refill failed (then the form goes as it stands).
  document.addEventListener("htmx:afterRequest", (event) => {
    if (!refills.delete(event.detail.xhr) || refills.size || !heldSave) return;
    const button = heldSave;
    heldSave = null;
    button.form.requestSubmit(button);
  });

  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || form.id !== "experiment-form" || !refills.size) return;
    event.preventDefault();
    heldSave = event.submitter || form.querySelector("button[type=submit]");
  });
})();
