"""Generate throwaway TLS material for a test cluster with openssl and keytool.

Everything a TLS test needs is made fresh per cluster in a private directory, so no key
ever lives in the repository:

* a CA (``ca.pem``) that signs everything below;
* a broker certificate whose SAN is ``DNS:localhost, IP:127.0.0.1`` (clients connect to
  127.0.0.1 and can keep hostname verification on), packed with its key and the CA into a
  PKCS12 keystore, plus a PKCS12 truststore holding the CA (for MTLS client checks);
* a client certificate + key signed by the CA (``client.pem`` / ``client.key``, PEM) for
  mutual TLS, also as ``client-combined.pem`` (certificate + key in one file, the shape of
  Java's ``ssl.keystore.type=PEM``) and ``client.p12`` for JVM clients (Spark's connector);
* the same client key and certificate in stores written by the JDK's ``keytool``, as Java
  users have them: ``client.jks`` (JKS, the key under its own password ``KEY_PASSWORD``) and
  ``client-keytool.p12`` (PKCS12, one password), and the CA as truststores ``truststore.p12``
  and ``truststore.jks``;
* a second, unrelated CA (``untrusted-ca.pem``) to prove a wrong trust anchor fails.

EC P-256 keys: generated in milliseconds (RSA takes visibly longer on 2 cores) and
supported by the JVM, OpenSSL (librdkafka) and Python's ``ssl``.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

STORE_PASSWORD = "kafka-ds-test"  # PKCS12 store password (JVM stores need one)
# The client key's own password inside client.jks (JKS keeps key and store passwords apart;
# keytool's PKCS12 stores use the store password for both).
KEY_PASSWORD = "kafka-ds-key"
CLIENT_CN = "kafka-ds-client"  # principal of the MTLS client: User:CN=kafka-ds-client
_DAYS = "30"


@dataclass(frozen=True)
class TlsMaterial:
    """Paths of the generated files (all inside ``directory``)."""

    directory: Path
    ca_pem: Path
    broker_keystore_p12: Path
    broker_truststore_p12: Path
    client_cert_pem: Path
    client_key_pem: Path
    client_combined_pem: Path
    client_keystore_p12: Path
    untrusted_ca_pem: Path
    client_keystore_jks: Path
    client_keystore_keytool_p12: Path
    truststore_jks: Path
    password: str = STORE_PASSWORD
    key_password: str = KEY_PASSWORD


class TlsError(RuntimeError):
    """openssl or keytool failed; the message has the command and its output."""


def _run(*cmd: str, cwd: Path) -> None:
    _run_all([list(cmd)], cwd)


def _run_all(commands: list[list[str]], cwd: Path) -> None:
    """Run ``commands`` side by side (each keytool is a JVM start); raise if any fails."""
    running = [(cmd, subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
               for cmd in commands]
    failures = []
    for cmd, proc in running:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{out}")
    if failures:
        raise TlsError("\n".join(failures))


def _new_key(name: str, cwd: Path) -> None:
    # genpkey writes PKCS#8 ("BEGIN PRIVATE KEY"), which every client library accepts.
    _run("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-out", name, cwd=cwd)


def _new_ca(stem: str, cn: str, cwd: Path) -> None:
    _new_key(f"{stem}.key", cwd)
    _run("openssl", "req", "-x509", "-new", "-key", f"{stem}.key", "-out", f"{stem}.pem",
         "-days", _DAYS, "-subj", f"/CN={cn}",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=cwd)


def _signed_cert(stem: str, cn: str, extensions: str, cwd: Path) -> None:
    _new_key(f"{stem}.key", cwd)
    _run("openssl", "req", "-new", "-key", f"{stem}.key", "-out", f"{stem}.csr",
         "-subj", f"/CN={cn}", cwd=cwd)
    (cwd / f"{stem}.ext").write_text(extensions)
    _run("openssl", "x509", "-req", "-in", f"{stem}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
         "-CAcreateserial", "-out", f"{stem}.pem", "-days", _DAYS,
         "-extfile", f"{stem}.ext", cwd=cwd)


def _pkcs12(stem: str, cwd: Path) -> None:
    _run("openssl", "pkcs12", "-export", "-in", f"{stem}.pem", "-inkey", f"{stem}.key",
         "-certfile", "ca.pem", "-name", stem, "-out", f"{stem}.p12",
         "-passout", f"pass:{STORE_PASSWORD}", cwd=cwd)


def generate(directory: Path) -> TlsMaterial:
    """Create CA, broker and client material in ``directory`` (created if missing)."""
    for tool in ("openssl", "keytool"):
        if shutil.which(tool) is None:
            raise TlsError(f"`{tool}` is not on PATH (openssl package / a JDK provide it)")
    directory.mkdir(parents=True, exist_ok=True)
    _new_ca("ca", "kafka-ds-test-ca", directory)
    _signed_cert("broker", "localhost",
                 "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                 "keyUsage=critical,digitalSignature,keyAgreement\n"
                 "extendedKeyUsage=serverAuth,clientAuth\n", directory)
    _signed_cert("client", CLIENT_CN,
                 "keyUsage=critical,digitalSignature,keyAgreement\n"
                 "extendedKeyUsage=clientAuth\n", directory)
    _pkcs12("broker", directory)
    _pkcs12("client", directory)
    # A truststore needs a "trusted certificate" entry, which only keytool writes; the
    # client's JKS and keytool-PKCS12 keystores are what a Java user's keytool makes.
    quick = ["-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC"]
    from_p12 = ["keytool", *quick, "-importkeystore", "-noprompt", "-srckeystore",
                "client.p12", "-srcstoretype", "PKCS12", "-srcstorepass", STORE_PASSWORD,
                "-srcalias", "client", "-destalias", "client", "-deststorepass", STORE_PASSWORD]
    _run_all([
        ["keytool", *quick, "-importcert", "-noprompt", "-alias", "ca", "-file", "ca.pem",
         "-keystore", "truststore.p12", "-storetype", "PKCS12", "-storepass", STORE_PASSWORD],
        ["keytool", *quick, "-importcert", "-noprompt", "-alias", "ca", "-file", "ca.pem",
         "-keystore", "truststore.jks", "-storetype", "JKS", "-storepass", STORE_PASSWORD],
        [*from_p12, "-destkeystore", "client.jks", "-deststoretype", "JKS",
         "-destkeypass", KEY_PASSWORD],
        [*from_p12, "-destkeystore", "client-keytool.p12", "-deststoretype", "PKCS12"],
    ], directory)
    (directory / "client-combined.pem").write_text(
        (directory / "client.pem").read_text() + (directory / "client.key").read_text())
    _new_ca("untrusted-ca", "kafka-ds-untrusted-ca", directory)
    return TlsMaterial(
        directory=directory,
        ca_pem=directory / "ca.pem",
        broker_keystore_p12=directory / "broker.p12",
        broker_truststore_p12=directory / "truststore.p12",
        client_cert_pem=directory / "client.pem",
        client_key_pem=directory / "client.key",
        client_combined_pem=directory / "client-combined.pem",
        client_keystore_p12=directory / "client.p12",
        untrusted_ca_pem=directory / "untrusted-ca.pem",
        client_keystore_jks=directory / "client.jks",
        client_keystore_keytool_p12=directory / "client-keytool.p12",
        truststore_jks=directory / "truststore.jks",
    )
