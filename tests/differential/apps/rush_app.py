"""A rush App (rush's own API, README "The App API"): it runs only under rush, so its answers are
compared with what the ASGI and WSGI apps see under the reference servers."""

from __future__ import annotations

from rush import App, Request

app = App()


@app.get("/scheme")
def scheme(req: Request):
    return req.scheme
