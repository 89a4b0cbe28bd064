// Behaviour every page shares, kept out of the HTML so the Content-Security-Policy can refuse inline
// scripts: a <select data-autosubmit> submits its form when it changes (the team switcher).
document.addEventListener("change", (event) => {
  const target = event.target;
  if (target instanceof HTMLSelectElement && target.dataset.autosubmit !== undefined && target.form) {
    target.form.submit();
  }
});
