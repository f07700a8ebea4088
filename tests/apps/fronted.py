"""A rush App for the proxy-header, response-header and log tests: it
answers with what the server tells it about the request's origin."""

from __future__ import annotations

import os
from typing import Any

from rush import App, Request, Response

app = App()


@app.get("/origin")
def origin(request: Request) -> dict[str, Any]:
    return {"client": request.client, "scheme": request.scheme, "host": request.host, "pid": os.getpid()}


@app.get("/own-server-header")
def own_server_header(request: Request) -> Response:
    return Response(b"mine", headers={"Server": "app/1", "Date": "Thu, 01 Jan 1970 00:00:00 GMT"})
