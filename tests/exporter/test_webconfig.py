"""``--web.config.file``: a real Prometheus scrapes the real exporter over TLS with basic
authentication; a wrong password gets 401, plain HTTP to the TLS port fails; client
certificates and their SANs; certificates re-read when they change; a bad file stops the
exporter at start-up naming the field (exit 2)."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
import yaml

from exporter import cli
from exporter.webconfig import WebGate
from tests.conftest import require_binary
from tests.exporter.helpers import Rig, rig
from tests.procs import ROOT, Process, start_exporter
from tests.prom import Prometheus
from tests.tlscerts import CA, Issued

H100 = ROOT / "examples" / "fleet-h100x8.yaml"
USER, PASSWORD = "prometheus", "s3cret-scrape-password"
ONE_GPU = {"gpus": [{"model": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559}]}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[CA, Issued, Path]:
    """A CA, the exporter's certificate (localhost, 127.0.0.1) and a web config using both
    with one bcrypt user (cost 4: the hash's cost is the file's business, not the test's)."""
    folder = tmp_path_factory.mktemp("pki")
    ca = CA(folder)
    server = ca.issue("server", ("localhost",), ("127.0.0.1",))
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    web = folder / "web.yml"
    web.write_text(
        yaml.safe_dump(
            {
                # relative names: resolved against the file's folder, as the toolkit does
                "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key"},
                "http_server_config": {"headers": {"X-Content-Type-Options": "nosniff"}},
                "basic_auth_users": {USER: hashed},
            }
        )
    )
    return ca, server, web


@pytest.fixture(scope="module")
def served(pki: tuple[CA, Issued, Path]) -> Iterator[tuple[Process, int]]:
    _, _, web = pki
    exporter, port = start_exporter(
        "--simulate", str(H100), "--collect-interval", "1s", "--web.config.file", str(web)
    )
    try:
        yield exporter, port
    finally:
        exporter.stop()


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _https_get(port: int, ca: Path, headers: dict[str, str]) -> http.client.HTTPResponse:
    context = ssl.create_default_context(cafile=str(ca))
    conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
    conn.request("GET", "/metrics", headers=headers)
    return conn.getresponse()


def test_prometheus_scrapes_over_tls_with_basic_auth(
    pki: tuple[CA, Issued, Path], served: tuple[Process, int], tmp_path: Path
) -> None:
    """Three jobs on the one exporter: the right credentials over TLS (up, GPUs scraped), a
    wrong password (401), plain HTTP (refused)."""
    ca, _, _ = pki
    _, port = served
    target = json.dumps([f"localhost:{port}"])
    secret = tmp_path / "password"
    secret.write_text(PASSWORD)
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password")

    def job(name: str, scheme: str, password_file: Path) -> str:
        return (
            f"  - job_name: {name}\n"
            f"    scheme: {scheme}\n"
            f"    tls_config: {{ca_file: {ca.cert}, server_name: localhost}}\n"
            f"    basic_auth: {{username: {USER}, password_file: {password_file}}}\n"
            f"    static_configs: [{{targets: {target}}}]\n"
        )

    config = (
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\nscrape_configs:\n"
        + job("tls", "https", secret)
        + job("wrong", "https", wrong)
        + job("plain", "http", secret)
    )
    prom = Prometheus(require_binary("prometheus"), tmp_path, [], config_text=config)
    try:
        prom.wait_ready()
        gpus = prom.until(lambda: prom.query('DCGM_FI_DEV_GPU_TEMP{job="tls"}'), 30, "TLS scrape")
        assert len(gpus) == 8

        def errors() -> dict[str, str] | None:
            targets = prom.get("/api/v1/targets")["data"]["activeTargets"]
            found = {
                t["labels"]["job"]: t["lastError"] for t in targets if t["health"] != "unknown"
            }
            return found if len(found) == 3 else None

        seen = prom.until(errors, 30, "every job scraped once")
        assert seen["tls"] == ""
        assert "401" in seen["wrong"], seen
        assert "400" in seen["plain"], seen  # "Client sent an HTTP request to an HTTPS server."
        assert {r["metric"]["job"]: r["value"][1] for r in prom.query("up")} == {
            "tls": "1",
            "wrong": "0",
            "plain": "0",
        }
    finally:
        prom.stop()


def test_wrong_or_missing_credentials_get_401_and_plain_http_is_refused(
    pki: tuple[CA, Issued, Path], served: tuple[Process, int]
) -> None:
    ca, _, _ = pki
    _, port = served
    ok = _https_get(port, ca.cert, {"Authorization": _basic(USER, PASSWORD)})
    assert ok.status == 200 and b"DCGM_FI_DEV_GPU_TEMP" in ok.read()
    assert ok.getheader("X-Content-Type-Options") == "nosniff"
    for headers in (
        {"Authorization": _basic(USER, "wrong")},
        {"Authorization": _basic("nobody", PASSWORD)},
        {"Authorization": "Bearer " + PASSWORD},
        {},
    ):
        denied = _https_get(port, ca.cert, headers)
        assert denied.status == 401, headers
        assert denied.getheader("WWW-Authenticate") == "Basic"
        assert b"DCGM" not in denied.read()
    plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    plain.request("GET", "/metrics", headers={"Authorization": _basic(USER, PASSWORD)})
    answer = plain.getresponse()
    assert answer.status == 400
    assert b"HTTPS" in answer.read()
    with pytest.raises(ssl.SSLCertVerificationError):  # a client that does not trust the CA
        _https_get(port, Path(ssl.get_default_verify_paths().cafile or ca.cert), {})


def _serve_tls(rig_: Rig, web: Path) -> Rig:
    """The rig's exporter behind a web config (a second server on its own port)."""
    from exporter.http import MetricsServer

    server = MetricsServer("127.0.0.1:0", rig_.exporter, WebGate.open(web))
    server.start()
    rig_.server.stop()
    rig_.server = server
    return rig_


def _handshake(port: int, ca: Path, client: Issued | None = None) -> bytes:
    context = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        context.load_cert_chain(client.cert, client.key)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as conn,
    ):
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        return conn.recv(64)


def _refused(port: int, ca: Path, client: Issued | None) -> bool:
    """The connection ends without an answer (with TLS 1.3 the server may say no only after
    the client's hello has been answered, so the refusal can arrive on the first read)."""
    try:
        answer = _handshake(port, ca, client)
    except (ssl.SSLError, OSError):
        return True
    return answer == b""


def test_client_certificates_and_their_sans(tmp_path: Path, clock: object) -> None:
    """RequireAndVerifyClientCert: no certificate, or one of another CA, ends the handshake;
    the CA's certificate is let in only when it names an allowed SAN."""
    ca = CA(tmp_path)
    server = ca.issue("server", ("localhost",), ("127.0.0.1",))
    good = ca.issue("prometheus", ("prometheus.monitoring.svc",), client=True)
    other_name = ca.issue("intruder", ("intruder.example",), client=True)
    (tmp_path / "other").mkdir()
    stranger = CA(tmp_path / "other", "stranger")
    foreign = stranger.issue("foreign", ("prometheus.monitoring.svc",), client=True)
    web = tmp_path / "web.yml"
    web.write_text(
        yaml.safe_dump(
            {
                "tls_server_config": {
                    "cert_file": str(server.cert),
                    "key_file": str(server.key),
                    "client_auth_type": "RequireAndVerifyClientCert",
                    "client_ca_file": str(ca.cert),
                    "client_allowed_sans": ["prometheus.monitoring.svc"],
                }
            }
        )
    )
    r = _serve_tls(rig(ONE_GPU, clock), web)  # type: ignore[arg-type]
    assert _handshake(r.server.port, ca.cert, good).startswith(b"HTTP/1.1 ")  # let in
    for client in (None, foreign, other_name):
        assert _refused(r.server.port, ca.cert, client), client


def test_a_renewed_certificate_is_served_without_a_restart(tmp_path: Path, clock: object) -> None:
    """cert-manager renews the Secret's files: the next connection gets the new certificate."""
    ca = CA(tmp_path)
    first = ca.issue("first", ("localhost",), ("127.0.0.1",))
    web = tmp_path / "web.yml"
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(first.cert.read_bytes())
    key.write_bytes(first.key.read_bytes())
    web.write_text(
        yaml.safe_dump({"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key"}})
    )
    r = _serve_tls(rig(ONE_GPU, clock), web)  # type: ignore[arg-type]

    def served_serial() -> int:
        der = ssl.get_server_certificate(("127.0.0.1", r.server.port), ca_certs=str(ca.cert))
        from cryptography import x509

        return x509.load_pem_x509_certificate(der.encode()).serial_number

    from cryptography import x509

    before = served_serial()
    assert before == x509.load_pem_x509_certificate(first.cert.read_bytes()).serial_number
    second = ca.issue("second", ("localhost",), ("127.0.0.1",))
    key.write_bytes(second.key.read_bytes())
    cert.write_bytes(second.cert.read_bytes())
    after = served_serial()
    assert after == x509.load_pem_x509_certificate(second.cert.read_bytes()).serial_number
    assert after != before


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ({"tls_server_config": {"cert_fil": "x"}}, "tls_server_config.cert_fil: unknown field"),
        ({"basic_auth_user": {}}, "basic_auth_user: unknown field"),
        ({"basic_auth_users": {"alice": "plain-text"}}, "basic_auth_users.alice: not a bcrypt"),
        ({"tls_server_config": {"cert_file": "nope.crt", "key_file": "nope.key"}},
         "tls_server_config.cert_file: "),
        ({"tls_server_config": {"cert_file": "server.crt"}},
         "tls_server_config: missing one of key or key_file"),
        ({"tls_server_config": {"cert_file": "server.crt", "key_file": "server.key",
                                "client_auth_type": "Sometimes"}},
         "tls_server_config.client_auth_type: 'Sometimes' is not one of"),
        ({"tls_server_config": {"cert_file": "server.crt", "key_file": "server.key",
                                "client_ca_file": "ca.crt"}},
         "tls_server_config.client_auth_type: a client CA is set without"),
        ({"tls_server_config": {"cert_file": "server.crt", "key_file": "server.key",
                                "min_version": "TLS14"}},
         "tls_server_config.min_version: 'TLS14' is not one of"),
        ({"tls_server_config": {"cert_file": "server.crt", "key_file": "server.key",
                                "cipher_suites": ["TLS_RSA_WITH_RC4_128_SHA"]}},
         "tls_server_config.cipher_suites[0]: "),
        ({"http_server_config": {"headers": {"Server": "x"}}},
         "http_server_config.headers.Server: this header cannot be set"),
        ({"rate_limit": {"interval": "fast", "burst": 1}}, "rate_limit.interval: 'fast'"),
    ],
)  # fmt: skip
def test_a_bad_file_stops_start_up_naming_the_field(
    pki: tuple[CA, Issued, Path],
    content: dict[str, object],
    named: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, _, good = pki
    web = good.parent / "bad.yml"
    web.write_text(yaml.safe_dump(content))
    code = cli.main(["--simulate", str(H100), "--web.config.file", str(web)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith(f"gpu-exporter: error: --web.config.file {web}: {named}"), err
    assert len(err.splitlines()) == 1
