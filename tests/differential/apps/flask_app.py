"""A Flask app as Flask's docs write one: a session that counts visits, ``send_file``,
``stream_with_context``, a form post and an error handler."""

from __future__ import annotations

import os
import time
from pathlib import Path

from flask import Flask, abort, request, send_file, session, stream_with_context

app = Flask(__name__)
app.secret_key = b"differential-suite-not-secret"
STATIC = Path(__file__).resolve().parent / "static"


@app.route("/visits")
def visits():
    session["visits"] = session.get("visits", 0) + 1
    return {"visits": session["visits"]}


@app.route("/logout", methods=["POST"])
def logout():
    session.pop("visits", None)
    return "", 204


@app.get("/report")
def report():
    return send_file(STATIC / "report.txt", mimetype="text/plain", as_attachment=True)


@app.get("/stream")
def streamed_response():
    def generate():
        yield "Hello "
        yield request.args["name"]
        yield "!"

    return stream_with_context(generate())


@app.get("/progress")
def progress():
    """Steps of a slow job, each sent as it completes. A step completes when its marker file
    appears (the test's way of being the slow job), so a client sees whether each step arrives as
    it is produced."""
    directory = request.args["dir"]

    def generate():
        for step in range(3):
            yield f"step {step} done\n"
            marker = os.path.join(directory, f"step-{step}")
            deadline = time.monotonic() + 15
            while not os.path.exists(marker) and time.monotonic() < deadline:
                time.sleep(0.005)
        yield "finished\n"

    return app.response_class(stream_with_context(generate()), mimetype="text/plain")


@app.post("/form")
def form():
    return {"name": request.form["name"], "files": sorted(request.files), "args": request.args.to_dict()}


@app.get("/missing")
def missing():
    abort(404)
