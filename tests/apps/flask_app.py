"""A Flask app (WSGI) for tests/test_frameworks.py, served with
``rush tests.apps.flask_app:app``. The endpoints follow the contract every
framework app of the tests implements:

* ``GET /items/<int:item_id>?q=...&tag=...&tag=...``: path and query parameters;
* ``POST /json``: a JSON body; ``POST /form``: a urlencoded or multipart form
  (``name``, repeated ``choice``, optional file ``upload``);
* ``GET /stream?n=N``: a streamed body of N lines (a generator under
  ``stream_with_context``, which reads the request while streaming);
* ``GET /startup``: what the app's startup code recorded, and this worker's PID;
* ``GET /custom-error``: raises CustomError, turned into a 418 by an error
  handler; ``GET /crash``: an unhandled error, answered by the app's own 500 handler.

Flask has no startup event: the app's set-up code runs when rush imports the
module in the worker. WSGI has no shutdown event; an ``atexit`` hook writes a
marker file in ``RUSHTEST_MARKER_DIR`` (if set) when the process exits normally.
"""

from __future__ import annotations

import atexit
import hashlib
import os
from collections.abc import Iterator
from typing import Any

from flask import Flask, Response, jsonify, request, stream_with_context

from tests.apps._shared import write_marker_file

FRAMEWORK = "flask"
MARKER_DIR = os.environ.get("RUSHTEST_MARKER_DIR")


class CustomError(Exception):
    pass


app = Flask(__name__)
app.config["STARTUP"] = {"started": True, "startup_pid": os.getpid()}


def write_shutdown_marker() -> None:
    if MARKER_DIR:
        write_marker_file(MARKER_DIR, f"{FRAMEWORK}-shutdown", str(os.getpid()))


atexit.register(write_shutdown_marker)


@app.get("/items/<int:item_id>")
def item(item_id: int) -> Any:
    return jsonify(item_id=item_id, q=request.args.get("q"), tags=request.args.getlist("tag"))


@app.post("/json")
def json_body() -> Any:
    payload = request.get_json()
    return jsonify(received=payload, total=sum(payload["numbers"]))


@app.post("/form")
def form() -> Any:
    upload = request.files.get("upload")
    described = None
    if upload is not None:
        data = upload.read()
        described = {"filename": upload.filename, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return jsonify(name=request.form.get("name"), choices=request.form.getlist("choice"), file=described)


@app.get("/stream")
def stream() -> Response:
    @stream_with_context
    def generate() -> Iterator[str]:
        # The request is still reachable while the body is produced.
        count = int(request.args["n"])
        for number in range(count):
            yield f"line {number} of {count}\n"

    return Response(generate(), mimetype="text/plain")


@app.get("/startup")
def startup() -> Any:
    return jsonify(**app.config["STARTUP"], pid=os.getpid(), framework=FRAMEWORK)


@app.get("/custom-error")
def custom_error() -> Any:
    raise CustomError("raised on purpose")


@app.get("/crash")
def crash() -> Any:
    raise RuntimeError("an unhandled error")


@app.errorhandler(CustomError)
def handle_custom_error(error: CustomError) -> Any:
    return jsonify(error="custom", detail=str(error), handled_by=FRAMEWORK), 418


@app.errorhandler(500)
def handle_server_error(error: Exception) -> Any:
    return jsonify(error="internal", handled_by=FRAMEWORK), 500
