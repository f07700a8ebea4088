"""Real framework apps served unchanged by rush (issue 4), exercised over real
sockets with httpx: Flask and Django as WSGI (Flask also on ``--threads``),
Django's ASGI handler, Starlette and FastAPI as ASGI. Every app implements
the same contract (see tests/apps/flask_app.py): path and query parameters,
JSON bodies, urlencoded and multipart form posts, streaming responses,
startup code (lifespan state for the ASGI apps) and shutdown (lifespan
shutdown on SIGTERM for Starlette and FastAPI), a custom exception turned
into a 418 by the framework's exception handler, and the app's own 500 page
for unhandled errors.
"""

from __future__ import annotations

import hashlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support import RushServer, ServerFactory, clean_environment, request

# name -> (app, interface, extra arguments)
FRAMEWORKS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "flask": ("tests.apps.flask_app:app", "wsgi", ()),
    "flask-threads": ("tests.apps.flask_app:app", "wsgi", ("--threads", "2")),
    "django": ("tests.apps.django_app:application", "wsgi", ()),
    "django-asgi": ("tests.apps.django_app:asgi_application", "asgi", ()),
    "starlette": ("tests.apps.starlette_app:app", "asgi", ()),
    "fastapi": ("tests.apps.fastapi_app:app", "asgi", ()),
}


class Served:
    def __init__(self, name: str, server: RushServer) -> None:
        self.name = name
        self.framework = name.split("-")[0]
        self.app, self.interface, _ = FRAMEWORKS[name]
        self.server = server
        self.http = httpx.Client(base_url=server.url, timeout=15)


@pytest.fixture(scope="module", params=list(FRAMEWORKS))
def served(request: pytest.FixtureRequest, module_servers: ServerFactory) -> Iterator[Served]:
    app, _, args = FRAMEWORKS[request.param]
    served = Served(request.param, module_servers(app, *args))
    yield served
    served.http.close()


def test_interface_detected(served: Served) -> None:
    kind = {"wsgi": "a WSGI", "asgi": "an ASGI"}.get(served.interface, f"a {served.interface}")
    pattern = rf"serving {served.app.replace('.', r'.')} as {kind} app"
    served.server.wait_for_log(pattern)


def test_path_and_query_parameters(served: Served) -> None:
    response = served.http.get("/items/42", params=[("q", "caf\u00e9 au lait"), ("tag", "a"), ("tag", "b c")])
    assert response.status_code == 200
    body = response.json()
    assert (body["item_id"], body["q"], body["tags"]) == (42, "caf\u00e9 au lait", ["a", "b c"])
    plain = served.http.get("/items/7").json()
    assert (plain["item_id"], plain["q"], plain["tags"]) == (7, None, [])
    # Not an integer: the framework's own refusal (FastAPI validates with a 422).
    assert served.http.get("/items/not-a-number").status_code == (422 if served.framework == "fastapi" else 404)


def test_json_body(served: Served) -> None:
    payload = {"name": "n\u00e4me", "numbers": [1, 2, 3, 40]}
    response = served.http.post("/json", json=payload)
    assert response.status_code == 200
    assert response.json() == {"received": payload, "total": 46}


def test_urlencoded_form(served: Served) -> None:
    response = served.http.post("/form", data={"name": "Ann Lee & co", "choice": ["a", "b"]})
    assert response.status_code == 200
    assert response.json() == {"name": "Ann Lee & co", "choices": ["a", "b"], "file": None}


def test_multipart_form_with_a_file(served: Served) -> None:
    content = os.urandom(300 * 1024)
    response = served.http.post(
        "/form",
        data={"name": "uploader", "choice": ["x"]},
        files={"upload": ("report.bin", content, "application/octet-stream")},
    )
    assert response.status_code == 200
    assert response.json() == {
        "name": "uploader",
        "choices": ["x"],
        "file": {"filename": "report.bin", "size": len(content), "sha256": hashlib.sha256(content).hexdigest()},
    }


def test_streaming_response(served: Served) -> None:
    with served.http.stream("GET", "/stream", params={"n": "200"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        lines = list(response.iter_lines())
    assert lines == [f"line {number} of 200" for number in range(200)]
    if served.framework in ("starlette", "fastapi"):
        # A body produced while the app suspends goes out as it comes: chunked.
        assert response.headers.get("transfer-encoding") == "chunked"


def test_startup_ran_in_the_worker(served: Served) -> None:
    worker = served.server.single_worker()
    startup = served.http.get("/startup").json()
    assert startup["started"] is True
    assert startup["startup_pid"] == startup["pid"] == worker
    assert startup["framework"] == served.framework


def test_custom_exception_handler(served: Served) -> None:
    response = served.http.get("/custom-error")
    assert response.status_code == 418
    assert response.json() == {"error": "custom", "detail": "raised on purpose", "handled_by": served.framework}


def test_unhandled_error_gets_the_apps_500_page(served: Served) -> None:
    response = served.http.get("/crash")
    assert response.status_code == 500
    assert response.json() == {"error": "internal", "handled_by": served.framework}
    # And the server goes on.
    assert served.http.get("/items/1").status_code == 200


def test_unknown_route_is_the_frameworks_404(served: Served) -> None:
    assert served.http.get("/no/such/route").status_code == 404


def test_head_and_keep_alive(served: Served) -> None:
    with served.server.connect() as connection:
        connection.send(request("HEAD", "/items/5") + request("GET", "/items/6") + request("GET", "/stream?n=3"))
        head, get, streamed = connection.read_responses(3, ["HEAD", "GET", "GET"])
    # FastAPI routes answer only the methods they declare (no implicit HEAD for GET).
    assert head.status == (405 if served.framework == "fastapi" else 200)
    assert head.body == b""
    assert get.json()["item_id"] == 6
    assert streamed.body == b"line 0 of 3\nline 1 of 3\nline 2 of 3\n"


def test_many_requests_on_pooled_connections(served: Served) -> None:
    for number in range(30):
        assert served.http.get(f"/items/{number}").json()["item_id"] == number


# ---------------------------------------------------------------------------
# Shutdown


@pytest.mark.parametrize("framework", ["starlette", "fastapi"])
def test_asgi_lifespan_startup_and_shutdown(rush_server: ServerFactory, tmp_path: Path, framework: str) -> None:
    app, _, _ = FRAMEWORKS[framework]
    server = rush_server(app, env=clean_environment({"RUSHTEST_MARKER_DIR": str(tmp_path)}))
    worker = server.single_worker()
    assert (tmp_path / f"{framework}-startup").read_text() == str(worker)
    with httpx.Client(base_url=server.url, timeout=15) as http:
        assert http.get("/startup").json()["started"] is True
    assert not (tmp_path / f"{framework}-shutdown").exists()
    assert server.stop(signal.SIGTERM) == 0
    assert (tmp_path / f"{framework}-shutdown").read_text() == str(worker)


def test_django_asgi_without_lifespan_support(served: Served) -> None:
    if served.name != "django-asgi":
        pytest.skip("Django's ASGI handler only")
    served.server.wait_for_log("does not support ASGI lifespan")


def test_wsgi_app_atexit_runs_on_graceful_shutdown(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = rush_server("tests.apps.flask_app:app", env=clean_environment({"RUSHTEST_MARKER_DIR": str(tmp_path)}))
    worker = server.single_worker()
    with httpx.Client(base_url=server.url, timeout=15) as http:
        assert http.get("/startup").json()["pid"] == worker
    assert server.stop(signal.SIGTERM) == 0
    assert (tmp_path / "flask-shutdown").read_text() == str(worker)
