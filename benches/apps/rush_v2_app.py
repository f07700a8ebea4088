"""The Rush v2 seed's server on today's rush: a static site at ``/``, a redirect and one handler.

``GET /`` is ``index.html`` from the cached static mount, ``/easter`` a native
301 to ``/egg``, ``/hello?name=bill`` the only Python handler, and any other
path a 404 from the static mount. Routes and redirects win over the mount, so
only the file and the 404 are answered by the static-file code.
"""

from rush import App, Request

from benches.apps.site import ensure_site

app = App()


@app.get("/hello")
def hello(request: Request) -> str:
    return f"Hello, {request.query.get('name', 'world')}"


app.redirect("/easter", "/egg", status=301)
app.static("/", ensure_site())
