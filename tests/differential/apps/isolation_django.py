"""A one-module Django project whose views report the active language (tests/differential/test_diff_isolation.py).

``/sync?set=X`` (a plain view: Django's ASGI handler runs it on a thread with
``sync_to_async``, which copies the context changes back into the request's
own) and ``/async?set=X`` (an ``async def`` view, which suspends once) answer
``{"language": <active when the view ran>}``, then ``translation.activate(X)``
without deactivating: Django keeps the active language in an asgiref
``Local``, a ContextVar under ASGI, so under a server that starts each request
in a clean context the next request finds the default (``en-us``) again.
"""

from __future__ import annotations

import asyncio

from django.conf import settings

settings.configure(
    DEBUG=False,
    SECRET_KEY="isolation-not-secret",
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    MIDDLEWARE=[],
    INSTALLED_APPS=[],
    USE_I18N=True,
    LANGUAGE_CODE="en-us",
)

from django.core.asgi import get_asgi_application  # noqa: E402 - after the settings exist
from django.http import JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402
from django.utils import translation  # noqa: E402


def found_then_activate(request) -> JsonResponse:
    answer = JsonResponse({"language": translation.get_language()})
    if "set" in request.GET:
        translation.activate(request.GET["set"])
    return answer


def sync_view(request):
    return found_then_activate(request)


async def async_view(request):
    answer = found_then_activate(request)
    await asyncio.sleep(0)
    return answer


urlpatterns = [path("sync", sync_view), path("async", async_view)]

application = get_asgi_application()
