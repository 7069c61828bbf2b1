"""TLS key and trust material as the Java client takes it: PKCS12 and JKS stores, PEM files
and PEM strings.

Layer: net (reads files). ``cryptography`` parses PKCS12 and PEM; ``pyjks`` parses JKS and
JCEKS and is an extra (``pip install 'kafka-ds[jks]'``), imported only when a JKS store is met.

What the Java client accepts, and so do we (``DefaultSslEngineFactory``):

* ``ssl.truststore.location`` + ``ssl.truststore.type`` (PKCS12, JKS, PEM) +
  ``ssl.truststore.password``; or ``ssl.truststore.certificates``, PEM text in the option.
* ``ssl.keystore.location`` + ``ssl.keystore.type`` + ``ssl.keystore.password`` +
  ``ssl.key.password`` (the key's own password, JKS and encrypted PEM keys); or
  ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``, PEM text in the options.

The file's content decides how it is read, the declared type only whether that is allowed:
Java's JKS and PKCS12 key stores each read both formats (``keystore.type.compat``), so a
``.p12`` file under the default type JKS works there and here. A PEM file under a store type,
or a store under ``PEM``, is an error naming the option, as is any type we cannot read. With
no type given a PEM file is read too (kafka_ds read PEM only, before stores).

A store's truststore is its trusted certificates (JKS ``trustedCertEntry``, PKCS12 certificate
bags without a key); a keystore is its (first, by alias) private key and that key's chain.
Errors name the option and the file, never a password, and are ``ConfigError``s: a wrong
password does not get better by retrying.

Python's ``ssl`` loads a client key only from a file. ``install_client_key`` therefore hands
OpenSSL the key through an anonymous in-memory file (``memfd_create``, Linux), which never
touches a disk, and only where that does not exist through a temporary file. Either way the
key in it is encrypted under a random one-time password, the file is 0600 and it is closed
and deleted as soon as OpenSSL has read it, before ``install_client_key`` returns.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from kafka_ds.protocol.errors import ConfigError

log = logging.getLogger(__name__)

SUPPORTED_TYPES = ("PKCS12", "JKS", "JCEKS", "PEM")
# Formats each declared type may read (Java's JKS/PKCS12/JCEKS key stores read each other).
_TYPE_READS = {"PKCS12": {"PKCS12", "JKS", "JCEKS"}, "JKS": {"PKCS12", "JKS", "JCEKS"},
               "JCEKS": {"PKCS12", "JKS", "JCEKS"}, "PEM": {"PEM"}}
_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_JCEKS_MAGIC = b"\xce\xce\xce\xce"
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)
_KEY_LABELS = (b"PRIVATE KEY", b"ENCRYPTED PRIVATE KEY", b"RSA PRIVATE KEY", b"EC PRIVATE KEY",
               b"DSA PRIVATE KEY")


@dataclass(frozen=True)
class KeyMaterial:
    """Our TLS identity: a private key and its certificate chain (ours first)."""

    key: Any = field(repr=False)  # a cryptography private key
    chain: tuple[x509.Certificate, ...]


@dataclass(frozen=True)
class StoreSettings:
    """One ``ssl.truststore.*`` or ``ssl.keystore.*`` group as the user wrote it."""

    prefix: str  # "ssl.truststore" or "ssl.keystore"
    location: str | None = None
    store_type: str | None = None
    password: str | None = field(default=None, repr=False)

    def option(self, name: str) -> str:
        return f"{self.prefix}.{name}"


# --- format detection ------------------------------------------------------------------------

def detect_format(data: bytes) -> str | None:
    """PKCS12, JKS, JCEKS or PEM from the bytes themselves; None when it is none of them."""
    if data.startswith(_JKS_MAGIC):
        return "JKS"
    if data.startswith(_JCEKS_MAGIC):
        return "JCEKS"
    if _is_pkcs12(data):
        return "PKCS12"
    if b"-----BEGIN " in data[:64 * 1024]:
        return "PEM"
    return None


def _is_pkcs12(data: bytes) -> bool:
    # PFX ::= SEQUENCE { version INTEGER (3), ... } (RFC 7292): DER 30 <length> 02 01 03.
    if len(data) < 8 or data[0] != 0x30:
        return False
    first = data[1]
    offset = 2 if first < 0x80 else 2 + (first & 0x7F)
    return data[offset:offset + 3] == b"\x02\x01\x03"


def _read(settings: StoreSettings) -> tuple[bytes, str]:
    """The store's bytes and the format to read them as, checked against the declared type."""
    assert settings.location is not None
    location_option = settings.option("location")
    declared = (settings.store_type or "").strip().upper() or None
    if declared is not None and declared not in _TYPE_READS:
        raise ConfigError(f"{settings.option('type')}={settings.store_type} is not supported: "
                          f"use one of {', '.join(SUPPORTED_TYPES)}")
    try:
        with open(settings.location, "rb") as file:
            data = file.read()
    except OSError as exc:
        raise ConfigError(f"cannot read {location_option}={settings.location}: "
                          f"{exc.strerror or exc}") from None
    found = detect_format(data)
    if found is None:
        raise ConfigError(f"{location_option}={settings.location} is not a PKCS12, JKS or PEM "
                          "store (unrecognised content)")
    if declared is not None and found not in _TYPE_READS[declared]:
        raise ConfigError(
            f"{settings.option('type')}={declared} but {location_option}={settings.location} "
            f"holds a {found} {'file' if found == 'PEM' else 'store'}: set "
            f"{settings.option('type')}={'PEM' if found == 'PEM' else 'PKCS12 or JKS'}")
    return data, found


# --- trust -----------------------------------------------------------------------------------

def read_truststore(settings: StoreSettings) -> bytes:
    """The trusted certificates of ``settings.location`` as concatenated DER (``cadata``)."""
    data, found = _read(settings)
    where = f"{settings.option('location')}={settings.location}"
    if found == "PEM":
        certificates = _pem_certificates(data, where)
    elif found == "PKCS12":
        certificates = _pkcs12_trusted(data, settings)
    else:
        certificates = _jks_trusted(data, found, settings)
    if not certificates:
        raise ConfigError(f"{where} holds no trusted certificate")
    return b"".join(certificates)


def pem_trust(text: str, option: str) -> bytes:
    """``ssl.truststore.certificates``: PEM text in the option itself, as concatenated DER."""
    certificates = _pem_certificates(text.encode(), option)
    if not certificates:
        raise ConfigError(f"{option} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    return b"".join(certificates)


def _pem_blocks(data: bytes) -> Iterator[tuple[bytes, bytes, bytes]]:
    """(label, PEM block, RFC 1421 headers) for each block, the base64 rewrapped: Java reads
    PEM put on one line (a property value), so we do too."""
    for match in _PEM_BLOCK.finditer(data):
        label, inner = match.group(1), match.group(2).strip()
        headers, _, body = inner.rpartition(b"\n\n")
        if b"Proc-Type:" not in headers:  # no headers: all of it is base64
            headers, body = b"", inner
        base64 = b"".join(body.split())
        lines = [base64[i:i + 64] for i in range(0, len(base64), 64)]
        head = [b"-----BEGIN " + label + b"-----"]
        if headers:  # a traditional encrypted key: Proc-Type and DEK-Info, then a blank line
            head += [line.strip() for line in headers.splitlines()] + [b""]
        block = b"\n".join([*head, *lines, b"-----END " + label + b"-----", b""])
        yield label, block, headers


def _pem_certificates(data: bytes, where: str) -> list[bytes]:
    certificates = []
    for label, block, _ in _pem_blocks(data):
        if label == b"CERTIFICATE":
            try:
                certificate = x509.load_pem_x509_certificate(block)
            except ValueError:
                raise ConfigError(f"{where}: a PEM certificate in it is malformed") from None
            certificates.append(certificate.public_bytes(serialization.Encoding.DER))
    return certificates


def _pkcs12_trusted(data: bytes, settings: StoreSettings) -> list[bytes]:
    loaded = _load_pkcs12(data, settings)
    # Certificate bags without a key: keytool's trustedCertEntry (a key's own certificate
    # is its identity, not a trust anchor; its CA certificates come as separate bags).
    return [c.certificate.public_bytes(serialization.Encoding.DER)
            for c in loaded.additional_certs]


def _load_pkcs12(data: bytes, settings: StoreSettings) -> pkcs12.PKCS12KeyAndCertificates:
    password = settings.password.encode() if settings.password is not None else None
    try:
        return pkcs12.load_pkcs12(data, password)
    except ValueError:
        pass
    where = f"{settings.option('location')}={settings.location}"
    if password is None:
        raise ConfigError(f"{where} is a password-protected PKCS12 store: set "
                          f"{settings.option('password')}") from None
    raise ConfigError(f"cannot open {where} (PKCS12): {settings.option('password')} is wrong "
                      "for it") from None


def _jks_trusted(data: bytes, found: str, settings: StoreSettings) -> list[bytes]:
    store = _load_jks(data, found, settings)
    return [entry.cert for _, entry in sorted(store.certs.items())]


def _jks_module() -> Any:
    try:
        import jks
    except ImportError:
        raise ConfigError(
            "reading a JKS store needs the pyjks package: pip install 'kafka-ds[jks]' (or "
            "convert the store to PKCS12: keytool -importkeystore -srckeystore store.jks "
            "-destkeystore store.p12 -deststoretype PKCS12)") from None
    return jks


def _load_jks(data: bytes, found: str, settings: StoreSettings) -> Any:
    jks = _jks_module()
    where = f"{settings.option('location')}={settings.location}"
    try:
        # No password: read without the integrity check, as Java does for a truststore.
        return jks.KeyStore.loads(data, settings.password, try_decrypt_keys=False)
    except jks.util.KeystoreSignatureException:
        raise ConfigError(f"cannot open {where} ({found}): {settings.option('password')} is "
                          "wrong for it") from None
    except (jks.util.KeystoreException, ValueError) as exc:
        raise ConfigError(f"{where} is not a readable {found} store: "
                          f"{type(exc).__name__}") from None


# --- our identity ----------------------------------------------------------------------------

def read_keystore(settings: StoreSettings, key_password: str | None) -> KeyMaterial:
    """The private key and chain in ``settings.location`` (PKCS12, JKS or a PEM file)."""
    data, found = _read(settings)
    where = f"{settings.option('location')}={settings.location}"
    if found == "PEM":
        return _pem_key_material(data, data, key_password, where, where)
    if found == "PKCS12":
        loaded = _load_pkcs12(data, settings)
        if loaded.key is None or loaded.cert is None:
            raise ConfigError(f"{where} holds no private key with its certificate: it looks "
                              "like a truststore (ssl.truststore.location)")
        chain = (loaded.cert.certificate,
                 *(c.certificate for c in loaded.additional_certs))
        return KeyMaterial(loaded.key, chain)
    return _jks_key_material(data, found, settings, key_password)


def _jks_key_material(data: bytes, found: str, settings: StoreSettings,
                      key_password: str | None) -> KeyMaterial:
    jks = _jks_module()
    store = _load_jks(data, found, settings)
    where = f"{settings.option('location')}={settings.location}"
    if not store.private_keys:
        raise ConfigError(f"{where} holds no private key: it looks like a truststore "
                          "(ssl.truststore.location)")
    aliases = sorted(store.private_keys)
    if len(aliases) > 1:
        log.warning("%s holds %d private keys; using the one named %r", where, len(aliases),
                    aliases[0])
    entry = store.private_keys[aliases[0]]
    # Java: ssl.key.password, or the store password when it is not set.
    password = key_password if key_password is not None else settings.password
    if password is None:
        raise ConfigError(f"{where}: the key is protected by a password; set ssl.key.password "
                          f"(or {settings.option('password')} if they are the same)")
    try:
        entry.decrypt(password)
    except jks.util.DecryptionFailureException:
        which = "ssl.key.password" if key_password is not None else settings.option("password")
        raise ConfigError(f"cannot decrypt the key {aliases[0]!r} in {where}: {which} is wrong "
                          "for it (set ssl.key.password when the key has its own password)"
                          ) from None
    key = serialization.load_der_private_key(entry.pkey_pkcs8, password=None)
    chain = tuple(x509.load_der_x509_certificate(der) for _, der in entry.cert_chain)
    if not chain:
        raise ConfigError(f"{where}: the key {aliases[0]!r} has no certificate")
    return KeyMaterial(key, chain)


def pem_key(chain_text: str, key_text: str, key_password: str | None) -> KeyMaterial:
    """``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``: PEM text in the options."""
    return _pem_key_material(chain_text.encode(), key_text.encode(), key_password,
                             "ssl.keystore.certificate.chain", "ssl.keystore.key")


def _pem_key_material(chain_data: bytes, key_data: bytes, key_password: str | None,
                      chain_where: str, key_where: str) -> KeyMaterial:
    chain = tuple(x509.load_der_x509_certificate(der)
                  for der in _pem_certificates(chain_data, chain_where))
    if not chain:
        raise ConfigError(f"{chain_where} holds no PEM certificate (-----BEGIN "
                          "CERTIFICATE-----)")
    blocks = [item for item in _pem_blocks(key_data) if item[0] in _KEY_LABELS]
    if not blocks:
        raise ConfigError(f"{key_where} holds no PEM private key (-----BEGIN PRIVATE KEY-----)")
    label, block, headers = blocks[0]
    encrypted = label == b"ENCRYPTED PRIVATE KEY" or b"ENCRYPTED" in headers
    if encrypted and key_password is None:
        raise ConfigError(f"the private key in {key_where} is encrypted: set ssl.key.password")
    try:
        key = serialization.load_pem_private_key(
            block, password=key_password.encode() if encrypted and key_password else None)
    except (ValueError, TypeError):
        if encrypted:
            raise ConfigError(f"cannot decrypt the private key in {key_where}: ssl.key.password "
                              "is wrong for it") from None
        raise ConfigError(f"the private key in {key_where} is malformed") from None
    return KeyMaterial(key, chain)


# --- into an SSLContext ----------------------------------------------------------------------

def install_client_key(context: ssl.SSLContext, material: KeyMaterial) -> None:
    """``context.load_cert_chain`` for in-memory key material, leaving no key file behind.

    ``ssl`` reads keys from files only. The key goes into one (with the chain) encrypted under
    a random one-time password: an anonymous memory file where the OS has them (Linux), else
    a 0600 temporary file. Either is closed and deleted before this returns, whatever happens.
    """
    one_time_password = secrets.token_bytes(32)
    pem = material.key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(one_time_password))
    pem += b"".join(c.public_bytes(serialization.Encoding.PEM) for c in material.chain)
    with _key_file(pem) as path:
        context.load_cert_chain(path, password=one_time_password)


@contextlib.contextmanager
def _key_file(content: bytes) -> Iterator[str]:
    """A path whose file holds ``content`` while the block runs; gone afterwards."""
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None:
        fd = memfd_create("kafka_ds-tls-key", os.MFD_CLOEXEC)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, content)
            # /proc/self/fd/N reopens the memory file from its start; it never has a name on
            # any file system, and it is freed when the last descriptor closes.
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    # No anonymous files here (macOS, Windows): a temporary file, created 0600 by mkstemp,
    # holding the key encrypted under the one-time password, deleted at once after loading.
    fd, path = tempfile.mkstemp(prefix="kafka_ds-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(content)
        yield path
    finally:
        os.unlink(path)
