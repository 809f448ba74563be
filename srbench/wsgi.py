import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srbench.settings")
application = get_wsgi_application()

from srbench.web_gc import web_gc_freeze  # noqa: E402 - needs Django set up

web_gc_freeze()
