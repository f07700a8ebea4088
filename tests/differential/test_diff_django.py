"""Differential tests of the Django project (apps/django_site/): over WSGI against gunicorn, over
ASGI against uvicorn, and its Channels consumer against uvicorn. The admin login with CSRF, a file
upload, a StreamingHttpResponse, and the request as Django sees it."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import httpx
import pytest
from harness import (
    Pair,
    Side,
    asgi_app_view,
    curl_view,
    error_lines,
    httpx_view,
    start_pair,
    websocket_url,
    wsgi_app_view,
)
from support import PYTHON, REPO, ServerFactory, clean_environment
from websockets.sync.client import connect

SETTINGS = "tests.differential.apps.django_site.settings"


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite database with an admin user, shared by every server of the module."""
    path = tmp_path_factory.mktemp("django") / "db.sqlite3"
    setup = (
        "import django; django.setup(); from django.core.management import call_command; "
        "call_command('migrate', verbosity=0); from django.contrib.auth.models import User; "
        "User.objects.create_superuser('admin', 'admin@example.com', 'correct horse')"
    )
    env = clean_environment({"DJANGO_SETTINGS_MODULE": SETTINGS, "DIFF_DJANGO_DB": str(path)})
    subprocess.run([str(PYTHON), "-c", setup], cwd=REPO, env=env, check=True, timeout=120)
    return path


def django_pair(factory: ServerFactory, database: Path, app: str, interface: str) -> Pair:
    return start_pair(
        factory, app, interface, env={"DJANGO_SETTINGS_MODULE": SETTINGS, "DIFF_DJANGO_DB": str(database)}
    )


@pytest.fixture(scope="module")
def wsgi(module_servers: ServerFactory, database: Path) -> Pair:
    return django_pair(module_servers, database, "django_site.wsgi:application", "wsgi")


@pytest.fixture(scope="module")
def asgi(module_servers: ServerFactory, database: Path) -> Pair:
    return django_pair(module_servers, database, "django_site.asgi:application", "asgi")


@pytest.fixture(scope="module")
def channels(module_servers: ServerFactory, database: Path) -> Pair:
    return django_pair(module_servers, database, "django_site.routing:application", "asgi")


def masked(view: dict) -> dict:
    """The random parts of a Django answer (CSRF tokens, session keys) replaced by placeholders."""
    view = json.loads(json.dumps(view))
    if "expires" in view["headers"]:  # never-cache responses expire "now"
        view["headers"]["expires"] = "NOW"
    view["body"] = re.sub(
        r'name="csrfmiddlewaretoken" value="[^"]+"', 'name="csrfmiddlewaretoken" value="T"', view["body"]
    )
    cookies = view["headers"].get("set-cookie")
    if cookies is not None:
        cookies = cookies if isinstance(cookies, list) else [cookies]
        view["headers"]["set-cookie"] = [re.sub(r"=[^;]*", "=V", cookie, count=1) for cookie in cookies]
        view["headers"]["set-cookie"] = [
            re.sub(r"expires=[^;]*", "expires=E", c) for c in view["headers"]["set-cookie"]
        ]
    return view


def admin_login(side: Side) -> list[dict]:
    with httpx.Client(base_url=side.url) as client:
        steps = [client.get("/admin/")]
        steps.append(client.get("/admin/login/?next=/admin/"))
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', steps[-1].text).group(1)
        form = {"username": "admin", "password": "wrong", "next": "/admin/"}
        steps.append(client.post("/admin/login/?next=/admin/", data={**form, "csrfmiddlewaretoken": token}))
        form["password"] = "correct horse"
        steps.append(client.post("/admin/login/?next=/admin/", data=form))  # no token: 403
        steps.append(client.post("/admin/login/?next=/admin/", data={**form, "csrfmiddlewaretoken": token}))
        steps.append(client.get("/admin/"))
        steps.append(client.get("/admin/auth/user/"))
    return [masked(httpx_view(step)) for step in steps]


def upload_and_stream(side: Side, document: Path) -> dict:
    return {
        "upload": curl_view(side, "/upload/", "-F", f"document=@{document}", "-F", "title=quarterly"),
        "upload-no-csrf-exempt": curl_view(side, "/admin/login/", "-F", f"document=@{document}"),
        "csv": curl_view(side, "/export.csv"),
        "whoami": curl_view(side, "/whoami/?a=1&b=%C3%A9", "-H", "X-Custom: yes", "-d", "k=v"),
    }


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("upload") / "figures.bin"
    path.write_bytes(hashlib.sha256(b"seed").digest() * 40000)
    return path


def test_wsgi_admin_login_with_csrf(wsgi: Pair) -> None:
    rush_view, _ = wsgi.check("admin-login", admin_login)
    assert [step["status"] for step in rush_view] == [302, 200, 200, 403, 302, 200, 200]


def test_wsgi_upload_and_streaming(wsgi: Pair, document: Path) -> None:
    wsgi.check("upload-stream", lambda side: upload_and_stream(side, document))


def test_wsgi_environ(wsgi: Pair) -> None:
    def script(side: Side) -> dict:
        httpx.get(side.url + "/whoami/?x=1", headers={"x-diff-id": "environ", "Cookie": "a=b"})
        return wsgi_app_view(side.wait_events("environ", lambda events: any("close" in e for e in events), "close()"))

    wsgi.check("environ", script)


def test_asgi_admin_login_with_csrf(asgi: Pair) -> None:
    rush_view, _ = asgi.check("admin-login", admin_login)
    assert [step["status"] for step in rush_view] == [302, 200, 200, 403, 302, 200, 200]


def test_asgi_upload_and_streaming(asgi: Pair, document: Path) -> None:
    asgi.check("upload-stream", lambda side: upload_and_stream(side, document))


def test_asgi_scope(asgi: Pair) -> None:
    def script(side: Side) -> dict:
        httpx.post(side.url + "/whoami/?x=1", content=b"body", headers={"x-diff-id": "scope"})
        return asgi_app_view(side.wait_finished("scope"))

    asgi.check("scope", script)


def test_channels_consumer(channels: Pair) -> None:
    def script(side: Side) -> dict:
        with connect(websocket_url(side, "/ws/chat/lobby/"), additional_headers={"x-diff-id": "consumer"}) as ws:
            ws.send(json.dumps({"message": "hello"}))
            reply = json.loads(ws.recv(timeout=15))
        http = curl_view(side, "/whoami/")
        return {"reply": reply, "http": http, "app": asgi_app_view(side.wait_finished("consumer"))}

    channels.check("consumer", script)


def test_nothing_logged_as_an_error(wsgi: Pair, asgi: Pair) -> None:
    """Last in the module: neither server logged an error for what the tests above did."""
    for pair in (wsgi, asgi):
        pair.compare("error-log", error_lines(pair.rush), error_lines(pair.reference))
