"""Django settings. Every value that varies between machines comes from an environment variable
read through :mod:`webapp.env`, which fails loudly on a malformed value."""

from __future__ import annotations

import secrets
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from trainer.tools.allowlist import OutboundPolicy
from webapp import env

BASE_DIR = Path(__file__).resolve().parent.parent

VAR_DIR = Path(
    env.string(
        "STUDIO_VAR_DIR",
        str(BASE_DIR / "var"),
        help="Where embedded services, uploads and runs keep their data.",
    )
    or "var"
).resolve()
EMBEDDED_PG_PORT = env.integer(
    "STUDIO_PG_PORT",
    54320,
    minimum=1,
    maximum=65535,
    help="Port of the embedded Postgres (used when DATABASE_URL is not set).",
)
EMBEDDED_VALKEY_PORT = env.integer(
    "STUDIO_VALKEY_PORT",
    63790,
    minimum=1,
    maximum=65535,
    help="Port of the embedded Valkey (used when REDIS_URL is not set).",
)

DATABASE_URL = env.url(
    "DATABASE_URL",
    ("postgres", "postgresql"),
    f"postgres://postgres@127.0.0.1:{EMBEDDED_PG_PORT}/studio",
    help="External Postgres. Unset: `make run` starts an embedded one under STUDIO_VAR_DIR.",
)
REDIS_URL = env.url(
    "REDIS_URL",
    ("redis", "rediss", "valkey"),
    f"redis://127.0.0.1:{EMBEDDED_VALKEY_PORT}/0",
    help="External Redis/Valkey (Celery broker). Unset: `make run` starts an embedded Valkey.",
)


def _secret_key() -> str:
    """The key from STUDIO_SECRET_KEY, else one generated once and kept under VAR_DIR."""
    given = env.string(
        "STUDIO_SECRET_KEY",
        None,
        help="Django secret key. Unset: generated once into STUDIO_VAR_DIR/secret_key.",
    )
    if given:
        return given
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env.boolean("STUDIO_DEBUG", False, help="Django debug mode. Never on in production.")
ALLOWED_HOSTS = env.string_list(
    "STUDIO_ALLOWED_HOSTS", ["127.0.0.1", "localhost"], help="Host names the web server answers to."
)
CSRF_TRUSTED_ORIGINS = env.string_list(
    "STUDIO_CSRF_TRUSTED_ORIGINS",
    [],
    help="Origins allowed to POST when behind a proxy, e.g. https://studio.example.com.",
)
PORT = env.integer(
    "PORT",
    8000,
    minimum=1,
    maximum=65535,
    help="Port of the web server (always bound to 127.0.0.1 by `make run`).",
)
# The web tier (webapp/gunicorn_conf.py): threaded workers, so that a slow upload or a long request
# holds one thread and not a whole process (docs/reliability.md#web-tier).
WEB_WORKERS = env.integer(
    "STUDIO_WEB_WORKERS",
    2,
    minimum=1,
    help="Web server processes (gunicorn gthread workers); about one per CPU core.",
)
WEB_THREADS = env.integer(
    "STUDIO_WEB_THREADS",
    8,
    minimum=1,
    help="Threads per web server process: requests, uploads and trainer calls served at once by each.",
)
PUBLIC_URL = env.url(
    "STUDIO_PUBLIC_URL",
    ("http", "https"),
    f"http://127.0.0.1:{PORT}",
    help="URL at which training processes reach this server's API.",
)
# Trainers (Ray jobs, verl's MLflow logger) call the API at PUBLIC_URL's host, e.g. web:8000 under
# docker compose: the server must answer to it whatever STUDIO_ALLOWED_HOSTS lists.
_PUBLIC_HOST = urlsplit(str(PUBLIC_URL)).hostname
if _PUBLIC_HOST and _PUBLIC_HOST not in ALLOWED_HOSTS:
    ALLOWED_HOSTS = [*ALLOWED_HOSTS, _PUBLIC_HOST]
RAY_ADDRESS = env.string(
    "RAY_ADDRESS", None, help="Ray dashboard URL for the `ray` executor, e.g. http://127.0.0.1:8265."
)
VERL_PRECHECK = env.boolean(
    "STUDIO_VERL_PRECHECK",
    True,
    help="Refuse a verl run when the Ray cluster lacks its GPUs or CPUs; 0 submits anyway.",
)
ADMIN_USERNAME = (
    env.string(
        "STUDIO_ADMIN_USERNAME", "admin", help="Username of the first admin account `make run` creates."
    )
    or "admin"
)
ADMIN_PASSWORD = env.string(
    "STUDIO_ADMIN_PASSWORD",
    None,
    help="Password of that first admin account. Unset: generated and printed once.",
)
LOG_LEVEL = env.choice(
    "STUDIO_LOG_LEVEL",
    ("DEBUG", "INFO", "WARNING", "ERROR"),
    "INFO",
    help="Log level of the web server and workers.",
)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "ninja",
    "axes",
    "webapp.accounts",
    "webapp.datasets",
    "webapp.tools",
    "webapp.retention",
    "webapp.experiments",
    "webapp.ingestion",
    "webapp.rollouts",
    "webapp.monitoring",
    "webapp.results",
    "webapp.mlflow_api",
    "webapp.playground",
]

MIDDLEWARE = [
    "webapp.middleware.ApiErrorShapeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "webapp.outage.DatabaseUnavailableMiddleware",  # outermost of ours: it sees every other's failure
    "csp.middleware.CSPMiddleware",
    "webapp.middleware.PrivateCacheMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "webapp.middleware.NoNulInQueryMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "webapp.ingestion.middleware.GzipRequestMiddleware",
    "webapp.accounts.middleware.CurrentTeamMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks
]

ROOT_URLCONF = "webapp.urls"
WSGI_APPLICATION = "webapp.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "webapp.accounts.context_processors.teams",
            ],
        },
    },
]

DATABASES = {"default": dj_database_url.parse(DATABASE_URL or "", conn_max_age=60, conn_health_checks=True)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns on every request without it
# Manifest storage needs collectstatic; plain storage keeps `make test` free of that step.
STORAGES = {
    "default": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(VAR_DIR / "media")},
    },
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True  # serve straight from static/ without collectstatic

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads no cookie: the token travels in hx-headers on <body>
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

# -- security headers and throttling (docs/security.md) ---------------------------------------------
# Behind the documented TLS proxy (STUDIO_PUBLIC_URL https://...): cookies only over TLS, HSTS, and
# the proxy's X-Forwarded-Proto tells Django a request arrived over TLS. The proxy must set that
# header itself (and drop a client's own), which is why it is trusted only in this deployment.
HTTPS = urlsplit(str(PUBLIC_URL)).scheme == "https"
HSTS_SECONDS = env.integer(
    "STUDIO_HSTS_SECONDS",
    31_536_000,
    minimum=0,
    help="Strict-Transport-Security max-age sent when STUDIO_PUBLIC_URL is https (0: none).",
)
if HTTPS:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = HSTS_SECONDS
    SECURE_HSTS_INCLUDE_SUBDOMAINS = False  # the proxy's other hosts are not ours to decide
# Content-Security-Policy (django-csp): scripts and styles from our own static files only. Style
# attributes stay allowed: server-rendered bars and sparklines set CSS variables inline.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
# Login, admin and bearer tokens: failed attempts counted per (username, client address) by
# django-axes (webapp/accounts/throttle.py adds the bearer tokens); past the limit, 429 until the
# cool-off ends.
AXES_FAILURE_LIMIT = env.integer(
    "STUDIO_LOGIN_FAILURE_LIMIT",
    10,
    minimum=1,
    help="Failed logins (per username and address) or bad bearer tokens (per address) before a lock-out.",
)
AXES_COOLOFF_TIME = (
    env.integer(
        "STUDIO_LOGIN_COOLOFF_S",
        900,
        minimum=1,
        help="How long a lock-out after too many failed logins or bad tokens lasts, in seconds.",
    )
    / 3600
)  # django-axes takes hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "webapp.accounts.throttle.locked_out"
PROXY_COUNT = env.integer(
    "STUDIO_PROXY_COUNT",
    1 if HTTPS else 0,
    minimum=0,
    help="Reverse proxies in front of the web server: the client's address is read from X-Forwarded-For past them.",
)
# Without a proxy X-Forwarded-For is whatever the client wrote: only the socket's address counts.
AXES_IPWARE_META_PRECEDENCE_ORDER = (
    ("HTTP_X_FORWARDED_FOR", "REMOTE_ADDR") if PROXY_COUNT else ("REMOTE_ADDR",)
)
AXES_IPWARE_PROXY_COUNT = PROXY_COUNT or None
AXES_IPWARE_PROXY_ORDER = "right-most"  # each proxy appends the address it saw: ours are on the right
AXES_VERBOSE = False
AUTHENTICATION_BACKENDS = [
    "webapp.accounts.throttle.WebLoginThrottle",
    "django.contrib.auth.backends.ModelBackend",
]

# Datasets: uploads stream into DATASETS_DIR/incoming and are renamed into place (same filesystem).
DATASETS_DIR = VAR_DIR / "datasets"
UPLOAD_MAX_BYTES = env.integer(
    "STUDIO_UPLOAD_MAX_BYTES",
    5 * 2**30,
    minimum=1,
    help="Largest parquet file a browser may upload, in bytes (default 5 GiB).",
)
IMPORT_MAX_BYTES = env.integer(
    "STUDIO_IMPORT_MAX_BYTES",
    2 * 2**30,
    minimum=1,
    help="Largest upload of one run import (all its dumps and metrics), in bytes (default 2 GiB).",
)
IMPORTS_PER_MEMBER = env.integer(
    "STUDIO_IMPORTS_PER_MEMBER",
    2,
    minimum=1,
    help="How many imports one member may have queued or running at once; more answer 429.",
)
RAY_GCS_PORT = env.integer(
    "STUDIO_RAY_GCS_PORT",
    6379,
    minimum=1,
    maximum=65535,
    help="Port of the Ray cluster's GCS on RAY_ADDRESS's host (closed to team tools like every service port).",
)
# Tools: where team HTTP tools may send requests (docs/security.md#outbound). Each entry names a host
# and a port, or a URL prefix; the product's own service endpoints stay closed whatever it says.
TOOL_ALLOWLIST = env.string_list(
    "STUDIO_TOOL_ALLOWLIST",
    [],
    help="The operator's floor of outbound targets, always allowed: host:port, URL prefixes or network:port, "
    "e.g. tools.internal:8080,https://api.example.com/v1/. Site administrators allow more in the product.",
)


def _service_endpoints() -> list[tuple[str, int]]:
    """(host, port) of every service of the product itself: no team tool may call them."""
    endpoints = [("127.0.0.1", PORT), ("localhost", PORT)]
    for url, default_port in ((PUBLIC_URL, PORT), (DATABASE_URL, 5432), (REDIS_URL, 6379)):
        parts = urlsplit(url or "")
        if parts.hostname:
            endpoints.append((parts.hostname, parts.port or default_port))
    ray = urlsplit(
        RAY_ADDRESS if RAY_ADDRESS and "://" in RAY_ADDRESS else f"http://{RAY_ADDRESS or '127.0.0.1:8265'}"
    )
    ray_host = ray.hostname or "127.0.0.1"
    endpoints += [(ray_host, ray.port or 8265), (ray_host, RAY_GCS_PORT)]
    return endpoints


SERVICE_ENDPOINTS = _service_endpoints()


def _tool_policy() -> OutboundPolicy:
    try:
        policy = OutboundPolicy.from_texts(TOOL_ALLOWLIST, SERVICE_ENDPOINTS)
    except ValueError as error:
        raise ImproperlyConfigured(f"STUDIO_TOOL_ALLOWLIST: {error}") from None
    conflicts = policy.conflicts()
    if conflicts:
        raise ImproperlyConfigured(
            f"STUDIO_TOOL_ALLOWLIST must not open the product's own services: {'; '.join(conflicts)}"
        )
    return policy


_tool_policy()  # a bad entry stops start-up here, naming the variable

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_TRACK_STARTED = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
SHARED_DIR = Path(
    env.string(
        "STUDIO_SHARED_DIR",
        str(VAR_DIR / "shared"),
        help="Storage every Ray node sees (checkpoints and rollout dumps of ray runs); an absolute path.",
    )
    or ""
)
# Where members' runs may load model folders from (docs/security.md#server-paths): model.path is an
# offline alias or a folder under here, which every Ray node sees as well when it is under SHARED_DIR.
MODELS_DIR = Path(
    env.string(
        "STUDIO_MODELS_DIR",
        str(SHARED_DIR / "models"),
        help="Folder of the Hugging Face models runs may train (model.path lies under it, or is an "
        "offline alias); an absolute path.",
    )
    or ""
)
# The playground (docs/playground.md#budgets): what one answer may spend, whatever the experiment says.
PLAYGROUND_TIME_S = env.integer(
    "STUDIO_PLAYGROUND_TIME_S",
    120,
    minimum=1,
    help="Seconds one playground answer may generate for before it is stopped (each side of a comparison its own).",
)
PLAYGROUND_MAX_TOKENS = env.integer(
    "STUDIO_PLAYGROUND_MAX_TOKENS",
    1024,
    minimum=1,
    help="Model tokens one playground answer may generate over all its steps before it is stopped.",
)
# Checkpoint exports (docs/checkpoints.md#export): one Hugging Face folder per export.
EXPORT_DIR = Path(
    env.string(
        "STUDIO_EXPORT_DIR",
        str(VAR_DIR / "exports"),
        help="Folder checkpoint exports are written to, one Hugging Face folder each; an absolute path.",
    )
    or ""
)
REAP_EVERY_S = env.integer(
    "STUDIO_REAP_EVERY_S",
    10,
    minimum=1,
    help="How often the reaper reconciles active runs with their executors.",
)
STALL_AFTER_S = env.integer(
    "STUDIO_STALL_AFTER_S",
    300,
    minimum=5,
    help="A running run with no heartbeat or no progress for this long is marked stalled.",
)
FAIL_AFTER_S = env.integer(
    "STUDIO_FAIL_AFTER_S",
    3600,
    minimum=0,
    help="A run with no heartbeat or no progress for this long is failed and its process killed (a hung trainer); 0 never.",
)
CANCEL_GRACE_S = env.integer(
    "STUDIO_CANCEL_GRACE_S",
    60,
    minimum=1,
    help="After a cancel, how long a run may finish its step before it is killed.",
)
RELAUNCH_AFTER_S = env.integer(
    "STUDIO_RELAUNCH_AFTER_S",
    120,
    minimum=5,
    help="A run still queued after this long has its launch task sent again.",
)
MAX_ACTIVE_RUNS = env.integer(
    "STUDIO_MAX_ACTIVE_RUNS",
    2,
    minimum=1,
    help="How many local runs of a team train at once unless its owner sets another limit; the rest wait queued.",
)
# How long a web process reuses /healthz's Celery ping (webapp/healthz.py).
HEALTH_PING_CACHE_S = 5.0
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "reap-runs": {"task": "webapp.experiments.tasks.reap_runs", "schedule": float(REAP_EVERY_S)},
    "resend-lost-dataset-work": {"task": "webapp.datasets.tasks.resend_lost_work", "schedule": 60.0},
    "resend-lost-jobs": {"task": "webapp.experiments.tasks.resend_lost_jobs", "schedule": 60.0},
    "give-up-waiting-signals": {
        "task": "webapp.ingestion.tasks.give_up_waiting_signals_task",
        "schedule": 300.0,
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
