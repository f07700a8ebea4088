"""WSGI config for the project (as startproject writes it)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.differential.apps.django_site.settings")

application = get_wsgi_application()
