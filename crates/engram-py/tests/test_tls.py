"""Mutual TLS: the client connects with a CA and a certificate; without them it is refused."""

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import engram
from conftest import Cluster

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def openssl(dir: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=dir, check=True, capture_output=True)


def pki(dir: Path) -> None:
    """A CA, and a certificate it signs for 127.0.0.1 usable by servers and clients."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl(dir, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=test-ca")
    openssl(dir, "req", *ec, "-keyout", "node.key", "-out", "node.csr", "-subj", "/CN=engram")
    (dir / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
    openssl(dir, "x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "node.pem", "-days", "2", "-extfile", "ext.cnf")


def test_a_tls_cluster_serves_a_client_with_a_certificate():
    dir = Path(tempfile.mkdtemp(prefix="engram-py-tls-"))
    pki(dir)
    tls_args = ["--tls-cert", str(dir / "node.pem"), "--tls-key", str(dir / "node.key"),
                "--tls-client-ca", str(dir / "ca.pem")]

    def bootstrap(ports):
        peers = ",".join(f"{i}=127.0.0.1:{p}" for i, p in enumerate(ports, start=1))
        return ["--bootstrap", "--peer", peers, *tls_args]

    cluster = Cluster(extra_args=bootstrap, dir=dir)
    try:
        db = engram.Engram(cluster.endpoints, agent="tls-agent", tls_ca=dir / "ca.pem",
                           tls_cert=dir / "node.pem", tls_key=dir / "node.key")
        cluster.wait_writable(db, "tls/ready")
        r = db.transact("tls/a", [("t", ":t/n", 1)])
        assert db.get("tls/a", r.temp_ids["t"], prove=True)[":t/n"] == 1

        plaintext = engram.Engram(cluster.endpoints[0], agent="x", timeout_s=1, connect_timeout_s=0.5, retry_budget_s=0)
        with pytest.raises(engram.EngramError):
            plaintext.get("tls/a", r.temp_ids["t"])
        no_cert = engram.Engram(cluster.endpoints[0], agent="x", timeout_s=1, connect_timeout_s=0.5, retry_budget_s=0,
                                tls_ca=dir / "ca.pem")
        with pytest.raises(engram.EngramError):
            no_cert.get("tls/a", r.temp_ids["t"])
        with pytest.raises(ValueError, match="give both or neither"):
            engram.Engram(cluster.endpoints, tls_ca=dir / "ca.pem", tls_cert=dir / "node.pem")
    finally:
        cluster.stop()
