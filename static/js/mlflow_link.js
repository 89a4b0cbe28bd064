// The MLflow client prints ".../mlflow/#/experiments/<id>/runs/<run id>". The part after # never
// reaches the server, so it is read here and sent to the view that finds the page.
(function () {
  const links = document.getElementById("mlflow-link");
  const match = /^#\/experiments\/(\d+)(?:\/runs\/([0-9a-f]{32}))?/.exec(window.location.hash);
  if (!match) { window.location.replace(links.dataset.home); return; }
  const query = new URLSearchParams({experiment: match[1], run: match[2] || ""});
  window.location.replace(links.dataset.open + "?" + query.toString());
})();
