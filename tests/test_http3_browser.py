"""A real browser over HTTP/3 (issue 35): headless Chromium loads a page and
its subresources from rush ``--http3``, and rush's access log shows every
request over HTTP/3.

``--origin-to-force-quic-on`` makes Chromium speak QUIC to the origin at once,
without waiting for an ``Alt-Svc`` from a TCP answer first (and without
falling back to TCP). Chromium's QUIC ignores ``--ignore-certificate-errors``
(tried: the page fails with ``net::ERR_QUIC_PROTOCOL_ERROR``), so the test
CA's leaf is trusted by the SHA-256 hash of its public key instead
(``--ignore-certificate-errors-spki-list``).

The page has stylesheets, scripts and images (rush's ``--static``), and a
script that POSTs to the app (tests/apps/basic.py's ``/echo``, a rush App
handler) with a synchronous XMLHttpRequest, so the dumped DOM shows what the
app saw: the request body and the HTTP version. Skipped when chromium is
missing (about 300 MB: ``make test-browser`` installs it and runs this test).
"""

from __future__ import annotations

import base64
import hashlib
import re
import subprocess
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from support import ServerFactory, headless_chromium, write_localhost_pki

# A 1x1 PNG.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d4944415478da6364f8cf500f00038601805a347d6b0000000049454e44ae426082"
)
COUNT = 3
ASSETS = [f"s{index}.css" for index in range(COUNT)] + [f"j{index}.js" for index in range(COUNT)]
ASSETS += [f"i{index}.png" for index in range(COUNT)]

# Runs after the other scripts: asks the app, and writes what it answered into the page.
ECHO_SCRIPT = """
var request = new XMLHttpRequest();
request.open("POST", "/echo", false);
request.send("sent by chromium");
var seen = JSON.parse(request.responseText);
var page = document.getElementById("page");
page.dataset.status = String(request.status);
page.dataset.body = seen.body;
page.dataset.version = seen.http_version;
"""


def write_page(site: Path) -> None:
    for index in range(COUNT):
        (site / f"s{index}.css").write_text(f".c{index} {{ color: #{index}{index}{index}; }}\n")
        (site / f"j{index}.js").write_text(f'document.getElementById("page").dataset.ran{index} = "yes";\n')
        (site / f"i{index}.png").write_bytes(PIXEL)
    styles = "".join(f'<link rel="stylesheet" href="s{index}.css">' for index in range(COUNT))
    scripts = "".join(f'<script src="j{index}.js"></script><img src="i{index}.png">' for index in range(COUNT))
    (site / "index.html").write_text(
        f"<!doctype html><html><head>{styles}</head>"
        f'<body><p id="page">page</p>{scripts}<script>{ECHO_SCRIPT}</script></body></html>'
    )


def spki_hash(chain: Path) -> str:
    """base64 of the SHA-256 of the leaf certificate's SubjectPublicKeyInfo (the first of the chain)."""
    leaf = x509.load_pem_x509_certificate(chain.read_bytes())
    der = leaf.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def test_chromium_loads_a_page_over_http3(rush_server: ServerFactory, tmp_path: Path) -> None:
    command = headless_chromium(tmp_path / "profile", "--dump-dom")
    site = tmp_path / "site"
    site.mkdir()
    write_page(site)
    pki = write_localhost_pki(tmp_path)
    server = rush_server(
        "basic",
        "--static",
        f"/site={site}",
        "--http3",
        "--ssl-certfile",
        pki["chain"],
        "--ssl-keyfile",
        pki["key"],
        "--access-log",
    )
    origin = f"127.0.0.1:{server.port}"
    done = subprocess.run(
        [
            *command,
            f"--origin-to-force-quic-on={origin}",
            f"--ignore-certificate-errors-spki-list={spki_hash(pki['chain'])}",
            f"https://{origin}/site/index.html",
        ],
        capture_output=True,
        timeout=120,
    )
    dom = done.stdout.decode()
    # Chromium's complaints about the missing D-Bus say nothing about the page.
    complaints = "\n".join(line for line in done.stderr.decode().splitlines() if "dbus" not in line)
    assert done.returncode == 0, complaints[-3000:]
    page = re.search(r'<p id="page"([^>]*)>page</p>', dom)
    assert page, f"{dom[-3000:]}\n{complaints[-3000:]}"
    attributes = dict(re.findall(r'data-([a-z0-9]+)="([^"]*)"', page.group(1)))
    # Every script was fetched and ran, and the app answered the POST, with its body, over HTTP/3.
    assert attributes == {
        **{f"ran{index}": "yes" for index in range(COUNT)},
        "status": "200",
        "body": "sent by chromium",
        "version": "3",
    }
    expected = [("GET", "/site/index.html")] + [("GET", f"/site/{name}") for name in ASSETS] + [("POST", "/echo")]
    pattern = r'127\.0\.0\.1:(\d+) - "(GET|POST) (/site/\S+|/echo) (HTTP/[0-9.]+)" (\d+)'
    logged = server.wait_for_log(pattern, count=len(expected), stream="stdout")
    assert sorted((match.group(2), match.group(3)) for match in logged) == sorted(expected)
    assert {(match.group(4), match.group(5)) for match in logged} == {("HTTP/3", "200")}
    # One QUIC connection carried them all (one client port).
    assert len({match.group(1) for match in logged}) == 1
    # Nothing from the browser reached rush over TCP: every request it logged (a favicon, say) is
    # HTTP/3, but for the start-up probe of tests/support.py.
    lines = re.findall(r'"[A-Z]+ (\S+) (HTTP/[0-9.]+)" ', server.stdout_text())
    assert {version for path, version in lines if path != "/__readiness_probe__"} == {"HTTP/3"}, lines
