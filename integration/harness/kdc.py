"""A throwaway MIT Kerberos KDC on 127.0.0.1 for the GSSAPI listener of a test cluster.

``start_kdc(directory)`` makes a realm (``REALM``) in ``directory``: ``kdc.conf`` and a
database, a ``krb5.conf`` for clients and brokers (``KRB5_CONFIG`` / ``-Djava.security.krb5.conf``),
keytabs for the broker principal ``kafka/127.0.0.1`` and the client principals, then runs
``krb5kdc`` in the foreground on a free TCP port until ``Kdc.stop()``.

The programs come from Debian's ``krb5-kdc`` and ``krb5-admin-server`` (``kadmin.local``).
When they are missing and this process may install packages (root, ``apt-get`` present, not
``KAFKA_DS_NO_APT``), they are installed with ``apt-get``; otherwise ``KdcUnavailable`` says why,
and the GSSAPI tests skip with that reason (``KAFKA_DS_REQUIRE_KERBEROS=1``, set by CI, turns
the skip into a failure).

``krb5.conf`` turns off what would make a loopback test depend on DNS: realm and KDC lookups
and host name canonicalisation (the broker principal is named by the address clients dial,
127.0.0.1), and asks for TCP (``udp_preference_limit = 1``), the only port the KDC listens on.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from . import procs

REALM = "KAFKA-DS.TEST"
SERVICE_NAME = "kafka"
BROKER_HOST = "127.0.0.1"
BROKER_PRINCIPAL = f"{SERVICE_NAME}/{BROKER_HOST}@{REALM}"
CLIENT_PRINCIPAL = f"kafka-ds-client@{REALM}"
# A second client with its own keytab, and one the KDC knows but whose keytab holds stale keys
# (re-keyed after export): proves a wrong key is refused.
OTHER_PRINCIPAL = f"kafka-ds-other@{REALM}"
STALE_PRINCIPAL = f"kafka-ds-stale@{REALM}"
_PACKAGES = ("krb5-kdc", "krb5-admin-server")
_SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")


class KdcUnavailable(RuntimeError):
    """No KDC can run here; the message says why (used as the GSSAPI tests' skip reason)."""


@dataclass
class Kdc:
    """A running KDC and the files clients and brokers need."""

    directory: Path
    port: int
    krb5_conf: Path
    broker_keytab: Path
    client_keytab: Path
    other_keytab: Path
    stale_keytab: Path
    process: subprocess.Popen[bytes] | None = None
    realm: str = REALM

    def stop(self) -> None:
        if self.process is not None:
            procs.terminate([self.process], timeout_s=5.0)
            self.process = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = (self.directory / "kdc.log").read_text(errors="replace")
        except OSError:
            return "(no kdc.log)"
        return "\n".join(text.splitlines()[-lines:])


def _program(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for directory in _SBIN:
        candidate = Path(directory) / name
        if candidate.exists():
            return str(candidate)
    return None


def _missing() -> list[str]:
    return [name for name in ("krb5kdc", "kdb5_util", "kadmin.local") if _program(name) is None]


def ensure_installed() -> None:
    """Install the KDC packages with apt-get when they are missing and that is possible."""
    if not _missing():
        return
    why = None
    if os.environ.get("KAFKA_DS_NO_APT"):
        why = "KAFKA_DS_NO_APT is set"
    elif shutil.which("apt-get") is None:
        why = "apt-get is not available"
    elif os.geteuid() != 0:
        why = "installing packages needs root"
    if why is None:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        command = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *_PACKAGES]
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:  # a stale package list: refresh it once and retry
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True,
                           check=False)
            result = subprocess.run(command, env=env, capture_output=True, text=True,
                                    check=False)
        if result.returncode != 0:
            why = f"apt-get install {' '.join(_PACKAGES)} failed: {result.stderr[-500:]}"
    missing = _missing()
    if missing:
        raise KdcUnavailable(f"no MIT Kerberos KDC ({', '.join(missing)} not found: install "
                             f"{' and '.join(_PACKAGES)}); {why or 'installed, still missing'}")


def _env(directory: Path) -> dict[str, str]:
    return {**os.environ, "KRB5_CONFIG": str(directory / "krb5.conf"),
            "KRB5_KDC_PROFILE": str(directory / "kdc.conf")}


def _run(directory: Path, *command: str) -> None:
    result = subprocess.run([_program(command[0]) or command[0], *command[1:]],
                            env=_env(directory), cwd=directory, capture_output=True, text=True,
                            check=False, timeout=60)
    if result.returncode != 0:
        raise KdcUnavailable(f"{' '.join(command)} failed (exit {result.returncode}): "
                             f"{(result.stdout + result.stderr)[-1000:]}")


def _write_configs(directory: Path, port: int) -> None:
    (directory / "krb5.conf").write_text(f"""\
[libdefaults]
    default_realm = {REALM}
    dns_lookup_realm = false
    dns_lookup_kdc = false
    dns_canonicalize_hostname = false
    rdns = false
    udp_preference_limit = 1
    ticket_lifetime = 24h
    renew_lifetime = 7d
    forwardable = true

[realms]
    {REALM} = {{
        kdc = 127.0.0.1:{port}
        admin_server = 127.0.0.1:{port}
    }}

[domain_realm]
    127.0.0.1 = {REALM}
    localhost = {REALM}
""")
    (directory / "kdc.conf").write_text(f"""\
[kdcdefaults]
    kdc_listen = 127.0.0.1:{port}
    kdc_tcp_listen = 127.0.0.1:{port}

[realms]
    {REALM} = {{
        database_name = {directory}/principal
        key_stash_file = {directory}/stash
        acl_file = {directory}/kadm5.acl
        max_life = 24h
        max_renewable_life = 7d
        supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
    }}

[logging]
    kdc = FILE:{directory}/kdc.log
""")
    (directory / "kadm5.acl").write_text("")


def _wait_listening(port: int, process: subprocess.Popen[bytes], directory: Path,
                    timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise KdcUnavailable(f"krb5kdc exited with {process.returncode}: "
                                 f"{(directory / 'krb5kdc.out').read_text(errors='replace')}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise KdcUnavailable(f"krb5kdc did not listen on 127.0.0.1:{port} within {timeout_s:.0f}s")


def start_kdc(directory: Path) -> Kdc:
    """Create a realm in ``directory`` and start its KDC; ``KdcUnavailable`` if impossible."""
    from .nodeconf import free_ports  # (nodeconf -> listeners -> this module)

    ensure_installed()
    directory.mkdir(parents=True, exist_ok=True)
    port = free_ports(1)[0]
    _write_configs(directory, port)
    _run(directory, "kdb5_util", "-r", REALM, "create", "-s", "-W", "-P",
         os.urandom(16).hex())
    keytabs = {BROKER_PRINCIPAL: "broker.keytab", CLIENT_PRINCIPAL: "client.keytab",
               OTHER_PRINCIPAL: "other.keytab", STALE_PRINCIPAL: "stale.keytab"}
    queries = []
    for principal, keytab in keytabs.items():
        queries += [f"addprinc -randkey {principal}", f"ktadd -k {directory / keytab} {principal}"]
    queries.append(f"cpw -randkey {STALE_PRINCIPAL}")  # the exported keys are now stale
    for query in queries:
        _run(directory, "kadmin.local", "-r", REALM, "-q", query)
    for keytab in keytabs.values():
        (directory / keytab).chmod(0o600)
    process = procs.spawn([_program("krb5kdc") or "krb5kdc", "-n", "-r", REALM],
                          directory / "krb5kdc.out", cwd=directory, env=_env(directory))
    kdc = Kdc(directory=directory, port=port, krb5_conf=directory / "krb5.conf",
              broker_keytab=directory / "broker.keytab", client_keytab=directory / "client.keytab",
              other_keytab=directory / "other.keytab", stale_keytab=directory / "stale.keytab",
              process=process)
    try:
        _wait_listening(port, process, directory)
    except BaseException:
        kdc.stop()
        raise
    return kdc


def jaas(principal: str, keytab: Path) -> str:
    """A ``Krb5LoginModule`` JAAS entry as Java users write it (broker and client alike)."""
    return ("com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
            f'storeKey=true keyTab="{keytab}" principal="{principal}";')
