"""The Channels entry point (Channels' tutorial ``asgi.py``): Django for HTTP, the chat
consumer for WebSocket."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.differential.apps.django_site.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402 (after Django's setup, as the docs say)
from django.urls import re_path  # noqa: E402

from .consumers import ChatConsumer  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": URLRouter([re_path(r"ws/chat/(?P<room_name>\w+)/$", ChatConsumer.as_asgi())]),
    }
)
