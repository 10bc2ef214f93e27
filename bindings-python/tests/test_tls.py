"""TLS to the broker: a CA and a broker certificate made with openssl, a TLS listener beside
the plain one that mqstore serve uses."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

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
        # A CA that did not sign the broker's certificate: refused, with the reason.
        with pytest.raises(errors.BrokerUnreachableError) as wrong:
            mqstore.Client("127.0.0.1", tls_port, tls=True, ca_file=certificates / "broker.pem")
        assert "cannot reach the MQTT broker" in str(wrong.value)
    finally:
        server.stop()
        broker.stop()
