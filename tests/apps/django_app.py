"""A minimal single-file Django project for tests/test_frameworks.py:
``settings.configure(...)``, URL patterns and views in this module, served as
WSGI (``rush tests.apps.django_app:application``) or ASGI
(``rush tests.apps.django_app:asgi_application``). The endpoints follow the
contract of the framework apps (see tests/apps/flask_app.py): path and query
parameters, a JSON body, urlencoded and multipart forms, a
``StreamingHttpResponse``, ``/startup`` (recorded by an ``AppConfig.ready()``
hook), a custom exception turned into a 418 by a middleware's
``process_exception``, and a custom ``handler500`` for unhandled errors.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import django
from django.apps import AppConfig
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import path

FRAMEWORK = "django"
STARTUP: dict[str, Any] = {}


class CustomError(Exception):
    pass


class StartupConfig(AppConfig):
    """Runs once when Django sets itself up in the worker."""

    name = __name__
    label = "rush_test_app"

    def ready(self) -> None:
        STARTUP.update(started=True, startup_pid=os.getpid())


class CustomErrorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, CustomError):
            return JsonResponse({"error": "custom", "detail": str(exception), "handled_by": FRAMEWORK}, status=418)
        return None


settings.configure(
    DEBUG=False,
    SECRET_KEY="rush-tests-not-a-secret",
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    INSTALLED_APPS=[f"{__name__}.StartupConfig"],
    MIDDLEWARE=[f"{__name__}.CustomErrorMiddleware"],
    DATABASES={},
    USE_TZ=True,
    DATA_UPLOAD_MAX_MEMORY_SIZE=16 * 1024 * 1024,
)


def item(request: HttpRequest, item_id: int) -> HttpResponse:
    return JsonResponse({"item_id": item_id, "q": request.GET.get("q"), "tags": request.GET.getlist("tag")})


def json_body(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return HttpResponse(status=405)
    payload = json.loads(request.body)
    return JsonResponse({"received": payload, "total": sum(payload["numbers"])})


def form(request: HttpRequest) -> HttpResponse:
    upload = request.FILES.get("upload")
    described = None
    if upload is not None:
        data = upload.read()
        described = {"filename": upload.name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return JsonResponse(
        {"name": request.POST.get("name"), "choices": request.POST.getlist("choice"), "file": described}
    )


def stream(request: HttpRequest) -> HttpResponse:
    count = int(request.GET["n"])

    def generate() -> Iterator[str]:
        for number in range(count):
            yield f"line {number} of {count}\n"

    return StreamingHttpResponse(generate(), content_type="text/plain")


def startup(request: HttpRequest) -> HttpResponse:
    return JsonResponse({**STARTUP, "pid": os.getpid(), "framework": FRAMEWORK})


def custom_error(request: HttpRequest) -> HttpResponse:
    raise CustomError("raised on purpose")


def crash(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("an unhandled error")


def server_error(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"error": "internal", "handled_by": FRAMEWORK}, status=500)


urlpatterns = [
    path("items/<int:item_id>", item),
    path("json", json_body),
    path("form", form),
    path("stream", stream),
    path("startup", startup),
    path("custom-error", custom_error),
    path("crash", crash),
]
handler500 = f"{__name__}.server_error"

django.setup()

from django.core.asgi import get_asgi_application  # noqa: E402 - needs the settings above
from django.core.wsgi import get_wsgi_application  # noqa: E402 - needs the settings above

application = get_wsgi_application()
asgi_application = get_asgi_application()
