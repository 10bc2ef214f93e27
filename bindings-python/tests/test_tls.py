"""TLS to the broker: a CA and a broker certificate made with openssl, a TLS listener beside
the plain one that mqstore serve uses."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mqstore
import pytest
from harness import Broker, Server, free_port
from mqstore import errors


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certificates() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="mqstore-py-tls-"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=mqstore test CA", cwd=directory)  # fmt: skip
    openssl("req", *ec, "-keyout", "broker.key", "-out", "broker.csr", "-subj", "/CN=localhost",
            cwd=directory)  # fmt: skip
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "broker.pem", "-days", "2", "-extfile", "san.ext",
            cwd=directory)  # fmt: skip
    # A device's certificate, its key encrypted with a password, for a listener that asks.
    openssl("req", *ec, "-keyout", "device.key", "-out", "device.csr",
            "-subj", "/CN=mqstore test device", cwd=directory)  # fmt: skip
    # With an extension, so that it is an X.509 v3 certificate (rustls reads no other).
    (directory / "device.ext").write_text("extendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", "device.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "device.pem", "-days", "2", "-extfile", "device.ext",
            cwd=directory)  # fmt: skip
    openssl("pkcs8", "-topk8", "-in", "device.key", "-out", "device-encrypted.key",
            "-passout", "pass:fleet-key-1", cwd=directory)  # fmt: skip
    yield directory
    shutil.rmtree(directory)


def test_calls_over_tls(certificates: Path) -> None:
    tls_port = free_port()
    broker = Broker(
        f"listener {tls_port} 127.0.0.1\n"
        f"certfile {certificates / 'broker.pem'}\nkeyfile {certificates / 'broker.key'}\n"
    )
    server = Server(broker)  # on the plain listener
    try:
        with mqstore.Client(
            "127.0.0.1", tls_port, tls=True, ca_file=certificates / "ca.pem"
        ) as client:
            assert client.set("py/tls", "secret").applied
            got = client.get("py/tls")
            assert got is not None and got.value == b"secret"
        # tls=True alone trusts the system's CAs: here SSL_CERT_FILE names the test CA.
        os.environ["SSL_CERT_FILE"] = str(certificates / "ca.pem")
        try:
            with mqstore.Client("127.0.0.1", tls_port, tls=True) as client:
                assert client.get("py/tls") is not None
            os.environ["SSL_CERT_FILE"] = str(certificates / "broker.pem")
            with pytest.raises(errors.BrokerUnreachableError):
                mqstore.Client("127.0.0.1", tls_port, tls=True, timeout=2)
        finally:
            del os.environ["SSL_CERT_FILE"]
        # A CA that did not sign the broker's certificate: refused, with the reason.
        with pytest.raises(errors.BrokerUnreachableError) as wrong:
            mqstore.Client("127.0.0.1", tls_port, tls=True, ca_file=certificates / "broker.pem")
        assert "cannot reach the MQTT broker" in str(wrong.value)
    finally:
        server.stop()
        broker.stop()


@pytest.fixture
def client_cert_port(certificates: Path) -> Iterator[int]:
    """A TLS listener that asks for a client certificate the test CA signed (mqstore serve on
    the plain one)."""
    tls_port = free_port()
    broker = Broker(
        f"listener {tls_port} 127.0.0.1\n"
        f"certfile {certificates / 'broker.pem'}\nkeyfile {certificates / 'broker.key'}\n"
        f"cafile {certificates / 'ca.pem'}\nrequire_certificate true\n"
    )
    server = Server(broker)
    try:
        yield tls_port
    finally:
        server.stop()
        broker.stop()


def test_a_client_certificate_whose_key_is_encrypted(
    certificates: Path, client_cert_port: int
) -> None:
    files: dict[str, Any] = {
        "tls": True,
        "ca_file": certificates / "ca.pem",
        "cert_file": certificates / "device.pem",
        "key_file": certificates / "device-encrypted.key",
    }
    port = client_cert_port
    with pytest.raises(ValueError, match="is encrypted: give its password"):
        mqstore.Client("127.0.0.1", port, **files)
    with pytest.raises(ValueError, match="the key password is wrong"):
        mqstore.Client("127.0.0.1", port, key_password="fleet-key-2", **files)
    with mqstore.Client("127.0.0.1", port, key_password="fleet-key-1", **files) as client:
        assert client.set("py/client-cert", "mutual").applied
        got = client.get("py/client-cert")
        assert got is not None and got.value == b"mutual"
    # Without a certificate, that listener refuses the connection.
    with pytest.raises(errors.BrokerUnreachableError):
        mqstore.Client("127.0.0.1", port, tls=True, ca_file=certificates / "ca.pem", timeout=2)
    # A password without a key is a mistake said before connecting.
    with pytest.raises(ValueError, match="give key_file too"):
        mqstore.Client(
            "127.0.0.1", port, tls=True, ca_file=certificates / "ca.pem", key_password="x"
        )


def test_the_asyncio_client_takes_the_key_password_too(
    certificates: Path, client_cert_port: int
) -> None:
    async def main() -> None:
        async with mqstore.AsyncClient(
            "127.0.0.1",
            client_cert_port,
            tls=True,
            ca_file=certificates / "ca.pem",
            cert_file=certificates / "device.pem",
            key_file=certificates / "device-encrypted.key",
            key_password="fleet-key-1",
        ) as client:
            assert (await client.set("py/client-cert-aio", "mutual")).applied

    asyncio.run(main())
