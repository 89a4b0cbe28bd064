"""gunicorn's settings for the web tier, the same under `make run` and in the Docker image:
``gunicorn -c python:webapp.gunicorn_conf`` (docs/reliability.md#web-tier).

Threaded workers (gthread) instead of synchronous ones: a slow upload or a long request holds one
thread, not a whole process, so pages and trainer ingestion keep answering while uploads are in
flight; and a worker keeps telling its master it is alive while a request runs, so ``timeout``
(which catches a worker that stopped answering its master) no longer cuts off an upload that takes
longer than it. Keep-alive lets each trainer send its batches over one connection.
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

from django.conf import settings

wsgi_app = "webapp.wsgi"
bind = [f"127.0.0.1:{settings.PORT}"]
worker_class = "gthread"
workers = settings.WEB_WORKERS
threads = settings.WEB_THREADS
# A worker silent towards its master this long is restarted; requests themselves have no limit.
timeout = 120
graceful_timeout = 5  # `make run` stops every child within 10 s
# Longer than a trainer's flush interval, so its next batch reuses the connection.
keepalive = 15
accesslog = "-"
