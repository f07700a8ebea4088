"""The websocket group's endpoints on socketify's native WebSocket API (uWebSockets underneath):
``python -m benches.apps.ws_socketify_app --host H --port P``.

``/echo`` sends every message back with its opcode; ``/broadcast`` subscribes each connection to
one topic and publishes every message to it with ``app.publish`` (every subscriber, the sender
included, in uWebSockets' own code). permessage-deflate is on (a compressor and a decompressor
per connection, as rush and uvicorn keep), negotiated only with clients that offer it: the load
generator does not, the idle-deflate measurement does. Messages up to 16 MiB, no idle timeout.
``GET /`` answers ``Hello, World!``.
"""

import argparse

from socketify import App, CompressOptions

TOPIC = "room"
BEHAVIOUR = {
    "compression": CompressOptions.DEDICATED_COMPRESSOR | CompressOptions.DEDICATED_DECOMPRESSOR_32KB,
    "max_payload_length": 16 * 1024 * 1024,
    "idle_timeout": 0,
    "max_backpressure": 16 * 1024 * 1024,
}


def build_app() -> App:
    app = App()

    def echo_message(ws, message, opcode) -> None:
        ws.send(message, opcode)

    def broadcast_open(ws) -> None:
        ws.subscribe(TOPIC)

    def broadcast_message(ws, message, opcode) -> None:
        app.publish(TOPIC, message, opcode)

    app.get("/", lambda res, req: res.send(b"Hello, World!", content_type=b"text/plain; charset=utf-8"))
    app.ws("/echo", {**BEHAVIOUR, "message": echo_message})
    app.ws("/broadcast", {**BEHAVIOUR, "open": broadcast_open, "message": broadcast_message})
    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    arguments = parser.parse_args()
    app = build_app()
    app.listen({"host": arguments.host, "port": arguments.port})
    app.run()
