"""A flood of QUIC Initial packets against ``rush --http3`` (issue 35): bounded reflection, a
normal client still served.

A client's address is not validated until its handshake completes, so anyone can send an
Initial packet with somebody else's source address and make the server answer that address.
RFC 9000 section 8 bounds the answer: at most three times the bytes received from an address
until it is validated. Here 100 addresses of 127/8 (each a UDP socket of its own, which is what a
spoofed flood looks like to the server) each send one real client Initial, made by aioquic, and
never answer. The server's certificate carries 300 names, so its first flight (about 10 KB) is
far more than three times an Initial: the limit, not the certificate's size, decides what each
address receives. Past 64 handshakes from unvalidated addresses at once, rush answers new ones
with a stateless Retry instead (a packet of ~100 bytes and no state). Meanwhile a normal client
(aioquic, full handshake) gets its answer.

Every datagram an address received is counted when the test reads its socket; the 3x bound
holds at every moment, so reading after the normal client was served is as good a time as any
(nothing here waits for a duration to pass).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from pathlib import Path

import pytest
from support import GUARD_TIMEOUT, RushServer, ServerFactory, free_port, wait_for

aioquic = pytest.importorskip("aioquic")
from aioquic.asyncio.client import connect  # noqa: E402
from aioquic.asyncio.protocol import QuicConnectionProtocol  # noqa: E402
from aioquic.h3.connection import H3_ALPN, H3Connection  # noqa: E402
from aioquic.h3.events import DataReceived, HeadersReceived  # noqa: E402
from aioquic.quic.configuration import QuicConfiguration  # noqa: E402
from aioquic.quic.connection import QuicConnection  # noqa: E402

FLOOD_ADDRESSES = 100
# rush-h3's H3Settings::retry_above_unvalidated.
RETRY_ABOVE_UNVALIDATED = 64
HELLO_APP = "h3_flood_app"


@pytest.fixture(scope="module")
def big_pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import trustme

    directory = tmp_path_factory.mktemp("h3flood")
    ca = trustme.CA()
    names = ["localhost", "127.0.0.1", *(f"host-{index}.flood.example.test" for index in range(300))]
    leaf = ca.issue_cert(*names)
    paths = {name: directory / f"{name}.pem" for name in ("ca", "chain", "key")}
    ca.cert_pem.write_to_path(paths["ca"])
    leaf.private_key_pem.write_to_path(paths["key"])
    paths["chain"].write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    return paths


class _Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.answers: dict[int, dict] = {}
        self.waiting: dict[int, asyncio.Future] = {}

    def quic_event_received(self, event) -> None:  # type: ignore[no-untyped-def]
        for h3_event in self.h3.handle_event(event):
            answer = self.answers.setdefault(h3_event.stream_id, {"status": None, "body": b""})
            if isinstance(h3_event, HeadersReceived):
                answer["status"] = int(dict(h3_event.headers)[b":status"])
            elif isinstance(h3_event, DataReceived):
                answer["body"] += h3_event.data
            if getattr(h3_event, "stream_ended", False) and h3_event.stream_id in self.waiting:
                self.waiting.pop(h3_event.stream_id).set_result(answer)

    async def get(self, path: str) -> dict:
        stream_id = self._quic.get_next_available_stream_id()
        fields = [
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":authority", b"localhost"),
            (b":path", path.encode()),
        ]
        self.h3.send_headers(stream_id, fields, end_stream=True)
        self.waiting[stream_id] = asyncio.get_running_loop().create_future()
        self.transmit()
        return await asyncio.wait_for(self.waiting[stream_id], GUARD_TIMEOUT)


def normal_get(port: int, ca: Path, path: str) -> dict:
    """One GET over a fresh, fully validated HTTP/3 connection from 127.0.0.1."""

    async def run() -> dict:
        configuration = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name="localhost")
        configuration.load_verify_locations(str(ca))
        async with connect("127.0.0.1", port, configuration=configuration, create_protocol=_Client) as client:
            return await client.get(path)  # type: ignore[attr-defined]

    return asyncio.run(asyncio.wait_for(run(), GUARD_TIMEOUT))


def start(factory: ServerFactory, pki: dict[str, Path]) -> RushServer:
    port = free_port()
    server = factory(
        HELLO_APP,
        "--http3",
        "--bind",
        f"127.0.0.1:{port}",
        "--ssl-certfile",
        str(pki["chain"]),
        "--ssl-keyfile",
        str(pki["key"]),
        bind="none",
        port=port,
        wait=False,
    )

    def answers() -> bool:
        server.assert_running("while starting")
        try:
            return normal_get(port, pki["ca"], "/ready")["status"] == 200
        except (OSError, TimeoutError, ConnectionError, ssl.SSLError):
            return False

    wait_for(answers, f"rush to answer over HTTP/3 on port {port}\n{server.describe()}", interval=0.2)
    return server


def is_retry(datagram: bytes) -> bool:
    """A QUIC v1 long-header packet of type Retry (RFC 9000 section 17.2.5)."""
    return len(datagram) > 5 and datagram[0] & 0xC0 == 0xC0 and datagram[0] & 0x30 == 0x30


def test_an_initial_flood_is_answered_at_most_threefold_and_a_normal_client_is_served(
    rush_server: ServerFactory, big_pki: dict[str, Path]
) -> None:
    server = start(rush_server, big_pki)
    assert server.port is not None
    target = ("127.0.0.1", server.port)
    sockets: dict[str, socket.socket] = {}
    sent: dict[str, int] = {}
    received: dict[str, list[bytes]] = {}
    try:
        for index in range(FLOOD_ADDRESSES):
            address = f"127.0.1.{index + 1}"
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind((address, 0))
            sock.setblocking(False)
            sockets[address] = sock
            configuration = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name="localhost")
            configuration.verify_mode = ssl.CERT_NONE
            initial = QuicConnection(configuration=configuration)
            initial.connect(target, now=time.monotonic())
            sent[address] = 0
            received[address] = []
            for datagram, _ in initial.datagrams_to_send(now=time.monotonic()):
                sock.sendto(datagram, target)
                sent[address] += len(datagram)

        # The flood is in flight (and never answered): a normal client is served meanwhile.
        answer = normal_get(server.port, big_pki["ca"], "/during-the-flood")
        assert (answer["status"], answer["body"]) == (200, b"hello")

        def read_all() -> bool:
            for address, sock in sockets.items():
                while True:
                    try:
                        received[address].append(sock.recv(65536))
                    except BlockingIOError:
                        break
            return all(received.values())

        wait_for(read_all, "every flooding address to get an answer (a handshake or a Retry)")
        read_all()
    finally:
        for sock in sockets.values():
            sock.close()

    retried = [address for address, datagrams in received.items() if any(is_retry(d) for d in datagrams)]
    handshaking = [address for address in received if address not in retried]
    for address, datagrams in received.items():
        total = sum(len(datagram) for datagram in datagrams)
        assert total <= 3 * sent[address], f"{address} sent {sent[address]} bytes and received {total}"
    # Past 64 unvalidated handshakes the newcomers get a Retry; the first ones a handshake.
    assert len(handshaking) >= RETRY_ABOVE_UNVALIDATED - 1, (len(handshaking), len(retried))
    assert len(retried) >= FLOOD_ADDRESSES - RETRY_ABOVE_UNVALIDATED - 1, (len(handshaking), len(retried))
    # The limit binds: a handshaking address received more than twice what it sent (the
    # certificate alone is three times an Initial), so the bound above is what stopped it.
    assert max(sum(map(len, received[address])) for address in handshaking) > 2 * min(sent.values())
    # The server goes on serving.
    assert normal_get(server.port, big_pki["ca"], "/after")["status"] == 200
