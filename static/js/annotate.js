// Keyboard-first labelling on the trajectory page (docs/annotations.md#keys): j / k mark the next or
// previous item (the whole trajectory, then each step), a label's key puts that label on the marked
// item, n opens the next item of the review queue. Each form is saved with fetch and the item's labels
// are swapped for the ones the server sends back; without this script the same forms post and reload
// the page.
(function () {
  "use strict";

  var items = Array.prototype.slice.call(document.querySelectorAll("[data-review-item]"));
  var labelSet = document.getElementById("label-set");
  var queueBar = document.querySelector(".queue-bar");
  if (!items.length || !labelSet) return;
  var current = 0;

  function mark(index) {
    current = Math.max(0, Math.min(items.length - 1, index));
    items.forEach(function (item, i) {
      item.classList.toggle("current", i === current);
      if (i === current) item.setAttribute("aria-current", "true");
      else item.removeAttribute("aria-current");
    });
    items[current].scrollIntoView({ block: "nearest" });
  }

  function labelFor(key) {
    var found = labelSet.querySelector('li[data-key="' + CSS.escape(key) + '"]');
    return found ? found.dataset.name : null;
  }

  function goToNextInQueue() {
    if (queueBar && queueBar.dataset.next) window.location.assign(queueBar.dataset.next);
  }

  // The server renders the item's labels and notes after the save; swapping them in shows the new
  // badge at once, no reload needed.
  function showGiven(item, html) {
    var given = item.querySelector(".given-annotations");
    if (!given || typeof html !== "string") return;
    var fresh = document.createElement("template");
    fresh.innerHTML = html.trim();
    given.replaceWith(fresh.content);
  }

  function save(form) {
    var status = form.querySelector(".annotate-status");
    status.textContent = "saving…";
    return fetch(form.action, {
      method: "POST",
      body: new FormData(form),
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    }).then(function (response) {
      return response.json().then(function (body) {
        var item = form.closest("[data-review-item]");
        status.textContent = response.ok ? "saved" + (body.label ? ": " + body.label : "") : "not saved: " + body.error;
        item.classList.toggle("labelled", response.ok && !!body.label);
        if (response.ok) showGiven(item, body.given);
        return response.ok;
      });
    }).catch(function () {
      status.textContent = "not saved: the server cannot be reached";
      return false;
    });
  }

  // The mark moves on at once, before the server answers: a person typing labels in a row would
  // otherwise put the next key on this item again. A save that fails says so on its own item.
  function labelCurrent(name) {
    var form = items[current].querySelector(".annotate-form");
    if (!form) return;
    form.querySelector('select[name="label"]').value = name;
    save(form);
    if (current < items.length - 1) mark(current + 1);
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.classList.contains("annotate-form")) return;
    event.preventDefault();
    save(form);
  });

  document.addEventListener("keydown", function (event) {
    var target = event.target;
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement || target instanceof HTMLSelectElement) return;
    if (event.key === "j") {
      if (current === items.length - 1 && queueBar) goToNextInQueue();
      else mark(current + 1);
    } else if (event.key === "k") {
      mark(current - 1);
    } else if (event.key === "n") {
      goToNextInQueue();
    } else {
      var name = labelFor(event.key);
      if (!name) return;
      labelCurrent(name);
    }
    event.preventDefault();
  });

  var hash = window.location.hash && document.getElementById(window.location.hash.slice(1));
  mark(hash ? Math.max(0, items.indexOf(hash)) : 0);
})();
