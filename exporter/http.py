"""The HTTP side: /metrics serves the latest rendered exposition, nothing else happens there.

Content negotiation serves the Prometheus text format 0.0.4 to every scraper that accepts it
(Prometheus always does, after OpenMetrics), and OpenMetrics only to one that accepts nothing
else; gzip when the scraper accepts it. Text first, because the DCGM counters keep
dcgm-exporter's names, which lack ``_total``: text 0.0.4 types them ``counter`` under those
names, OpenMetrics cannot (there they are ``unknown``), and Prometheus keeps whichever type it
was served in its metadata (docs/metrics.md). Each form is rendered once per collection by the
collection thread, so a scrape is a dictionary lookup and one write.

With ``--web.config.file`` (exporter/webconfig.py) every connection is TLS and every request
needs the password, as in Prometheus' own exporters; plain HTTP sent to the TLS port is
answered 400 and closed, as Go's servers do.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from exporter import __version__
from exporter.collection import Exporter
from exporter.render.exposition import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, Variant
from exporter.webconfig import WebGate

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 10.0  # seconds a new TLS connection has to say hello and shake hands
_NOT_TLS = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
_TLS_HANDSHAKE = 0x16  # the first byte of a TLS record that opens a handshake

_LANDING = b"""<!doctype html><html><head><title>gpu-exporter</title></head><body>
<h1>gpu-exporter</h1><p><a href="/metrics">Metrics</a> &middot; <a href="/health">Health</a></p>
</body></html>
"""


def _accepted(accept: str) -> set[str]:
    """The media types of an Accept header whose q is not 0 (``type/subtype``, lower case)."""
    found = set()
    for item in accept.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        weight = 1.0
        for param in params:
            name, _, number = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    weight = float(number)
                except ValueError:
                    weight = 1.0
        if media and weight > 0:
            found.add(media.lower())
    return found


def choose_variant(accept: str, accept_encoding: str) -> Variant:
    types = _accepted(accept)
    om = "application/openmetrics-text" in types and not types & {
        "text/plain",
        "text/*",
        "*/*",
    }
    gz = "gzip" in accept_encoding
    if om:
        return "openmetrics+gzip" if gz else "openmetrics"
    return "text+gzip" if gz else "text"


_CONTENT_TYPES: dict[Variant, str] = {
    "text": TEXT_CONTENT_TYPE,
    "text+gzip": TEXT_CONTENT_TYPE,
    "openmetrics": OPENMETRICS_CONTENT_TYPE,
    "openmetrics+gzip": OPENMETRICS_CONTENT_TYPE,
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = f"gpu-exporter/{__version__}"
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        gate = self.server.gate
        if gate is not None:
            if not gate.allow():
                self._reply(429, "text/plain; charset=utf-8", b"Too Many Requests\n")
                return
            if not gate.authorized(self.headers.get("Authorization")):
                self._reply(401, "text/plain; charset=utf-8", b"Unauthorized\n", basic=True)
                return
        if path == "/metrics":
            exporter = self.server.exporter
            variant = choose_variant(
                self.headers.get("Accept", ""), self.headers.get("Accept-Encoding", "")
            )
            exporter.want(variant)
            body = exporter.exposition.body(variant)
            head = (
                f"HTTP/1.1 200 OK\r\nContent-Type: {_CONTENT_TYPES[variant]}\r\n"
                f"Content-Length: {len(body)}\r\n"
                + "".join(f"{k}: {v}\r\n" for k, v in self._configured_headers().items())
                + ("Content-Encoding: gzip\r\n" if variant.endswith("gzip") else "")
                + ("Connection: close\r\n" if self.close_connection else "")
                + "\r\n"
            )
            self.wfile.write(head.encode("ascii") + body)
        elif path == "/":
            self._reply(200, "text/html; charset=utf-8", _LANDING)
        elif path == "/health":
            ok, problems = self.server.exporter.health()
            text = "ok\n" if ok else "stale: no collection in the last three intervals\n"
            text += "".join(f"degraded: {p}\n" for p in problems)
            self._reply(200 if ok else 503, "text/plain; charset=utf-8", text.encode())
        else:
            self._reply(404, "text/plain", b"not found\n")

    def _configured_headers(self) -> dict[str, str]:
        gate = self.server.gate
        return gate.config.headers if gate is not None else {}

    def _reply(self, status: int, content_type: str, body: bytes, basic: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if basic:
            self.send_header("WWW-Authenticate", "Basic")
        for name, value in self._configured_headers().items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A scraper hanging up mid-request is routine, not worth a traceback.
        log.debug("connection from %s ended abruptly", client_address, exc_info=True)

    def __init__(
        self, address: tuple[str, int], exporter: Exporter, family: int, gate: WebGate | None
    ) -> None:
        self.address_family = family
        self.exporter = exporter
        self.gate = gate
        super().__init__(address, _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """In the connection's own thread: TLS first, when configured."""
        tls = self.gate.current().tls if self.gate is not None else None
        if tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(HANDSHAKE_TIMEOUT)
        try:
            first = request.recv(1, socket.MSG_PEEK)
            if first and first[0] != _TLS_HANDSHAKE:
                request.sendall(_NOT_TLS)
                return
            conn = tls.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError) as exc:  # a failed handshake ends this connection only
            log.debug("TLS handshake with %s failed: %s", client_address, exc)
            return
        assert self.gate is not None
        if not self.gate.sans_ok(conn.getpeercert()):
            log.debug("client certificate of %s names no allowed SAN", client_address)
            conn.close()
            return
        conn.settimeout(None)
        try:
            super().finish_request(conn, client_address)
        finally:
            conn.close()


def parse_listen_address(value: str) -> tuple[str, int, int]:
    """``:9400``, ``0.0.0.0:9400``, ``127.0.0.1:0``, ``[::1]:9400`` -> (host, port, family)."""
    host, sep, port_text = value.rpartition(":")
    if not sep:
        raise ValueError(f"{value!r} is not host:port")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"port {port_text!r} in {value!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} in {value!r} is out of range")
    if host.startswith("[") and host.endswith("]"):
        return host[1:-1], port, socket.AF_INET6
    if ":" in host:
        raise ValueError(f"IPv6 address in {value!r} must be in brackets, e.g. [::1]:9400")
    return host or "0.0.0.0", port, socket.AF_INET


class MetricsServer:
    def __init__(self, listen: str, exporter: Exporter, gate: WebGate | None = None) -> None:
        host, port, family = parse_listen_address(listen)
        self._scheme = "https" if gate is not None and gate.config.tls is not None else "http"
        self._server = _Server((host, port), exporter, family, gate)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        shown = host if isinstance(host, str) else host.decode()
        if shown in {"0.0.0.0", "::"}:
            shown = socket.gethostname()
        elif ":" in shown:
            shown = f"[{shown}]"
        return f"{self._scheme}://{shown}:{port}/metrics"

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
