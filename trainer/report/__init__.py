"""Where results go, one module per job.

- :mod:`trainer.report.reporters`: the :class:`~trainer.report.reporters.Reporter` interface and the
  in-process reporters (console, JSONL, memory, multi).
- :mod:`trainer.report.http`: :class:`~trainer.report.http.HttpReporter`, the webapp's reporter with
  its on-disk spool.
- :mod:`trainer.report.retry`: how those HTTP calls fail and back off.
- :mod:`trainer.report.client`: :class:`~trainer.report.client.RunApiClient`, the run's claim, config
  and dataset reads.

The wire models and paths they speak are :mod:`trainer.contract`. Import from the module that
holds a name; this package re-exports nothing, so importing a reporter never pulls in httpx.
"""
