"""The harness's own comparison (`Pair.compare`) on values the clock writes: Flask session
cookies signed in two different seconds compare equal (the flake of issue 33 item 11, where the
two servers' requests fell in different seconds), and still differ when what the session holds
differs. The cookies are Flask's own, made by its session serializer at a chosen time."""

from __future__ import annotations

import time

import flask
import pytest
from harness import Pair, Side

SIGNED_AT = 1_790_000_000


def session_cookie(monkeypatch: pytest.MonkeyPatch, data: dict, at: int) -> str:
    """The Set-Cookie value Flask writes for ``data`` when it signs in second ``at``."""
    app = flask.Flask("harness")
    app.secret_key = "diff"
    serializer = app.session_interface.get_signing_serializer(app)
    assert serializer is not None
    with monkeypatch.context() as patched:
        patched.setattr(time, "time", lambda: float(at))
        value = serializer.dumps(data)
    return f"session={value}; HttpOnly; Path=/"


def views(cookie: str) -> dict:
    """A client view (Set-Cookie) and an app view (the cookie sent back, as in an environ)."""
    return {
        "client": {"status": 200, "headers": {"set-cookie": cookie}},
        "app": {"HTTP_COOKIE": cookie.partition(";")[0]},
    }


def pair() -> Pair:
    return Pair("harness", Side("rush", None, None), Side("gunicorn", None, None))  # type: ignore[arg-type]


def test_a_session_signed_a_second_later_compares_equal(monkeypatch: pytest.MonkeyPatch) -> None:
    early = session_cookie(monkeypatch, {"visits": 1}, SIGNED_AT)
    late = session_cookie(monkeypatch, {"visits": 1}, SIGNED_AT + 1)
    assert early != late, "the timestamp is part of the cookie"
    pair().compare("session", views(early), views(late))


def test_a_session_that_holds_something_else_still_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    one = session_cookie(monkeypatch, {"visits": 1}, SIGNED_AT)
    two = session_cookie(monkeypatch, {"visits": 2}, SIGNED_AT + 1)
    with pytest.raises(AssertionError) as failure:
        pair().compare("session", views(one), views(two))
    assert "harness/session/client.headers.set-cookie" in str(failure.value)
    assert "harness/session/app.HTTP_COOKIE" in str(failure.value)


def test_a_cookie_expiry_is_masked_but_its_other_attributes_are_not() -> None:
    now = "csrftoken=T; expires=Mon, 29 Nov 2027 00:49:10 GMT; Max-Age=31449600; Path=/"
    later = "csrftoken=T; expires=Mon, 29 Nov 2027 00:49:11 GMT; Max-Age=31449600; Path=/"
    pair().compare("expires", {"cookie": now}, {"cookie": later})
    with pytest.raises(AssertionError):
        pair().compare("expires", {"cookie": now}, {"cookie": later.replace("Path=/", "Path=/admin")})
