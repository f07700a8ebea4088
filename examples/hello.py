"""The demo app served by `make run`: every feature of the rush App API in a few lines.

rush examples.hello:app            # then open http://127.0.0.1:8000/
"""

from rush import App, Request, Response

app = App()


@app.get("/")
def index(request: Request) -> str:
    return "Hello, World!"


@app.get("/hello")
def hello(request: Request) -> str:
    return f"Hello, {request.query.get('name', 'world')}"


@app.get("/json")
def json_endpoint(request: Request) -> dict:
    return {"message": "Hello, World!"}


@app.route("/users/{user_id}", methods=["GET", "PUT"])
async def user(request: Request, user_id: str) -> dict:
    return {"id": user_id, "method": request.method}


@app.post("/echo")
def echo(request: Request) -> Response:
    return Response(request.body, content_type=request.headers.get("content-type", "application/octet-stream"))


app.redirect("/easter", "/egg", status=301)


@app.get("/egg")
def egg(request: Request) -> str:
    return "You found it."


@app.errorhandler(404)
def not_found(request: Request) -> Response:
    return Response(f"nothing at {request.path}", status=404)
