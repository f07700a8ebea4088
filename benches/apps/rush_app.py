"""The benchmark endpoints on rush's native App API (served by ``rush benches.apps.rush_app:app``).

The redirect and unknown-path 404 never reach Python: rush answers them natively,
which is part of what the redirect and 404 scenarios measure.
"""

from rush import App, Request

app = App()


@app.get("/")
def index(request: Request) -> str:
    return "Hello, World!"


@app.get("/hello")
def hello(request: Request) -> str:
    return f"Hello, {request.query.get('name', 'world')}"


@app.get("/json")
def json_message(request: Request) -> dict:
    return {"message": "Hello, World!"}


app.redirect("/easter", "/egg", status=301)
