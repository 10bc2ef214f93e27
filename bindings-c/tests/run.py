"""Runs the C test binaries against real brokers and servers on free ports.

    python3 run.py [--valgrind] COMMAND...

Starts, with the harness the Python tests use (bindings-python/tests/harness.py, one broker
setup for every binding): mosquitto + `mqstore serve`; a second pair whose server has
`--max-keys 3` and access rules; a broker with `max_packet_size 2000` and no server; a broker
that wants a password, also on a TLS listener (an openssl-made CA); and picks a port where
nothing listens. Their ports go to the binaries in the environment (MQSTORE_TEST_PORT,
..._LIMITED_PORT, ..._BARE_PORT, ..._SECURE_PORT, ..._TLS_PORT with ..._CA_FILE and
..._WRONG_CA_FILE, ..._CLOSED_PORT), and `{port}` in a
command becomes the first broker's port (for the examples). With --valgrind each command runs
under valgrind's memcheck (children too), and any error or leak (definite, indirect or
possible) fails it. A command that prints no "test result:" line of its own (an example) counts
as one test. A failing command prints the servers' and brokers' logs.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parents[2] / "bindings-python" / "tests")
)

from harness import Broker, Server, free_port

# Seconds a command may take (under valgrind), before it counts as hung.
TIMEOUT = 300

VALGRIND = [
    "valgrind",
    "--quiet",
    "--error-exitcode=99",
    "--leak-check=full",
    "--errors-for-leak-kinds=definite,indirect,possible",
    "--show-leak-kinds=definite,indirect,possible",
    "--trace-children=yes",
    "--child-silent-after-fork=yes",
    "--num-callers=40",
    f"--suppressions={Path(__file__).resolve().parent / 'valgrind.supp'}",
]


def secure_broker(directory: Path) -> tuple[Broker, dict[str, str]]:
    """A broker that wants a user name and password (fleet / s3cret) on a plain listener, on a
    TLS listener whose certificate an openssl-made CA signed, and on a TLS listener that also
    wants a client certificate that CA signed."""

    def openssl(*args: str) -> None:
        subprocess.run(
            ["openssl", *args], cwd=directory, check=True, capture_output=True
        )

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def signed(name: str, subject: str, extensions: str) -> None:
        """NAME.key and NAME.pem, signed by the test CA (with extensions: X.509 v3, the only
        version rustls reads)."""
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", subject)  # fmt: skip
        (directory / f"{name}.ext").write_text(extensions)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
                "-extfile", f"{name}.ext")  # fmt: skip

    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=mqstore test CA")  # fmt: skip
    signed("broker", "/CN=localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    # A device's certificate, its key encrypted with a password (fleet-key-1), for a
    # listener that asks for one.
    signed("device", "/CN=mqstore test device", "extendedKeyUsage=clientAuth\n")
    openssl("pkcs8", "-topk8", "-in", "device.key", "-out", "device-encrypted.key",
            "-passout", "pass:fleet-key-1")  # fmt: skip
    passwords = directory / "passwords"
    subprocess.run(
        ["mosquitto_passwd", "-b", "-c", str(passwords), "fleet", "s3cret"], check=True
    )
    tls_port, client_cert_port = free_port(), free_port()
    broker = Broker(
        f"allow_anonymous false\npassword_file {passwords}\n"
        f"listener {tls_port} 127.0.0.1\n"
        f"certfile {directory / 'broker.pem'}\nkeyfile {directory / 'broker.key'}\n"
        f"listener {client_cert_port} 127.0.0.1\n"
        f"certfile {directory / 'broker.pem'}\nkeyfile {directory / 'broker.key'}\n"
        f"cafile {directory / 'ca.pem'}\nrequire_certificate true\n"
    )
    return broker, {
        "MQSTORE_TEST_SECURE_PORT": str(broker.port),
        "MQSTORE_TEST_TLS_PORT": str(tls_port),
        "MQSTORE_TEST_CA_FILE": str(directory / "ca.pem"),
        "MQSTORE_TEST_WRONG_CA_FILE": str(directory / "broker.pem"),
        "MQSTORE_TEST_CLIENT_CERT_PORT": str(client_cert_port),
        "MQSTORE_TEST_CLIENT_CERT_FILE": str(directory / "device.pem"),
        "MQSTORE_TEST_CLIENT_KEY_FILE": str(directory / "device-encrypted.key"),
    }


def main(args: list[str]) -> int:
    valgrind = "--valgrind" in args
    commands = [a for a in args if a != "--valgrind"]
    started: list[Broker | Server] = []
    scratch = Path(tempfile.mkdtemp(prefix="mqstore-c-tests-"))
    scratch.chmod(0o755)
    try:
        main_broker = Broker()
        started.append(main_broker)
        started.append(Server(main_broker))
        limited_broker = Broker()
        started.append(limited_broker)
        limited = Server(
            limited_broker,
            "--max-keys",
            "3",
            "--access-rule",
            "* readonly/* r",
            "--access-rule",
            "* * rw",
        )
        started.append(limited)
        bare = Broker("max_packet_size 2000\n")
        started.append(bare)
        secure, secure_env = secure_broker(scratch)
        started.append(secure)
        env = {
            **os.environ,
            "MQSTORE_TEST_PORT": str(main_broker.port),
            "MQSTORE_TEST_LIMITED_PORT": str(limited_broker.port),
            "MQSTORE_TEST_BARE_PORT": str(bare.port),
            "MQSTORE_TEST_CLOSED_PORT": str(free_port()),
            **secure_env,
        }
        failed = 0
        for text in commands:
            words = shlex.split(text.replace("{port}", str(main_broker.port)))
            command = [*VALGRIND, *words] if valgrind else words
            print(f"--- {' '.join(command)}", flush=True)
            try:
                result = subprocess.run(
                    command,
                    env=env,
                    check=False,
                    timeout=TIMEOUT,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                output, status = result.stdout, result.returncode
            except subprocess.TimeoutExpired as e:
                output, status = str(e.stdout or ""), -1
            print(output, end="", flush=True)
            counted = "test result:" in output
            if status == 0 and not counted:
                print("test result: ok. 1 passed; 0 failed; 0 ignored")
            elif status != 0:
                failed += 1
                why = {
                    99: "valgrind found errors or leaks",
                    -1: f"no end within {TIMEOUT} s",
                }.get(status, f"exit status {status}")
                print(
                    f"test result: FAILED. 0 passed; 1 failed; 0 ignored ({words[0]}: {why})"
                )
                for part in started:
                    if isinstance(part, Server):
                        print(part.log())
        return 1 if failed else 0
    finally:
        for part in reversed(started):
            part.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
