import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srbench.settings")
application = get_asgi_application()

from srbench.web_gc import web_gc_freeze  # noqa: E402 - needs Django set up

web_gc_freeze()
