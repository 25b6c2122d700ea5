"""``gpu-costsvc opencost-proxy``: OpenCost's own clients against gpu-costsvc's ``/allocation``.

The OpenCost UI and kubectl-cost send no ``Authorization`` header (opencost-ui
``app/services/allocation.ts``; kubectl-cost ``pkg/query/allocation.go``), and gpu-costsvc
answers no money without a token. This proxy holds one token (read from ``--token-file`` at each
request: a rotated Kubernetes Secret is used at once) and adds it to the requests it
forwards to ``--upstream``. It forwards only OpenCost's paths gpu-costsvc serves, ``GET`` and
``HEAD``: ``/allocation``, ``/allocation/compute``, ``/allocation/autocomplete`` (the UI's
filter suggestions), ``/getConfigs``, ``/assets`` and ``/assets/autocomplete``, also under
``/model`` (the UI's
``BASE_URL``, kubectl-cost's default ``--allocation-path /model/allocation``); ``/healthz``
answers itself; any other path is a 404 and any other method a 405 — it lends the token's
right to read allocations, nothing else. Each request is logged (method, path, status, the
caller's address; never the token).

Whoever reaches the proxy reads what its token may read, so: give it a team token (a team's
view) or a finance token (everyone's), listen on loopback (the default: ``kubectl
port-forward``, or a sidecar next to the UI's nginx) or behind a NetworkPolicy. kubectl-cost
reaches a Service only through the Kubernetes API (port-forward or ``services/proxy``), so
Kubernetes RBAC decides who may use it (docs/api.md).
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from costsvc.auth.tokens import PREFIX

log = logging.getLogger("gpu-costsvc.opencost-proxy")
# the allocations, the UI's filter suggestions, kubectl-cost's currency (/model/getConfigs),
# the Infra Assets page and its report's suggestions
PATHS = (
    "/allocation",
    "/allocation/compute",
    "/allocation/autocomplete",
    "/getConfigs",
    "/assets",
    "/assets/autocomplete",
)
BASE = "/model"  # the UI's BASE_URL, and kubectl-cost's default path, live under it
TOKEN = re.compile(rf"^{re.escape(PREFIX)}[A-Za-z0-9_-]{{20,200}}$")
PASSED_HEADERS = ("content-type", "x-content-type-options", "www-authenticate")
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]{1,253})(:\d{1,5})?")


class ProxyError(ValueError):
    """A bad flag or token file: the proxy does not start (the message names which)."""


@dataclass
class TokenFile:
    """The token in a file, read at each request (a few bytes: a rotated Secret is used at
    once; while it is being swapped, the last good token)."""

    path: Path
    _token: str = field(default="", init=False)

    def value(self) -> str:
        try:
            token = self.path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError as exc:
            if self._token and isinstance(exc, FileNotFoundError):
                return self._token
            raise ProxyError(f"--token-file: {exc.strerror}: {self.path}") from None
        if not TOKEN.fullmatch(token):
            raise ProxyError(f"--token-file: {self.path} holds no gpu-costsvc token ({PREFIX}…)")
        self._token = token
        return token


LOOPBACK = ("127.0.0.1", "localhost", "::1")
ANY = ("0.0.0.0", "::", "")


def own_hosts(host: str, port: int, allowed: list[str]) -> frozenset[str]:
    """The ``Host`` headers the proxy answers (lower case, with the port): its listen
    address's; the loopback names when it listens on loopback or on every address; and each
    ``--allowed-host`` (a name alone: on the listen port). Any other is a DNS-rebinding
    page's request and is refused."""
    names = {host} | (set(LOOPBACK) if host in LOOPBACK or host in ANY else set())
    found = {f"[{n}]:{port}" if ":" in n else f"{n}:{port}" for n in names if n not in ANY}
    for given in allowed:
        name = given.strip().lower()
        found.add(f"{name}:{port}" if name.endswith("]") or ":" not in name else name)
    return frozenset(found)


def build_app(
    upstream: str, token: TokenFile, hosts: frozenset[str], timeout: float = 120.0
) -> Starlette:
    client = httpx.AsyncClient(base_url=upstream, timeout=timeout)

    async def forward(request: Request) -> Response:
        path = request.url.path
        who = request.client.host if request.client else "-"
        if path == "/healthz":  # no data: a kubelet's probe comes by the pod's address
            return PlainTextResponse("ok\n")
        if request.headers.get("host", "").lower() not in hosts:
            host = request.headers.get("host", "")[:100]
            log.warning("%s %s %s -> 403 (Host %r)", who, request.method, path, host)
            return PlainTextResponse(
                "this proxy answers only its own host names (--allowed-host adds one)\n", 403
            )
        target = path.removeprefix(BASE) if path.startswith(BASE + "/") else path
        if request.method not in ("GET", "HEAD"):
            log.info("%s %s %s -> 405", who, request.method, path)
            return PlainTextResponse("method not allowed\n", 405, headers={"Allow": "GET, HEAD"})
        if target not in PATHS:
            log.info("%s %s %s -> 404", who, request.method, path)
            return PlainTextResponse("not found: this proxy serves OpenCost's API only\n", 404)
        try:
            bearer = token.value()
        except ProxyError as exc:
            log.error("%s", exc)
            return PlainTextResponse("the proxy's token file cannot be read\n", 503)
        url = httpx.URL(path=target, query=request.url.query.encode())
        headers = {"Authorization": f"Bearer {bearer}", "Accept-Encoding": "identity"}
        try:
            answer = await client.request(request.method, url, headers=headers)
        except httpx.HTTPError as exc:
            log.warning("%s %s %s -> 502 (%s)", who, request.method, path, type(exc).__name__)
            return PlainTextResponse("gpu-costsvc did not answer\n", 502)
        log.info("%s %s %s -> %d", who, request.method, path, answer.status_code)
        passed = {k: v for k, v in answer.headers.items() if k.lower() in PASSED_HEADERS}
        return Response(answer.content, answer.status_code, headers=passed)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await client.aclose()

    routes = [Route("/{path:path}", forward, methods=METHODS)]
    return Starlette(routes=routes, lifespan=lifespan)


def add_parser(sub: Any) -> None:
    """The ``opencost-proxy`` sub-command (costsvc/cli.py registers it)."""
    p = sub.add_parser(
        "opencost-proxy",
        help="serve /allocation to the OpenCost UI and kubectl-cost, adding a token",
    )
    p.add_argument("--token-file", required=True, type=Path, help="a file holding the token")
    p.add_argument("--upstream", default="http://127.0.0.1:8080", help="gpu-costsvc's base URL")
    p.add_argument(
        "--listen-address",
        default="127.0.0.1:9003",
        help="host:port to listen on (default 127.0.0.1:9003, OpenCost's port)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        help="a Host header to answer besides the listen address (and the loopback names "
        "when listening on loopback or every address): the name the UI is reached by, e.g. "
        "opencost.example.com or opencost.example.com:443; repeatable",
    )


def check(args: argparse.Namespace) -> tuple[str, int, str, TokenFile, frozenset[str]]:
    """The flags, checked (raises :class:`ProxyError` naming the bad one)."""
    host, _, port = str(args.listen_address).rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ProxyError(f"--listen-address: {args.listen_address!r}: expected host:port")
    parts = urlsplit(str(args.upstream))
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ProxyError(f"--upstream: {args.upstream!r}: expected http(s)://host:port")
    for given in args.allowed_host:
        if not HOST.fullmatch(given.strip()):
            raise ProxyError(f"--allowed-host: {given!r}: expected a host name, or host:port")
    token = TokenFile(args.token_file)
    token.value()  # read now: a bad file stops the start
    listen = host.strip("[]").lower()
    hosts = own_hosts(listen, int(port), list(args.allowed_host))
    return listen, int(port), str(args.upstream).rstrip("/"), token, hosts


def run(args: argparse.Namespace) -> int:
    import uvicorn

    host, port, upstream, token, hosts = check(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    log.info("forwarding /allocation on %s:%d to %s", host, port, upstream)
    from costsvc.api.server import config
    from costsvc.kit.settings import Settings

    # as `serve` runs the API: the same time-outs on slow or stalled clients
    uvicorn.Server(config(build_app(upstream, token, hosts), Settings(), host, port)).run()
    return 0
