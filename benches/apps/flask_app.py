"""A Flask app as people write them: ``GET /json`` returns a dict, Flask serialises it.

Served unchanged by rush (WSGI detected), granian's WSGI mode and gunicorn:
the wsgi-asgi group measures what a framework user gets from each server.
"""

from flask import Flask

app = Flask(__name__)


@app.get("/json")
def json_message():
    return {"message": "Hello, World!"}
