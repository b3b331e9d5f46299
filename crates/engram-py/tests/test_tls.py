"""Mutual TLS: the client connects with a CA and a certificate; without them it is refused. In
an enforced cluster, a client certificate that names a registered agent authenticates as it."""

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import engram
from conftest import Cluster, run_cli

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


def client_cert(dir: Path, name: str, subject: str) -> None:
    """A client certificate for `subject`, signed by the CA `pki` made, as `<name>.pem`/`.key`."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl(dir, "req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject)
    (dir / f"{name}.cnf").write_text("extendedKeyUsage=clientAuth\n")
    openssl(dir, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.cnf")


def test_a_client_certificate_names_its_agent_in_an_enforced_cluster():
    dir = Path(tempfile.mkdtemp(prefix="engram-py-tls-"))
    pki(dir)
    client_cert(dir, "alice", "/O=Team A/CN=alice")
    tls_args = ["--tls-cert", str(dir / "node.pem"), "--tls-key", str(dir / "node.key"),
                "--tls-client-ca", str(dir / "ca.pem")]
    cluster = Cluster(extra_args=lambda ports: tls_args, dir=dir)
    try:
        admin_key = str(dir / "admin.key")
        run_cli("agent", "keygen", "admin", "--out", admin_key)
        # The CLI's TLS flags are global: they may follow the subcommand.
        cluster.init("--security", "enforced", "--admin-key", admin_key, "--tls-ca", str(dir / "ca.pem"),
                     "--tls-cert", str(dir / "node.pem"), "--tls-key", str(dir / "node.key"))
        admin = engram.Engram(cluster.endpoints, agent_key=admin_key, tls_ca=dir / "ca.pem",
                              tls_cert=dir / "node.pem", tls_key=dir / "node.key")
        cluster.wait_writable(admin, "ops/ready")
        admin.create_agent("alice", dir / "alice.agent.key")
        admin.grant("alice", ["read", "write"], "team/a")

        # No agent key: the certificate alone names alice, through whichever node answers.
        alice = engram.Engram(cluster.endpoints, agent="alice", tls_ca=dir / "ca.pem",
                              tls_cert=dir / "alice.pem", tls_key=dir / "alice.key")
        me = alice.whoami()
        assert me["principal"] == "alice" and me["security"] == "enforced"
        r = alice.transact("team/a", [("t", ":task/title", "by certificate")])
        got = alice.get("team/a", r.temp_ids["t"])
        assert got[":task/title"] == "by certificate"
        assert got.datoms[0].agent == "alice"
        with pytest.raises(engram.PermissionDenied) as denied:
            alice.transact("team/b", [("t", ":task/title", "not hers")])
        assert "alice" in denied.value.message and "team/b" in denied.value.message

        # The nodes' own certificate names no agent: unsigned, it is refused, saying why.
        anonymous = engram.Engram(cluster.endpoints, agent="engram", tls_ca=dir / "ca.pem",
                                  tls_cert=dir / "node.pem", tls_key=dir / "node.key", retry_budget_s=0)
        with pytest.raises(engram.Unauthenticated) as refused:
            anonymous.transact("team/a", [("t", ":task/title", "who am I")])
        assert "not a registered agent" in refused.value.message

        # Revoking alice revokes her certificate.
        admin.revoke_agent("alice")
        with pytest.raises(engram.Unauthenticated) as revoked:
            alice.transact("team/a", [("t", ":task/title", "after revocation")])
        assert "revoked" in revoked.value.message
    finally:
        cluster.stop()
