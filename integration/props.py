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
