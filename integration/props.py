"""kafka_ds client properties for a harness cluster listener.

The harness describes each listener neutrally (``KafkaCluster.client_config``); this turns that
into the Java-style properties kafka_ds reads (``ClientConfig.from_properties``), the same
names a Spark user passes as ``kafka.*`` options. Differences from the JVM client's config:
TLS material is PEM (a client key and certificate go in one PEM file, as Java's
``ssl.keystore.type=PEM`` expects).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from integration.harness.cluster import KafkaCluster
from integration.harness.tls import TlsMaterial

JAAS = "org.apache.kafka.common.security"


def kafka_ds_properties(cluster: KafkaCluster, listener: str = "PLAINTEXT",
                        **kwargs: Any) -> dict[str, str]:
    """Properties for ``listener``; kwargs as for ``client_config`` (mechanism, password...)."""
    cfg = cluster.client_config(listener, **kwargs)
    props = {"bootstrap.servers": cfg["bootstrap_servers"],
             "security.protocol": cfg["security_protocol"]}
    mechanism = cfg.get("sasl_mechanism")
    if mechanism == "OAUTHBEARER":
        props.update({"sasl.mechanism": mechanism, "sasl.oauthbearer.token": cfg["oauth_token"]})
    elif mechanism:
        module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
        props.update({
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": f'{JAAS}.{module} required username="{cfg["sasl_username"]}" '
                                f'password="{cfg["sasl_password"]}";',
        })
    if "ssl_cafile" in cfg:
        props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": cfg["ssl_cafile"]})
    if "ssl_certfile" in cfg:
        combined = Path(cfg["ssl_certfile"]).with_name("client-combined.pem")
        if not combined.exists():
            combined.write_text(Path(cfg["ssl_certfile"]).read_text()
                                + Path(cfg["ssl_keyfile"]).read_text())
        props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(combined)})
    return props


STORE_KINDS = ("keytool-pkcs12", "keytool-jks", "default-type", "pem-files", "pem-strings")


def java_tls_stores(material: TlsMaterial, kind: str) -> dict[str, str]:
    """The Java client's ``ssl.*`` settings for one kind of store: a truststore holding the
    harness CA and a keystore holding the MTLS client's key and certificate.

    keytool-pkcs12 / keytool-jks: stores written by the JDK's keytool (the JKS key has its own
    ``ssl.key.password``); default-type: no ``*.type`` (Java's default, JKS, reads JKS and
    PKCS12 files); pem-files: ``type=PEM`` files; pem-strings: PEM text in the options, the CA
    on one line as a properties file often has it.
    """
    password = material.password
    stores = {
        "keytool-pkcs12": {
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(material.broker_truststore_p12),
            "ssl.truststore.password": password,
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(material.client_keystore_keytool_p12),
            "ssl.keystore.password": password, "ssl.key.password": password},
        "keytool-jks": {
            "ssl.truststore.type": "JKS",
            "ssl.truststore.location": str(material.truststore_jks),
            "ssl.truststore.password": password,
            "ssl.keystore.type": "JKS",
            "ssl.keystore.location": str(material.client_keystore_jks),
            "ssl.keystore.password": password, "ssl.key.password": material.key_password},
        "default-type": {
            "ssl.truststore.location": str(material.truststore_jks),
            "ssl.keystore.location": str(material.client_keystore_p12),
            "ssl.keystore.password": password},
        "pem-files": {
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(material.ca_pem),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(material.client_combined_pem)},
        "pem-strings": {
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": " ".join(Path(material.ca_pem).read_text().split("\n")),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": Path(material.client_cert_pem).read_text(),
            "ssl.keystore.key": Path(material.client_key_pem).read_text()},
    }
    return stores[kind]
