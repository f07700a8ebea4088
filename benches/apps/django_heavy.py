"""A Django project with a heavy import, for benches/preload.py: the admin
(with its auth and contenttypes apps) and 300 models with ten fields each,
every one registered in the admin, all made at import as a large project's
``models.py`` files would be. Its import costs each worker tens of MB,
which is what ``--preload`` (and gunicorn's ``preload_app``) share.

``GET /`` answers with the number of models the admin knows and the
worker's pid (the bench checks both), after touching every model's field
list as a request of a real project would touch some.
"""

from __future__ import annotations

import os

import django
from django.conf import settings

MODELS = 300
FIELDS = 10

settings.configure(
    DEBUG=False,
    SECRET_KEY="bench-only",
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    INSTALLED_APPS=[
        "django.contrib.admin",
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.sessions",
        "django.contrib.messages",
        "benches.apps.django_heavy_models",
    ],
    MIDDLEWARE=[
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
    ],
    TEMPLATES=[
        {
            "BACKEND": "django.template.backends.django.DjangoTemplates",
            "APP_DIRS": True,
            "OPTIONS": {"context_processors": ["django.contrib.auth.context_processors.auth"]},
        }
    ],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    USE_TZ=True,
)
django.setup()

from django.contrib import admin  # noqa: E402 - after setup, as Django requires
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.urls import path  # noqa: E402


def index(request: HttpRequest) -> HttpResponse:
    fields = sum(len(model._meta.get_fields()) for model in admin.site._registry)
    return HttpResponse(f"{len(admin.site._registry)} {fields} {os.getpid()}", content_type="text/plain")


urlpatterns = [path("", index), path("admin/", admin.site.urls)]

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
