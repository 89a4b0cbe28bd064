// Two small behaviours for htmx forms; every form works without this script (plain POST).
// - data-upload: a progress bar fed by htmx:xhr:progress as the bytes go out, and a size check.
// - data-swap-errors: a 400/413 answer carries the form with its errors; swap it in (htmx would not).
(function () {
  "use strict";

  function uploadForm(event) {
    var form = event.target && event.target.closest ? event.target.closest("form[data-upload]") : null;
    return form;
  }

  function showError(form, message) {
    var list = form.querySelector("[data-upload-error]");
    list.textContent = "";
    var item = document.createElement("li");
    item.textContent = message;
    list.appendChild(item);
    list.hidden = false;
  }

  // Refuse an over-limit file before sending a byte; the server enforces the same limit.
  document.addEventListener("htmx:confirm", function (event) {
    var form = uploadForm(event);
    if (!form) return;
    var input = form.querySelector("input[type=file]");
    var file = input && input.files && input.files[0];
    if (file && file.size > Number(form.dataset.maxBytes)) {
      event.preventDefault();
      showError(form, form.dataset.tooLarge);
    }
  });

  document.addEventListener("htmx:beforeRequest", function (event) {
    var form = uploadForm(event);
    if (!form) return;
    form.querySelector("[data-upload-progress]").hidden = false;
    form.querySelector("button[type=submit]").disabled = true;
  });

  document.addEventListener("htmx:xhr:progress", function (event) {
    var form = uploadForm(event);
    if (!form || !event.detail.lengthComputable || !event.detail.total) return;
    var percent = Math.round((event.detail.loaded / event.detail.total) * 100);
    var bar = form.querySelector("progress");
    // Upload and download progress both arrive here; the bar only moves forward.
    if (percent > Number(bar.value)) {
      bar.value = percent;
      form.querySelector("[data-upload-percent]").textContent = percent + "%";
    }
  });

  document.addEventListener("htmx:beforeSwap", function (event) {
    // The event fires on the swap target; the form that asked is the request's element.
    var asker = (event.detail.requestConfig && event.detail.requestConfig.elt) || event.target;
    var form = asker && asker.closest ? asker.closest("form[data-swap-errors]") : null;
    var status = event.detail.xhr.status;
    if (form && (status === 400 || status === 413)) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  document.addEventListener("htmx:afterRequest", function (event) {
    var form = uploadForm(event);
    if (form && !event.detail.successful) {
      var button = form.querySelector("button[type=submit]");
      if (button) button.disabled = false;
    }
  });
})();
