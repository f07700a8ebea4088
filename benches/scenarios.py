"""What the suite measures: scenarios (one request shape + one load shape) collected into groups.

A `Scenario` is a small declarative record: the request (method, path,
headers), the load (wrk threads, connections, pipeline depth, extra flags)
and what a correct response looks like (`Expectation`). The runner knows
how to turn any scenario into a correctness check and a wrk command, so a
new scenario is a few lines in a group list below, and a new group is a new
list registered in `GROUPS`.

A scenario names the ``app`` it needs (the set of endpoints: ``hello``,
``rush-v2``, ``static``, ``wsgi``, ...; listed in `benches.servers`); it is
measured on every server that has a command for that app, unless it names a
subset in ``servers``. ``workers`` > 1 asks each server for that many worker
processes or threads; such a server cannot be pinned to one core, so it runs
on the server's and wrk's cores together (the tables say so).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from benches import catalog
from benches.apps.site import INDEX_HTML, LARGE_FILE, LARGE_SIZE, SMALL_FILE, SMALL_SIZE, sha256, text_of_size


@dataclass(frozen=True)
class Expectation:
    """What every response of a scenario must be, checked before timing and again after it.

    ``body`` is compared byte for byte, ``json`` as parsed JSON (servers differ in
    whitespace), ``headers`` by name (case-insensitive) and value: a value matches
    if it is equal or if it is the expected media type followed by parameters
    (``text/plain`` matches ``text/plain; charset=utf-8``). ``None`` means "not
    checked": 404 pages, for instance, differ from server to server.
    """

    status: int = 200
    body: bytes | None = None
    # For large bodies (static files): their SHA-256 instead of the bytes, kept out of the results JSON.
    body_sha256: str | None = None
    json: Any = None
    headers: tuple[tuple[str, str], ...] = ()
    # A check of the parsed body that depends on the path asked ("catalog": benches.catalog.shape_problems).
    json_shape: str | None = None
    # The body's length where only its digest is given, for a load generator that checks each
    # answer's length during the load (h3-load); None when not checked there.
    body_length: int | None = None

    @property
    def is_error_status(self) -> bool:
        """wrk counts every status >= 400 as "Non-2xx or 3xx"; for such scenarios that count is expected."""
        return self.status >= 400


@dataclass(frozen=True)
class Scenario:
    """One measured request shape under one load shape."""

    name: str
    group: str
    title: str
    path: str
    expect: Expectation
    app: str = "hello"
    workers: int = 1
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    threads: int = 1
    connections: int = 100
    pipeline: int = 1
    wrk_args: tuple[str, ...] = ()
    # Whether the server must close the connection after answering (Connection: close).
    expect_close: bool = False
    # Restricts the scenario to these servers; None means every server.
    servers: tuple[str, ...] | None = None
    # HTTPS: the servers' apps for it serve benches/tls.py's certificate; checks and wrk speak TLS.
    tls: bool = False
    # A wrk script of benches/lua/ and its arguments (after ``--``), for loads that are not one
    # request repeated; "" for plain wrk (or pipeline.lua, which ``pipeline`` brings).
    script: str = ""
    script_args: tuple[str, ...] = ()
    # The paths the load asks ("catalog": benches.catalog.SPREAD), every one checked before timing;
    # "" when the load asks ``path`` only.
    spread: str = ""
    notes: str = ""
    # For proxies: the app nginx serves as the origin behind the proxy, started by the runner
    # first; ``{origin}`` in ``path`` becomes its host:port (an absolute-form target).
    origin_app: str | None = None
    # The load generator: "wrk", or "tunnel" (benches/tunnel_load.py: CONNECT tunnels, which wrk
    # cannot open; it takes ``wrk_args`` such as ``--tunnel-per-request``), or for the websocket
    # group "websocket" (benches/rust's ws-load: echo or broadcast, by ``path``) and "ws-idle"
    # (benches/wsclient.py holding ``connections`` idle connections while the runner reads RSS);
    # for the http2 group "h2load" (h2load over h2c, benches/h2load.py), "h2load-h1" (the same
    # h2load speaking HTTP/1.1) and "h2-idle" (benches/h2idle.py holding idle h2c connections);
    # for the http3 group "h3-load", "h3-handshakes" and "h3-idle" (benches/rust's h3-load: load,
    # a new connection per request, idle connections held; benches/h3load.py), and "h2load-tls"
    # and "h2load-tls-h1" (h2load over TLS, ALPN h2 or HTTP/1.1).
    load: str = "wrk"
    # h2load's streams in flight per connection (-m); 1 for every other load generator.
    streams: int = 1
    # WebSocket scenarios: the size of each message in bytes, and whether the client offers
    # permessage-deflate (only the idle scenarios do).
    message_size: int = 0
    deflate: bool = False

    @property
    def reports_latency(self) -> bool:
        """wrk's latency percentiles are meaningless under pipelining: it records one latency per
        batch but corrects for coordinated omission with the per-response rate, which piles
        synthetic samples below its own minimum (percentiles print as 0 or exceed the maximum)."""
        return self.pipeline == 1

    @property
    def websocket(self) -> bool:
        return self.load in ("websocket", "ws-idle")

    @property
    def http2(self) -> bool:
        """Whether the scenario speaks HTTP/2 (h2c with prior knowledge), checks included."""
        return self.load in ("h2load", "h2-idle")

    @property
    def http3(self) -> bool:
        """Whether the scenario speaks HTTP/3 (h3-load, checks included)."""
        return self.load in ("h3-load", "h3-handshakes", "h3-idle")

    @property
    def idle(self) -> bool:
        """The scenarios that measure the memory of idle connections, not speed."""
        return self.load in IDLE_LOADS

    @property
    def ws_mode(self) -> str:
        """ "broadcast" for the broadcast endpoint, "echo" otherwise (the idle connections echo once)."""
        return "broadcast" if self.path == "/broadcast" else "echo"

    @property
    def key(self) -> str:
        return f"{self.group}/{self.name}"

    def applies_to(self, server_name: str) -> bool:
        return self.servers is None or server_name in self.servers


# Loads that hold idle connections while the runner reads the server's RSS (no throughput).
IDLE_LOADS = ("ws-idle", "h2-idle", "h3-idle")

PLAIN_HELLO = Expectation(status=200, body=b"Hello, World!", headers=(("content-type", "text/plain"),))

HELLO_GROUP: list[Scenario] = [
    Scenario(
        name="keep-alive",
        group="hello",
        title="GET / keep-alive",
        path="/",
        expect=PLAIN_HELLO,
        notes="plaintext over 100 keep-alive connections",
    ),
    Scenario(
        name="pipelined-16",
        group="hello",
        title="GET / pipelined 16 deep",
        path="/",
        expect=PLAIN_HELLO,
        pipeline=16,
        notes="16 requests per write on each of 100 connections",
    ),
    Scenario(
        name="query",
        group="hello",
        title="GET /hello?name=bill",
        path="/hello?name=bill",
        expect=Expectation(status=200, body=b"Hello, bill", headers=(("content-type", "text/plain"),)),
        notes="the handler reads a query parameter",
    ),
    Scenario(
        name="redirect",
        group="hello",
        title="GET /easter (301)",
        path="/easter",
        expect=Expectation(status=301, headers=(("location", "/egg"),)),
        notes="a static redirect",
    ),
    Scenario(
        name="not-found",
        group="hello",
        title="GET unknown path (404)",
        path="/no/such/page",
        expect=Expectation(status=404),
        notes="unknown path; wrk's non-2xx/3xx count must equal its request count",
    ),
    Scenario(
        name="connection-close",
        group="hello",
        title="GET / Connection: close",
        path="/",
        headers=(("Connection", "close"),),
        expect=PLAIN_HELLO,
        expect_close=True,
        notes="a new TCP connection per request",
    ),
    Scenario(
        name="json",
        group="hello",
        title="GET /json",
        path="/json",
        expect=Expectation(
            status=200, json={"message": "Hello, World!"}, headers=(("content-type", "application/json"),)
        ),
        notes="a small JSON object serialised per request",
    ),
]

# The Rush v2 seed (shared/seeds/000): 12 wrk threads and 1000 connections on a 6-core machine.
# Here wrk has one core, so one thread; the 1000 connections are kept.
RUSH_V2_LOAD = {"group": "rush-v2", "app": "rush-v2", "threads": 1, "connections": 1000}
# The servers that can serve a static file at "/" (uvicorn has no static files).
STATIC_FILE_SERVERS = ("rush", "nginx", "nginx-ofc", "granian-rsgi")

RUSH_V2_GROUP: list[Scenario] = [
    Scenario(
        name="redirect",
        title="GET /easter (301)",
        path="/easter",
        expect=Expectation(status=301, headers=(("location", "/egg"),)),
        notes="the seed's static redirect",
        **RUSH_V2_LOAD,
    ),
    Scenario(
        name="cached-file",
        title="GET / (cached index.html)",
        path="/",
        expect=Expectation(status=200, body_sha256=sha256(INDEX_HTML), headers=(("content-type", "text/html"),)),
        servers=STATIC_FILE_SERVERS,
        notes="a small index.html from a static mount at /, from memory where the server caches",
        **RUSH_V2_LOAD,
    ),
    Scenario(
        name="query",
        title="GET /hello?name=bill",
        path="/hello?name=bill",
        expect=Expectation(status=200, body=b"Hello, bill", headers=(("content-type", "text/plain"),)),
        notes="the seed's handler parsing a query parameter",
        **RUSH_V2_LOAD,
    ),
    Scenario(
        name="not-found",
        title="GET unknown path (404)",
        path="/non-existing-page-or-route",
        expect=Expectation(status=404),
        notes="the seed's 404: under the static mount for the servers that have one",
        **RUSH_V2_LOAD,
    ),
]

STATIC_GROUP: list[Scenario] = [
    Scenario(
        name="file-4k",
        group="static",
        app="static",
        title="GET a 4 KiB file",
        path=f"/static/{SMALL_FILE}",
        expect=Expectation(body_sha256=sha256(text_of_size(SMALL_SIZE)), headers=(("content-type", "text/plain"),)),
        notes="a cached 4 KiB text file under a static mount",
    ),
    Scenario(
        name="file-1m",
        group="static",
        app="static",
        title="GET a 1 MiB file",
        path=f"/static/{LARGE_FILE}",
        expect=Expectation(body_sha256=sha256(text_of_size(LARGE_SIZE)), headers=(("content-type", "text/plain"),)),
        notes="a 1 MiB text file: throughput of large bodies",
    ),
    Scenario(
        name="not-found",
        group="static",
        app="static",
        title="GET a missing file (404)",
        path="/static/missing.txt",
        expect=Expectation(status=404),
        notes="a path under the static mount with no file",
    ),
]

# ASGI's http.response.pathsend: Starlette's FileResponse, sent by the server itself where it lists
# the extension (rush, granian), streamed by Starlette in chunks where it does not (uvicorn).
STARLETTE_FILE_GROUP: list[Scenario] = [
    Scenario(
        name=f"file-{label}",
        group="starlette-file",
        app="starlette-file",
        title=f"Starlette FileResponse: GET a {title} file",
        path=f"/files/{name}",
        expect=Expectation(body_sha256=sha256(text_of_size(size)), headers=(("content-type", "text/plain"),)),
        notes=f"Starlette's FileResponse of a {title} file (benches/apps/starlette_file_app.py)",
    )
    for label, title, name, size in (
        ("4k", "4 KiB", SMALL_FILE, SMALL_SIZE),
        ("1m", "1 MiB", LARGE_FILE, LARGE_SIZE),
    )
]

JSON_MESSAGE = Expectation(
    status=200, json={"message": "Hello, World!"}, headers=(("content-type", "application/json"),)
)

WSGI_ASGI_GROUP: list[Scenario] = [
    Scenario(
        name="wsgi-hello",
        group="wsgi-asgi",
        app="wsgi",
        title="WSGI: GET /",
        path="/",
        expect=PLAIN_HELLO,
        notes="a raw WSGI callable (benches/apps/wsgi_app.py)",
    ),
    Scenario(
        name="wsgi-pipelined-16",
        group="wsgi-asgi",
        app="wsgi",
        title="WSGI: GET / pipelined 16 deep",
        path="/",
        expect=PLAIN_HELLO,
        pipeline=16,
        notes="the raw WSGI callable, 16 requests per write",
    ),
    Scenario(
        name="wsgi-generator-1k",
        group="wsgi-asgi",
        app="wsgi",
        title="WSGI: a 1 KiB body from a generator",
        path="/generated",
        expect=Expectation(status=200, body=b"g" * 1024),
        notes="a generator body without Content-Length: streamed (chunked) where the server streams, "
        "collected where it collects",
    ),
    Scenario(
        name="asgi-hello",
        group="wsgi-asgi",
        app="asgi",
        title="ASGI: GET /",
        path="/",
        expect=PLAIN_HELLO,
        notes="a raw ASGI 3 callable (benches/apps/asgi_app.py)",
    ),
    Scenario(
        name="asgi-pipelined-16",
        group="wsgi-asgi",
        app="asgi",
        title="ASGI: GET / pipelined 16 deep",
        path="/",
        expect=PLAIN_HELLO,
        pipeline=16,
        notes="the raw ASGI callable, 16 requests per write",
    ),
    Scenario(
        name="flask-json",
        group="wsgi-asgi",
        app="flask",
        title="Flask: GET /json",
        path="/json",
        expect=JSON_MESSAGE,
        notes="a Flask view returning a dict",
    ),
    Scenario(
        name="fastapi-json",
        group="wsgi-asgi",
        app="fastapi",
        title="FastAPI: GET /json",
        path="/json",
        expect=JSON_MESSAGE,
        notes="a FastAPI async endpoint returning a dict",
    ),
]

CONCURRENCY_EXAMPLES = (
    "blocking-loop",
    "fork-per-request",
    "thread-per-request",
    "prefork",
    "threadpool-main-accept",
    "threadpool-worker-accept",
    "busy-loop",
    "select-loop",
    "epoll-loop",
)

CONCURRENCY_GROUP: list[Scenario] = [
    Scenario(
        name="root",
        group="concurrency-models",
        app="root",
        title="GET / (wrk -t2 -c10)",
        path="/",
        expect=PLAIN_HELLO,
        # The LearnServer seed's method (shared/seeds/001): `wrk -t2 -c10 -d10s`.
        threads=2,
        connections=10,
        servers=("rush", *CONCURRENCY_EXAMPLES),
        notes="the examples/concurrency/ servers beside rush",
    ),
]

RUST_SERVERS = ("rush", "actix-web", "hyper")
# The seed's pipelined runs (shared/seeds/002) send 128 requests per write.
RUST_PIPELINE = 128

RUST_GROUP: list[Scenario] = [
    Scenario(
        name=f"{workers}-worker{'s' if workers > 1 else ''}{'-pipelined' if pipeline > 1 else ''}",
        group="rust-frameworks",
        app="root",
        title=f"{workers} worker{'s' if workers > 1 else ''}{f', pipelined {pipeline} deep' if pipeline > 1 else ''}",
        path="/",
        expect=PLAIN_HELLO,
        workers=workers,
        pipeline=pipeline,
        servers=RUST_SERVERS,
        notes="hello world" + (" on the server's and wrk's cores together" if workers > 1 else ""),
    )
    for workers in (1, 2)
    for pipeline in (1, RUST_PIPELINE)
]

# Seed 004 (shared/seeds/004): the package catalog, examples/catalog/. Warm: each front end's cache
# on, 100 connections over the spread of keys; cold: caches off, 10 connections (each answer costs
# database queries and tens of kB of JSON; 100 connections would only queue behind one worker).
CATALOG_SERVERS = ("rush", "rush-flask", "gunicorn", "uvicorn", "rush-baseline")
CATALOG_JSON = Expectation(status=200, json_shape="catalog", headers=(("content-type", "application/json"),))


def catalog_scenario(state: str, database: str, close: bool) -> Scenario:
    return Scenario(
        name=f"{state}-{database}{'-close' if close else ''}",
        group="catalog",
        app=f"catalog-{state}-{database}",
        title=f"{state}, {database}{', Connection: close' if close else ''}",
        path=catalog.SPREAD[0],
        expect=CATALOG_JSON,
        headers=(("Connection", "close"),) if close else (),
        expect_close=close,
        connections=100 if state == "warm" else 10,
        script="catalog.lua",
        script_args=(str(catalog.PATHS_FILE),),
        spread="catalog",
        servers=CATALOG_SERVERS,
        notes=f"{len(catalog.SPREAD)} distinct keys; "
        + ("caches on (each server's own)" if state == "warm" else "caches off: every request queries"),
    )


CATALOG_GROUP: list[Scenario] = (
    [
        catalog_scenario(state, database, close)
        for state in ("warm", "cold")
        for database in catalog.DATABASES
        for close in (False, True)
    ]
    + [
        # The shared level (issue 21): two workers behind one Redis, each with its own cache in front
        # (rush: Cache(shared=...); gunicorn: Flask-Caching's RedisCache, where every hit is a Redis
        # round trip). Redis runs on the load generator's core, like the databases.
        Scenario(
            name="shared-sqlite",
            group="catalog",
            app=f"{catalog.SHARED_PREFIX}sqlite",
            title="warm, sqlite, 2 workers sharing a Redis level",
            path=catalog.SPREAD[0],
            expect=CATALOG_JSON,
            connections=100,
            script="catalog.lua",
            script_args=(str(catalog.PATHS_FILE),),
            spread="catalog",
            servers=("rush", "gunicorn"),
            notes=f"{len(catalog.SPREAD)} distinct keys; two workers, each front end's cache backed by one Redis",
        )
    ]
    + [
        Scenario(
            name=f"ceiling{'-close' if close else ''}",
            group="catalog",
            app="static",
            title=f"the mean answer as a static file{', Connection: close' if close else ''}",
            path=catalog.CEILING_PATH,
            expect=Expectation(status=200, json_shape="catalog"),
            headers=(("Connection", "close"),) if close else (),
            expect_close=close,
            servers=("rush", "nginx"),
            notes="the same bytes from a file (mean answer size): the ceiling for the warm rows",
        )
        for close in (False, True)
    ]
)

# Forward proxies (`benches.proxies`): wrk sends absolute-form requests through the proxy
# (benches/lua/proxy.lua) for the seed's small index.html on an nginx origin. The seed
# (shared/seeds/003) ran wrk with 100 connections and one thread, but sent origin-form
# requests a proxy cannot route: every one of its answers was an error. Here every answer
# is checked (a 2xx with the file's bytes) before and after timing, and wrk's error count fails a run.
PROXY_LOAD = {"group": "proxy", "app": "proxy", "origin_app": "rush-v2", "threads": 1, "connections": 100}
PROXIED_INDEX = Expectation(status=200, body_sha256=sha256(INDEX_HTML), headers=(("content-type", "text/html"),))

PROXY_GROUP: list[Scenario] = [
    Scenario(
        name="absolute-get",
        title="GET http://origin/ keep-alive",
        path="http://{origin}/",
        expect=PROXIED_INDEX,
        notes="absolute-form GETs over 100 keep-alive client connections; nginx origin on wrk's core",
        **PROXY_LOAD,
    ),
    Scenario(
        name="absolute-get-close",
        title="GET http://origin/ Connection: close",
        path="http://{origin}/",
        headers=(("Connection", "close"),),
        expect=PROXIED_INDEX,
        expect_close=True,
        notes="a new client connection per request (the proxy may keep its origin connections)",
        **PROXY_LOAD,
    ),
    Scenario(
        name="connect-keep-alive",
        title="CONNECT, then GET / again and again in each tunnel",
        path="http://{origin}/",
        expect=PROXIED_INDEX,
        load="tunnel",
        notes="100 tunnels held open, plain HTTP inside; the load generator is Python (benches/tunnel_load.py)",
        **PROXY_LOAD,
    ),
    Scenario(
        name="connect-per-request",
        title="a new CONNECT tunnel per GET /",
        path="http://{origin}/",
        expect=PROXIED_INDEX,
        load="tunnel",
        wrk_args=("--tunnel-per-request",),
        notes="tunnel set-up and tear-down per request, 100 at a time; Python load generator",
        **PROXY_LOAD,
    ),
]

# Group name -> its scenarios, in the order they run and appear in tables.
TLS_NOTES = "TLS 1.3, one ECDSA P-256 certificate for all (benches/tls.py)"

TLS_GROUP: list[Scenario] = [
    Scenario(
        name="hello-keep-alive",
        group="tls",
        title="HTTPS GET / keep-alive",
        path="/",
        app="tls-hello",
        tls=True,
        expect=PLAIN_HELLO,
        notes=f"plaintext over 100 keep-alive TLS connections; {TLS_NOTES}",
    ),
    Scenario(
        name="handshake-per-request",
        group="tls",
        title="HTTPS GET / Connection: close",
        path="/",
        app="tls-hello",
        tls=True,
        headers=(("Connection", "close"),),
        expect=PLAIN_HELLO,
        expect_close=True,
        notes=f"a new TCP connection and TLS handshake per request (as wrk makes them); {TLS_NOTES}",
    ),
    Scenario(
        name="static-4k",
        group="tls",
        title="HTTPS GET a 4 KiB file",
        path=f"/static/{SMALL_FILE}",
        app="tls-static",
        tls=True,
        expect=Expectation(body_sha256=sha256(text_of_size(SMALL_SIZE)), headers=(("content-type", "text/plain"),)),
        notes=f"a 4 KiB static file over keep-alive TLS; {TLS_NOTES}",
    ),
    Scenario(
        name="static-1m",
        group="tls",
        title="HTTPS GET a 1 MiB file",
        path=f"/static/{LARGE_FILE}",
        app="tls-static",
        tls=True,
        connections=16,
        expect=Expectation(body_sha256=sha256(text_of_size(LARGE_SIZE)), headers=(("content-type", "text/plain"),)),
        notes=f"a 1 MiB static file over 16 keep-alive TLS connections; {TLS_NOTES}",
    ),
]

# WebSocket (benches/README.md, "websocket"): ws-load (benches/rust) sends binary messages and
# checks every answer byte for byte; one app per interface (benches/apps/ws_*.py) with /echo and
# /broadcast. The idle scenarios measure memory, not speed: 1,000 connections held open by
# benches/wsclient.py, the RSS they add divided by 1,000.
WEBSOCKET_LOAD = {"group": "websocket", "app": "ws", "load": "websocket"}
WEBSOCKET_DEFLATE_SERVERS = (
    "rush",
    "rush-asgi",
    "rush-starlette",
    "uvicorn",
    "uvicorn-wsproto",
    "uvicorn-starlette",
    "socketify",
)
KIB = 1024

WEBSOCKET_GROUP: list[Scenario] = [
    Scenario(
        name="echo-20B",
        title="echo, 20-byte messages",
        path="/echo",
        expect=Expectation(status=101),
        connections=100,
        message_size=20,
        notes="100 connections, each sending a binary message and waiting for its echo",
        **WEBSOCKET_LOAD,
    ),
    Scenario(
        name="echo-16KiB",
        title="echo, 16 KiB messages",
        path="/echo",
        expect=Expectation(status=101),
        connections=100,
        message_size=16 * KIB,
        notes="100 connections, each sending a 16 KiB binary message and waiting for its echo",
        **WEBSOCKET_LOAD,
    ),
    Scenario(
        name="broadcast-16",
        title="broadcast to 16 members, 20 bytes",
        path="/broadcast",
        expect=Expectation(status=101),
        connections=16,
        message_size=20,
        notes="one of 16 members sends, every member (the sender too) receives; counted per delivery",
        **WEBSOCKET_LOAD,
    ),
    Scenario(
        name="broadcast-1000",
        title="broadcast to 1,000 members, 20 bytes",
        path="/broadcast",
        expect=Expectation(status=101),
        connections=1000,
        message_size=20,
        notes="one of 1,000 members sends, every member receives; counted per delivery",
        **WEBSOCKET_LOAD,
    ),
] + [
    Scenario(
        name=f"idle-1000{'-deflate' if deflate else ''}",
        group="websocket",
        app="ws",
        load="ws-idle",
        title=f"RSS per idle connection{', permessage-deflate' if deflate else ''}",
        path="/echo",
        expect=Expectation(status=101),
        connections=1000,
        message_size=20,
        deflate=deflate,
        # granian has no permessage-deflate: it declines the offer, so it has no deflate row.
        servers=WEBSOCKET_DEFLATE_SERVERS if deflate else None,
        notes="1,000 connections, each after one 20-byte echo"
        + (", permessage-deflate offered (and required)" if deflate else ", no extension offered"),
    )
    for deflate in (False, True)
]

# HTTP/2 (issue 24): h2load over h2c with prior knowledge (benches/h2load.py), answers checked
# with a real h2 client first (benches/httpcheck.py). The apps are the hello and static endpoints;
# "h2-*" apps start each peer in its HTTP/2 set-up (granian --http 2, nginx listen ... http2,
# hypercorn as it is); rush serves HTTP/1.1 and h2c on one port, so its h2 commands are its usual
# ones. Each hello and the 1 MiB download also run over HTTP/1.1 with the same h2load (--h1),
# for rush's own ratios (CPU per request, throughput) between the protocols.
H2_STREAMS = {"connections": 100, "streams": 10}
STATIC_4K = Expectation(body_sha256=sha256(text_of_size(SMALL_SIZE)), headers=(("content-type", "text/plain"),))
STATIC_1M = Expectation(body_sha256=sha256(text_of_size(LARGE_SIZE)), headers=(("content-type", "text/plain"),))


def http2_pair(
    name: str, title: str, path: str, expect: Expectation, h2_app: str, h1_app: str, h1_servers: tuple[str, ...], **load
) -> list[Scenario]:
    """A scenario over h2c and its twin over HTTP/1.1 (the same h2load with --h1, one request in
    flight per connection: -m above 1 would pipeline)."""
    h1_load = {**load, "streams": 1}
    return [
        Scenario(
            name=name, group="http2", title=f"h2c: {title}", path=path, expect=expect, app=h2_app, load="h2load", **load
        ),
        Scenario(
            name=f"{name}-h1",
            group="http2",
            title=f"HTTP/1.1: {title}",
            path=path,
            expect=expect,
            app=h1_app,
            load="h2load-h1",
            servers=h1_servers,
            **h1_load,
        ),
    ]


HTTP2_GROUP: list[Scenario] = [
    *http2_pair(
        "app-hello",
        "GET / (App, RSGI, nginx)",
        "/",
        PLAIN_HELLO,
        "h2-hello",
        "hello",
        ("rush", "granian-rsgi", "nginx"),
        notes="rush's App API, granian's RSGI, nginx's return",
        **H2_STREAMS,
    ),
    *http2_pair(
        "asgi-hello",
        "ASGI: GET /",
        "/",
        PLAIN_HELLO,
        "h2-asgi",
        "asgi",
        ("rush", "granian-asgi"),
        notes="a raw ASGI 3 callable (benches/apps/asgi_app.py)",
        **H2_STREAMS,
    ),
    Scenario(
        name="wsgi-hello",
        group="http2",
        title="h2c: WSGI: GET /",
        path="/",
        expect=PLAIN_HELLO,
        app="h2-wsgi",
        load="h2load",
        notes="a raw WSGI callable (benches/apps/wsgi_app.py)",
        **H2_STREAMS,
    ),
    Scenario(
        name="file-4k",
        group="http2",
        title="h2c: GET a 4 KiB file",
        path=f"/static/{SMALL_FILE}",
        expect=STATIC_4K,
        app="h2-static",
        load="h2load",
        notes="a 4 KiB text file under a static mount",
        **H2_STREAMS,
    ),
    *http2_pair(
        "file-1m",
        "GET a 1 MiB file, one stream",
        f"/static/{LARGE_FILE}",
        STATIC_1M,
        "h2-static",
        "static",
        ("rush", "granian-rsgi", "nginx"),
        notes="one connection, one request at a time: a large body's throughput",
        connections=1,
        streams=1,
    ),
] + [
    Scenario(
        name=f"idle-1000{suffix}",
        group="http2",
        title=f"RSS per idle h2c connection ({interface})",
        path="/",
        expect=PLAIN_HELLO,
        app=app,
        load="h2-idle",
        connections=1000,
        notes=f"1,000 h2c connections, each idle after one GET / ({interface})",
    )
    for suffix, app, interface in (("", "h2-hello", "App, RSGI, nginx"), ("-asgi", "h2-asgi", "ASGI"))
]

# HTTP/3 (issue 35): h3-load (benches/rust, quinn + h3) against rush --http3 and hypercorn
# --quic-bind, every answer checked by h3-load --check first; rush's own HTTP/2 and HTTP/1.1 over
# TLS (h2load, ALPN) in the same run, on the same endpoints, for its ratios between the protocols
# (CPU per request, a 1 MiB download's throughput). Every scenario speaks TLS with benches/tls.py's
# certificate. The "h3-*" apps serve HTTP/3 on UDP and HTTPS on TCP on one port number; the
# "tls-*" apps are rush's usual TLS set-up (ALPN h2, then http/1.1), without --http3.
H3_STREAMS = {"connections": 100, "streams": 10}
# Who the HTTP/3 rows and the HTTP/2 twins run on: rush, and where it serves the app hypercorn (its
# --quic-bind command serves HTTPS on TCP too), for each server's own ratios between the protocols.
# The HTTP/1.1 twins run on rush alone: h2load 1.52 reads hypercorn's status line, which has no
# reason phrase ("HTTP/1.1 200 "), as status 0, and would refuse every answer.
HTTP3_SERVERS = ("rush", "hypercorn-h3")
# The rows rush alone runs, by design: no other server here speaks HTTP/3 with an App API or
# static files, and the HTTP/1.1 twins above. They give rush's own ratios between protocols.
RUSH_ALONE = ("rush",)


def http3_triple(
    name: str,
    title: str,
    path: str,
    expect: Expectation,
    apps: tuple[str, str],
    servers: tuple[str, ...] = HTTP3_SERVERS,
    **load,
) -> list[Scenario]:
    """A scenario over HTTP/3 and its twins over HTTP/2 and HTTP/1.1 on TLS (h2load; HTTP/1.1
    with one request in flight per connection: -m above 1 would pipeline). ``apps``: the HTTP/3
    app and the TLS one; ``servers``: who runs the HTTP/3 row and its HTTP/2 twin."""
    h3_app, tls_app = apps
    common = {"group": "http3", "path": path, "expect": expect, "tls": True}
    h2_title, h1_title = f"HTTP/2 over TLS: {title}", f"HTTP/1.1 over TLS: {title}"
    h1_load = {**load, "streams": 1}
    return [
        Scenario(name=name, title=f"HTTP/3: {title}", app=h3_app, load="h3-load", servers=servers, **common, **load),
        Scenario(name=f"{name}-h2", title=h2_title, app=tls_app, load="h2load-tls", servers=servers, **common, **load),
        Scenario(
            name=f"{name}-h1",
            title=h1_title,
            app=tls_app,
            load="h2load-tls-h1",
            servers=RUSH_ALONE,
            **common,
            **h1_load,
        ),
    ]


HTTP3_GROUP: list[Scenario] = [
    *http3_triple(
        "asgi-hello",
        "ASGI: GET /",
        "/",
        PLAIN_HELLO,
        ("h3-asgi", "tls-asgi"),
        notes="a raw ASGI 3 callable (benches/apps/asgi_app.py), 100 connections x 10 streams",
        **H3_STREAMS,
    ),
    *http3_triple(
        "app-hello",
        "App: GET /",
        "/",
        PLAIN_HELLO,
        ("h3-hello", "tls-hello"),
        RUSH_ALONE,
        notes="rush's App API (benches/apps/rush_app.py), 100 connections x 10 streams",
        **H3_STREAMS,
    ),
    *http3_triple(
        "file-1m",
        "GET a 1 MiB file, one stream",
        f"/static/{LARGE_FILE}",
        replace(STATIC_1M, body_length=LARGE_SIZE),
        ("h3-static", "tls-static"),
        RUSH_ALONE,
        notes="one connection, one request at a time: a large body's throughput",
        connections=1,
        streams=1,
    ),
    Scenario(
        name="handshakes",
        group="http3",
        title="HTTP/3: a new connection per GET / (latency: a normal client's)",
        path="/",
        expect=PLAIN_HELLO,
        app="h3-asgi",
        load="h3-handshakes",
        tls=True,
        connections=16,
        notes="16 at a time, each a QUIC handshake, one GET and CONNECTION_CLOSE; beside them a normal client "
        "opens a connection for one GET every 20 ms, and its latency is the row's",
    ),
    Scenario(
        name="handshakes-1000",
        group="http3",
        title="HTTP/3: 1,000 new connections a second (latency: a normal client's)",
        path="/",
        expect=PLAIN_HELLO,
        app="h3-asgi",
        load="h3-handshakes",
        tls=True,
        connections=64,
        wrk_args=("--rate", "1000"),
        notes="an open loop starting 1,000 connections a second (at most 64 at once; a start that finds 64 busy "
        "is counted late, not queued), and the normal client beside it",
    ),
    Scenario(
        name="idle-1000",
        group="http3",
        title="RSS per idle HTTP/3 connection (ASGI)",
        path="/",
        expect=PLAIN_HELLO,
        app="h3-asgi",
        load="h3-idle",
        tls=True,
        connections=1000,
        notes="1,000 HTTP/3 connections, each idle after one GET /",
    ),
]

GROUPS: dict[str, list[Scenario]] = {
    "hello": HELLO_GROUP,
    "rush-v2": RUSH_V2_GROUP,
    "static": STATIC_GROUP,
    "wsgi-asgi": WSGI_ASGI_GROUP,
    "starlette-file": STARLETTE_FILE_GROUP,
    "concurrency-models": CONCURRENCY_GROUP,
    "rust-frameworks": RUST_GROUP,
    "catalog": CATALOG_GROUP,
    "proxy": PROXY_GROUP,
    "tls": TLS_GROUP,
    "websocket": WEBSOCKET_GROUP,
    "http2": HTTP2_GROUP,
    "http3": HTTP3_GROUP,
}

# Groups left out of the headline: their other servers are teaching examples, not peers one would pick.
HEADLINE_EXCLUDED_GROUPS: tuple[str, ...] = ("concurrency-models",)


def all_scenarios() -> list[Scenario]:
    return [scenario for scenarios in GROUPS.values() for scenario in scenarios]


def select_scenarios(selectors: list[str] | None) -> list[Scenario]:
    """Scenarios named by ``selectors``: a group (``hello``), a scenario key
    (``hello/json``) or a bare scenario name (``json``; a name used by several
    groups, like ``redirect``, selects it in each).

    Unknown selectors raise ValueError listing what exists, so a typo is never
    a silently empty run. Order follows the registry, duplicates are dropped.
    """
    if not selectors:
        return all_scenarios()
    chosen: set[str] = set()
    for selector in selectors:
        matches = [
            scenario for scenario in all_scenarios() if selector in (scenario.group, scenario.key, scenario.name)
        ]
        if not matches:
            known = ", ".join(list(GROUPS) + [scenario.key for scenario in all_scenarios()])
            raise ValueError(f"unknown scenario or group {selector!r}; known: {known}")
        chosen.update(scenario.key for scenario in matches)
    return [scenario for scenario in all_scenarios() if scenario.key in chosen]
