"""A one-file Django project for test_diff_front.py: what Django computes behind a proxy that
Django's deployment docs describe (``SECURE_PROXY_SSL_HEADER`` for X-Forwarded-Proto,
``USE_X_FORWARDED_PORT``), under WSGI (``wsgi``) and ASGI (``asgi``).

``/where/`` answers ``build_absolute_uri()``, ``is_secure()``, ``scheme``, ``get_host()``,
``get_port()`` and ``REMOTE_ADDR`` as JSON; ``/go/`` redirects to the absolute URL of
``/where/``.
"""

from __future__ import annotations

import django
from django.conf import settings
from django.http import HttpResponseRedirect, JsonResponse
from django.urls import path

settings.configure(
    DEBUG=False,
    SECRET_KEY="differential-suite-not-secret",
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"),
    USE_X_FORWARDED_PORT=True,
    MIDDLEWARE=[],
    INSTALLED_APPS=[],
)
django.setup()


def where(request):
    return JsonResponse(
        {
            "absolute": request.build_absolute_uri(),
            "is_secure": request.is_secure(),
            "scheme": request.scheme,
            "host": request.get_host(),
            "port": request.get_port(),
            "remote_addr": request.META.get("REMOTE_ADDR"),
        }
    )


def go(request):
    return HttpResponseRedirect(request.build_absolute_uri("/where/"))


urlpatterns = [path("where/", where), path("go/", go)]

from django.core.asgi import get_asgi_application  # noqa: E402 (after settings)
from django.core.wsgi import get_wsgi_application  # noqa: E402

wsgi = get_wsgi_application()
asgi = get_asgi_application()
