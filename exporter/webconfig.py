"""``--web.config.file``: TLS and basic authentication, in the format of the Prometheus
exporter-toolkit that node_exporter reads (prometheus/exporter-toolkit,
docs/web-configuration.md; field names and defaults from its web/tls_config.go)::

    tls_server_config:
      cert_file: server.crt          # or cert: <PEM text>; relative to this file's folder
      key_file: server.key           # or key: <PEM text>
      client_auth_type: RequireAndVerifyClientCert   # default NoClientCert
      client_ca_file: ca.crt         # or client_ca: <PEM text>
      client_allowed_sans: [prometheus.monitoring.svc]
      min_version: TLS12             # default; max_version: TLS13
      cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]   # Go's names, TLS 1.2
      prefer_server_cipher_suites: true
      curve_preferences: [X25519]
    http_server_config:
      headers: {X-Content-Type-Options: nosniff}
    basic_auth_users:
      prometheus: $2b$10$...         # bcrypt hashes
    rate_limit: {interval: 1s, burst: 10}

As there, an unknown field is an error, every path needs the password when users are set,
a wrong one gets 401 with ``WWW-Authenticate: Basic``, and a checked password is cached.
Where Python's ssl module differs from Go's: ``RequestClientCert`` and
``RequireAnyClientCert`` verify a certificate that is sent (Go's accept any), only the first
of ``curve_preferences`` is used, and ``http2`` is accepted but the server speaks HTTP/1.1.
A bad file fails start-up with one line naming the field (:class:`WebConfigError`); a file
changed later is re-read on the next connection, and a bad change is logged and ignored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import re
import ssl
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

log = logging.getLogger(__name__)

_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# Go's crypto/tls ClientAuthType names -> (verify mode, a certificate must be sent)
_CLIENT_AUTH = {
    "NoClientCert": (ssl.CERT_NONE, False),
    "RequestClientCert": (ssl.CERT_OPTIONAL, False),
    "RequireAnyClientCert": (ssl.CERT_REQUIRED, True),
    "RequireClientCert": (ssl.CERT_REQUIRED, True),  # the toolkit's old name
    "VerifyClientCertIfGiven": (ssl.CERT_OPTIONAL, False),
    "RequireAndVerifyClientCert": (ssl.CERT_REQUIRED, True),
}
# tls.CipherSuites() of Go (the secure ones) -> OpenSSL's names; TLS 1.3 suites are fixed,
# in Go as in OpenSSL, so naming them changes nothing.
_CIPHERS = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
}
_CURVES = {
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519": "X25519",
}
# the headers the toolkit lets a file set, and the values it allows (None: any)
_HEADERS: dict[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}
_TLS_FIELDS = {
    "cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type", "client_ca_file",
    "client_allowed_sans", "min_version", "max_version", "cipher_suites",
    "prefer_server_cipher_suites", "curve_preferences",
}  # fmt: skip
_TLS_OPTIONS = {  # fields that tune TLS without turning it on
    "client_allowed_sans", "min_version", "max_version", "cipher_suites",
    "prefer_server_cipher_suites", "curve_preferences",
}  # fmt: skip
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
# bcrypt of "fakepassword": an unknown user costs as much as a known one (the toolkit's hash)
_FAKE_HASH = b"$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi"
_CACHE_SIZE = 100


class WebConfigError(ValueError):
    """A web configuration file that cannot be used; the message names the field."""


@dataclass(frozen=True)
class WebConfig:
    """One reading of the file."""

    tls: ssl.SSLContext | None
    users: dict[str, bytes]
    headers: dict[str, str]
    rate: tuple[float, int] | None  # (seconds between requests, burst)
    allowed_sans: frozenset[str] | None
    watched: tuple[Path, ...]  # the file and the files it names, re-read when they change


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WebConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise WebConfigError(f"{where}: expected a string, got {type(value).__name__}")
    return value


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise WebConfigError(f"{where}: expected a list, got {type(value).__name__}")
    return [_string(v, f"{where}[{i}]") for i, v in enumerate(value)]


def _unknown(section: Mapping[str, Any], known: set[str], where: str) -> None:
    extra = sorted(str(k) for k in section if k not in known)
    if extra:
        prefix = f"{where}." if where else ""
        raise WebConfigError(
            f"{prefix}{extra[0]}: unknown field (known: {', '.join(sorted(known))})"
        )


def _one_of(value: Any, choices: Mapping[str, Any], where: str) -> str:
    text = _string(value, where)
    if text not in choices:
        raise WebConfigError(f"{where}: {text!r} is not one of {', '.join(choices)}")
    return text


def go_duration(text: str, where: str) -> float:
    """Go's time.ParseDuration for the durations a config file holds: ``1s``, ``1m30s``."""
    if text == "0":
        return 0.0
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise WebConfigError(f"{where}: {text!r} is not a duration like 1s, 500ms or 1m30s")
    return sum(float(n) * _GO_UNITS[u] for n, u in parts)


_Pem = tuple[Path | None, str | None]  # a file, or inline PEM text


def _pem_file(
    section: Mapping[str, Any], inline: str, path_key: str, base: Path, need: bool
) -> _Pem:
    """(file, inline PEM) of a cert/key/CA that may be given either way, never both."""
    where = f"tls_server_config.{path_key}"
    if section.get(inline) and section.get(path_key):
        raise WebConfigError(f"{where}: give {path_key} or {inline}, not both")
    if section.get(path_key):
        path = base / _string(section[path_key], where)
        if not path.is_file():
            raise WebConfigError(f"{where}: {path}: no such file")
        return path, None
    if section.get(inline):
        return None, _string(section[inline], f"tls_server_config.{inline}")
    if need:
        raise WebConfigError(f"tls_server_config: missing one of {inline} or {path_key}")
    return None, None


def _load_chain(ctx: ssl.SSLContext, cert: _Pem, key: _Pem) -> None:
    """The server's certificate and key, from files or inline PEM (written for OpenSSL to a
    private temporary folder, removed at once)."""
    with tempfile.TemporaryDirectory(prefix="gpu-exporter-tls-") as tmp:
        paths = []
        for (given, text), name in ((cert, "cert.pem"), (key, "key.pem")):
            written = Path(tmp) / name
            if given is None:
                fd = os.open(written, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(text or "")
            paths.append(given or written)
        try:
            ctx.load_cert_chain(paths[0], paths[1])
        except (ssl.SSLError, OSError) as exc:
            raise WebConfigError(
                f"tls_server_config: cannot load the certificate and key: {exc}"
            ) from None


_Tls = tuple[ssl.SSLContext | None, list[Path], frozenset[str] | None]


def _tls(section: dict[str, Any], base: Path) -> _Tls:
    _unknown(section, _TLS_FIELDS, "tls_server_config")
    if not any(section.get(k) for k in _TLS_FIELDS - _TLS_OPTIONS):
        if section:
            raise WebConfigError("tls_server_config: missing one of cert or cert_file")
        return None, [], None
    cert = _pem_file(section, "cert", "cert_file", base, need=True)
    key = _pem_file(section, "key", "key_file", base, need=True)
    ca = _pem_file(section, "client_ca", "client_ca_file", base, need=False)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    low = _one_of(
        section.get("min_version", "TLS12"), _TLS_VERSIONS, "tls_server_config.min_version"
    )
    high = _one_of(
        section.get("max_version", "TLS13"), _TLS_VERSIONS, "tls_server_config.max_version"
    )
    if _TLS_VERSIONS[low] > _TLS_VERSIONS[high]:
        raise WebConfigError(f"tls_server_config.min_version: {low} is above max_version {high}")
    ctx.minimum_version, ctx.maximum_version = _TLS_VERSIONS[low], _TLS_VERSIONS[high]
    _load_chain(ctx, cert, key)
    auth = _one_of(
        section.get("client_auth_type") or "NoClientCert",
        _CLIENT_AUTH,
        "tls_server_config.client_auth_type",
    )
    mode, required = _CLIENT_AUTH[auth]
    if ca != (None, None) and mode == ssl.CERT_NONE:
        raise WebConfigError(
            "tls_server_config.client_auth_type: a client CA is set without a client auth "
            "policy (RequireAndVerifyClientCert authenticates clients)"
        )
    if mode != ssl.CERT_NONE:
        try:
            if ca[0] is not None:
                ctx.load_verify_locations(cafile=ca[0])
            elif ca[1] is not None:
                ctx.load_verify_locations(cadata=ca[1])
            else:  # as Go: the system's roots
                ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise WebConfigError(f"tls_server_config.client_ca_file: {exc}") from None
    ctx.verify_mode = mode
    sans = _strings(section.get("client_allowed_sans"), "tls_server_config.client_allowed_sans")
    if sans and not required:
        raise WebConfigError(
            "tls_server_config.client_allowed_sans: needs client_auth_type "
            "RequireAnyClientCert or RequireAndVerifyClientCert (a client must send a "
            "certificate for its names to be checked)"
        )
    suites = _strings(section.get("cipher_suites"), "tls_server_config.cipher_suites")
    for i, name in enumerate(suites):
        _one_of(name, _CIPHERS, f"tls_server_config.cipher_suites[{i}]")
    tls12 = [_CIPHERS[n] for n in suites if _CIPHERS[n]]
    if tls12:
        ctx.set_ciphers(":".join(c for c in tls12 if c))
    prefer = section.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        raise WebConfigError(
            "tls_server_config.prefer_server_cipher_suites: expected true or false"
        )
    if prefer:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    curves = _strings(section.get("curve_preferences"), "tls_server_config.curve_preferences")
    for i, name in enumerate(curves):
        _one_of(name, _CURVES, f"tls_server_config.curve_preferences[{i}]")
    if curves:
        ctx.set_ecdh_curve(_CURVES[curves[0]])
    watched = [p for p in (cert[0], key[0], ca[0]) if p is not None]
    return ctx, watched, frozenset(sans) if sans else None


def _users(section: dict[str, Any]) -> dict[str, bytes]:
    users = {}
    for name, hashed in section.items():
        where = f"basic_auth_users.{name}"
        text = _string(hashed, where).encode()
        try:
            bcrypt.checkpw(b"", text)
        except ValueError:
            raise WebConfigError(
                f"{where}: not a bcrypt hash (htpasswd -nBC 10 \"\" | tr -d ':\\n')"
            ) from None
        users[str(name)] = text
    return users


def _http(section: dict[str, Any]) -> dict[str, str]:
    _unknown(section, {"http2", "headers"}, "http_server_config")
    if not isinstance(section.get("http2", True), bool):
        raise WebConfigError("http_server_config.http2: expected true or false")
    headers = {}
    for name, value in _mapping(section.get("headers"), "http_server_config.headers").items():
        where = f"http_server_config.headers.{name}"
        if name not in _HEADERS:
            raise WebConfigError(
                f"{where}: this header cannot be set (allowed: {', '.join(_HEADERS)})"
            )
        text = _string(value, where)
        allowed = _HEADERS[name]
        if allowed is not None and text not in allowed:
            raise WebConfigError(f"{where}: {text!r} is not one of {', '.join(allowed)}")
        if any(c in text for c in "\r\n\0"):
            raise WebConfigError(f"{where}: control characters are not allowed")
        headers[name] = text
    return headers


def _rate(section: dict[str, Any]) -> tuple[float, int] | None:
    _unknown(section, {"interval", "burst"}, "rate_limit")
    interval = go_duration(str(section.get("interval", "0")), "rate_limit.interval")
    burst = section.get("burst", 0)
    if not isinstance(burst, int) or isinstance(burst, bool) or burst < 0:
        raise WebConfigError("rate_limit.burst: expected a whole number of requests")
    if interval == 0:
        return None
    if burst < 1:
        raise WebConfigError("rate_limit.burst: at least 1 (0 would refuse every request)")
    return interval, burst


def load(path: Path) -> WebConfig:
    """Read and check the file (and the certificates it names)."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise WebConfigError(f"cannot read it: {exc.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise WebConfigError(f"not YAML: {exc}") from None
    top = _mapping(raw, "the file")
    _unknown(top, {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"}, "")
    tls, files, sans = _tls(
        _mapping(top.get("tls_server_config"), "tls_server_config"), path.parent
    )
    return WebConfig(
        tls=tls,
        users=_users(_mapping(top.get("basic_auth_users"), "basic_auth_users")),
        headers=_http(_mapping(top.get("http_server_config"), "http_server_config")),
        rate=_rate(_mapping(top.get("rate_limit"), "rate_limit")),
        allowed_sans=sans,
        watched=(path, *files),
    )


def _stamp(paths: tuple[Path, ...]) -> tuple[tuple[int, int], ...]:
    out = []
    for p in paths:
        try:
            st = p.stat()
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((-1, -1))
    return tuple(out)


@dataclass
class WebGate:
    """What the HTTP server asks of the web configuration: the TLS context of a new
    connection, whether a request's credentials pass, and whether the rate allows it."""

    path: Path
    config: WebConfig
    _stamp: tuple[tuple[int, int], ...] = ()
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _bcrypt: threading.Lock = field(default_factory=threading.Lock)  # one bcrypt at a time
    _checked: dict[str, bool] = field(default_factory=dict)
    _tokens: float = 0.0
    _last: float = field(default_factory=time.monotonic)

    @classmethod
    def open(cls, path: Path) -> WebGate:
        config = load(path)
        gate = cls(path, config)
        gate._stamp = _stamp(config.watched)
        gate._tokens = float(config.rate[1]) if config.rate else 0.0
        return gate

    def current(self) -> WebConfig:
        """The configuration, re-read first if the file or a certificate changed."""
        with self._lock:
            stamp = _stamp(self.config.watched)
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self.config = load(self.path)
                    self._stamp = _stamp(self.config.watched)
                    self._checked.clear()
                    log.info("web configuration %s re-read", self.path)
                except WebConfigError as exc:
                    log.error("web configuration %s: %s (keeping the previous one)", self.path, exc)
            return self.config

    def sans_ok(self, peer: dict[str, Any] | None) -> bool:
        allowed = self.config.allowed_sans
        if allowed is None:
            return True
        names = {str(value) for _, value in (peer or {}).get("subjectAltName", ())}
        return bool(names & allowed)

    def authorized(self, header: str | None) -> bool:
        """Whether the request's ``Authorization`` header passes (always, without users)."""
        users = self.config.users
        if not users:
            return True
        if not header or header[:6].lower() != "basic ":
            return False
        try:
            user, sep, password = (
                base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
            )
        except (binascii.Error, UnicodeDecodeError):
            return False
        if not sep:
            return False
        hashed = users.get(user)
        key = hashlib.sha256(
            b"\0".join([user.encode(), hashed or b"", password.encode()])
        ).hexdigest()
        with self._lock:
            known = self._checked.get(key)
        if known is None:
            with self._bcrypt:
                try:
                    match = bcrypt.checkpw(password.encode(), hashed or _FAKE_HASH)
                except ValueError:  # longer than bcrypt's 72 bytes: no password of ours
                    match = False
                known = match and hashed is not None
            with self._lock:
                if len(self._checked) >= _CACHE_SIZE:
                    self._checked.clear()
                self._checked[key] = known
        return known

    def allow(self) -> bool:
        """A token of the rate limit's bucket (always, without a limit)."""
        rate = self.config.rate
        if rate is None:
            return True
        interval, burst = rate
        with self._lock:
            now = time.monotonic()
            self._tokens = min(float(burst), self._tokens + (now - self._last) / interval)
            self._last = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False
