"""Security settings from Java-style properties: what is refused, warned about and hidden."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path

import pytest

from kafka_ds.client.config import ClientConfig, is_sensitive, redact
from kafka_ds.client.fetch_config import FetchConfig
from kafka_ds.net.oauth import TokenCallable, TokenFile, UnsecuredJws
from kafka_ds.protocol.errors import ConfigError, NetworkError
from kafka_ds.spark.options import is_secret

SSL = {"bootstrap.servers": "broker:9093", "security.protocol": "SSL"}
JAAS_PLAIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required ' \
             'username="u" password="hunter2";'
TOKEN = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJtZSJ9."
calls: list[str] = []


def next_token() -> str:
    """A token provider named by ``sasl.oauthbearer.token.provider`` in the tests below."""
    calls.append("called")
    return f"{TOKEN}{len(calls)}"


def _oauth(**extra: str) -> dict[str, str]:
    return {"bootstrap.servers": "broker:9092", "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER", **extra}


# --- ssl.endpoint.identification.algorithm ---------------------------------------------

@pytest.mark.parametrize("value", ["htps", "http", "none", "HTTP", "false", "0"])
def test_an_unknown_endpoint_identification_algorithm_is_refused(value: str) -> None:
    # Only an empty value turns hostname checks off, as in Java: a typo must not.
    with pytest.raises(ConfigError, match=r"ssl\.endpoint\.identification\.algorithm"):
        ClientConfig.from_properties({**SSL, "ssl.endpoint.identification.algorithm": value})


@pytest.mark.parametrize(("value", "checked"), [("https", True), ("HTTPS", True),
                                                (" https ", True), ("", False), ("  ", False)])
def test_https_checks_hostnames_and_only_empty_turns_it_off(value: str, checked: bool) -> None:
    config = ClientConfig.from_properties({**SSL, "ssl.endpoint.identification.algorithm": value})
    assert config.connection.tls is not None
    assert config.connection.tls.check_hostname is checked
    assert ClientConfig.from_properties(SSL).connection.tls.check_hostname  # the default


# --- settings that cannot take effect ------------------------------------------------------

def test_plain_over_plaintext_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    props = {"bootstrap.servers": "b:1", "security.protocol": "SASL_PLAINTEXT",
             "sasl.mechanism": "PLAIN", "sasl.jaas.config": JAAS_PLAIN}
    with caplog.at_level(logging.WARNING, logger="kafka_ds"):
        ClientConfig.from_properties(props)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("PLAIN" in w and "SASL_SSL" in w for w in warnings), warnings
    assert not any("hunter2" in w for w in warnings)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kafka_ds"):
        ClientConfig.from_properties({**props, "security.protocol": "SASL_SSL"})
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


SCRAM_SETTINGS = {"sasl.mechanism": "SCRAM-SHA-256",
                  "sasl.jaas.config": JAAS_PLAIN.replace("plain.Plain", "scram.Scram")}


@pytest.mark.parametrize(("protocol", "settings", "ignored", "suggestion"), [
    ("PLAINTEXT", {"ssl.truststore.location": "/ca.pem"}, ["ssl.truststore.location"], "SSL"),
    ("PLAINTEXT", SCRAM_SETTINGS, ["sasl.jaas.config", "sasl.mechanism"], "SASL_PLAINTEXT"),
    ("SSL", {"sasl.mechanism": "PLAIN"}, ["sasl.mechanism"], "SASL_SSL"),
    ("SASL_PLAINTEXT", {**SCRAM_SETTINGS, "ssl.truststore.location": "/ca.pem"},
     ["ssl.truststore.location"], "SASL_SSL"),
])
def test_security_settings_the_protocol_does_not_use_are_warned_about(
        caplog: pytest.LogCaptureFixture, protocol: str, settings: dict[str, str],
        ignored: list[str], suggestion: str) -> None:
    props = {"bootstrap.servers": "b:1", "security.protocol": protocol, **settings}
    with caplog.at_level(logging.WARNING, logger="kafka_ds"):
        ClientConfig.from_properties(props)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"have no effect: {', '.join(ignored)}." in warnings[0]
    assert f"security.protocol={suggestion}?" in warnings[0]
    assert "hunter2" not in warnings[0]


def test_the_fetcher_reports_unknown_properties(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kafka_ds"):
        FetchConfig.from_properties({"bootstrap.servers": "b:1", "fetch.max.wait.ms": "10",
                                     "fetch.mxa.bytes": "5", "security.protocol": "PLAINTEXT"})
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "fetch.mxa.bytes" in warnings[0], warnings
    assert "fetch.max.wait.ms" not in warnings[0] and "bootstrap.servers" not in warnings[0]


# --- secrets --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "sasl.jaas.config", "sasl.password", "ssl.key.password", "ssl.keystore.key",
    "sasl.oauthbearer.token", "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.assertion.private.key.passphrase", "basic.auth.user.info",
    "SSL.KEYSTORE.PASSWORD", "ssl.truststore.certificates", "some.vendor.secret",
])
def test_secret_properties_are_recognised(name: str) -> None:
    assert is_sensitive(name) and is_secret(f"kafka.{name}")
    assert redact({name: "s3cr3t", "client.id": "app"}) == {name: "[redacted]",
                                                             "client.id": "app"}


@pytest.mark.parametrize("name", ["bootstrap.servers", "sasl.mechanism", "security.protocol",
                                  "sasl.oauthbearer.token.endpoint.url",
                                  "ssl.truststore.location"])
def test_ordinary_properties_are_shown(name: str) -> None:
    assert not is_sensitive(name)


def test_the_debug_log_of_a_configuration_hides_its_secrets(
        caplog: pytest.LogCaptureFixture) -> None:
    props = {"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL",
             "sasl.mechanism": "PLAIN", "sasl.jaas.config": JAAS_PLAIN,
             "ssl.key.password": "keypass-42"}
    with caplog.at_level(logging.DEBUG, logger="kafka_ds"):
        ClientConfig.from_properties(props)
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "sasl.jaas.config" in text and "[redacted]" in text  # the log line is there ...
    assert "hunter2" not in text and "keypass-42" not in text  # ... without the secrets


# --- OAUTHBEARER token sources ----------------------------------------------------------------

def test_a_token_file_is_read_again_each_time(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN + "1\n")
    config = ClientConfig.from_properties(_oauth(**{
        "sasl.oauthbearer.token.endpoint.url": f"file:{path}"}))
    sasl = config.connection.sasl
    assert sasl is not None and sasl.oauth_token_source == TokenFile(str(path))
    assert b"Bearer " + (TOKEN + "1").encode() in sasl.new_mechanism().first_message()
    path.write_text(TOKEN + "2")  # rotated in place by an agent
    assert b"Bearer " + (TOKEN + "2").encode() in sasl.new_mechanism().first_message()
    path.unlink()  # mid-rotation: a retriable error naming the file, not a crash
    with pytest.raises(NetworkError, match="token file"):
        sasl.new_mechanism()
    assert TOKEN not in repr(config)


def test_a_token_file_url_of_the_java_form_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "my token"
    path.write_text(TOKEN)
    assert TokenFile.from_url(f"file://{tmp_path}/my%20token").token() == TOKEN
    assert TokenFile.from_url(f"file:{path}").path == str(path)


@pytest.mark.parametrize(("url", "message"), [
    ("https://idp.example.com/token", "HTTP"),
    ("file:/no/such/token", "cannot read"),
])
def test_an_unusable_token_url_fails_at_configuration_time(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ClientConfig.from_properties(_oauth(**{"sasl.oauthbearer.token.endpoint.url": url}))


def test_a_token_provider_function_is_called_at_each_authentication() -> None:
    config = ClientConfig.from_properties(_oauth(**{
        "sasl.oauthbearer.token.provider": f"{__name__}:next_token"}))
    sasl = config.connection.sasl
    assert sasl is not None
    before = len(calls)
    first = sasl.new_mechanism().first_message()
    second = sasl.new_mechanism().first_message()
    assert len(calls) == before + 2 and first != second


@pytest.mark.parametrize("bad", ["tok en", "tok\x01auth=Bearer x", "", "tök"])
def test_a_token_with_characters_a_bearer_token_cannot_hold_is_refused(bad: str) -> None:
    # The token sits between 0x01 separators: a stray one would smuggle in SASL extensions.
    with pytest.raises(ConfigError, match="bearer token"):
        TokenCallable(lambda: bad).token()


def test_token_provider_errors_name_the_property() -> None:
    with pytest.raises(ConfigError, match=r"sasl\.oauthbearer\.token\.provider"):
        ClientConfig.from_properties(_oauth(**{
            "sasl.oauthbearer.token.provider": "no_such_module_xyz:token"}))
    with pytest.raises(ConfigError, match="keep one"):
        ClientConfig.from_properties(_oauth(**{
            "sasl.oauthbearer.token.provider": f"{__name__}:next_token",
            "sasl.oauthbearer.token": TOKEN}))
    with pytest.raises(ConfigError, match=r"sasl\.login\.callback\.handler\.class"):
        ClientConfig.from_properties(_oauth(**{
            "sasl.login.callback.handler.class": "com.example.MyHandler",
            "sasl.oauthbearer.token": TOKEN}))


def _claims(token: str) -> dict[str, int | str]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def test_the_unsecured_token_is_minted_afresh_with_the_configured_lifetime(
        monkeypatch: pytest.MonkeyPatch) -> None:
    config = ClientConfig.from_properties(_oauth(**{"sasl.jaas.config": (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredLoginStringClaim_sub="dev" unsecuredLoginLifetimeSeconds="120";')}))
    sasl = config.connection.sasl
    assert sasl is not None and sasl.oauth_token_source == UnsecuredJws("dev", 120)
    now = [1_700_000_000.0]
    monkeypatch.setattr("kafka_ds.net.oauth.time.time", lambda: now[0])
    first = _claims(sasl.current_token())
    now[0] += 3600  # an hour later, long after the first token expired
    second = _claims(sasl.current_token())
    assert first == {"iat": 1_700_000_000, "exp": 1_700_000_120, "sub": "dev"}
    assert second["exp"] == 1_700_003_720 and second["sub"] == "dev"


def test_a_failing_token_provider_is_a_retriable_error_naming_it() -> None:
    def unreachable() -> str:
        raise TimeoutError("identity service did not answer")

    with pytest.raises(NetworkError, match=r"token\.provider.*TimeoutError"):
        TokenCallable(unreachable).token()


# --- Kerberos (GSSAPI) ----------------------------------------------------------------------

KRB5 = "com.sun.security.auth.module.Krb5LoginModule required"


def _kerberos(jaas: str, **extra: str) -> dict[str, str]:
    return {"bootstrap.servers": "broker:9092", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "GSSAPI", "sasl.jaas.config": jaas, **extra}


def test_a_java_kerberos_config_is_read_as_java_writes_it(tmp_path: Path) -> None:
    pytest.importorskip("gssapi", reason="the kerberos extra (gssapi) is not installed")
    keytab = tmp_path / "client.keytab"
    keytab.write_bytes(b"\x05\x02")
    config = ClientConfig.from_properties(_kerberos(
        f'{KRB5} useKeyTab=true storeKey=true keyTab="{keytab}" principal="app@EXAMPLE.COM";',
        **{"sasl.kerberos.service.name": "kafka"}))
    sasl = config.connection.sasl
    assert sasl is not None and sasl.kerberos is not None
    assert (sasl.kerberos.service_name, sasl.kerberos.principal, sasl.kerberos.keytab,
            sasl.kerberos.use_keytab) == ("kafka", "app@EXAMPLE.COM", str(keytab), True)
    assert sasl.identity == "app@EXAMPLE.COM"
    # The JAAS serviceName option works too, as in Java.
    config = ClientConfig.from_properties(_kerberos(f"{KRB5} useTicketCache=true "
                                                    'serviceName="kafka";'))
    assert config.connection.sasl is not None and config.connection.sasl.kerberos is not None
    assert config.connection.sasl.kerberos.use_ticket_cache


@pytest.mark.parametrize(("properties", "problem"), [
    (_kerberos(f'{KRB5} useKeyTab=true principal="a@R";'), r"sasl\.kerberos\.service\.name"),
    (_kerberos(f'{KRB5} principal="a@R";', **{"sasl.kerberos.service.name": "kafka"}),
     "useKeyTab=true .* or useTicketCache=true"),
    (_kerberos(f'{KRB5} useKeyTab=true keyTab="/k";', **{"sasl.kerberos.service.name": "kafka"}),
     "useKeyTab=true but no principal"),
    (_kerberos(f'{KRB5} useKeyTab=true keyTab="/no/such.keytab" principal="a@R";',
               **{"sasl.kerberos.service.name": "kafka"}), r"keyTab=/no/such\.keytab"),
    (_kerberos(f'{KRB5} useTicketCache=true serviceName="kafka";',
               **{"sasl.kerberos.service.name": "other"}), "differ"),
    (_kerberos(JAAS_PLAIN), "goes with com.sun.security.auth.module.Krb5LoginModule"),
    ({**_kerberos(f"{KRB5} useTicketCache=true;"), "sasl.mechanism": "PLAIN"},
     "goes with com.sun.security.auth.module.Krb5LoginModule"),
    ({"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL"},
     "sasl.mechanism=GSSAPI with a missing sasl.jaas.config"),
])
def test_kerberos_settings_java_refuses_are_refused(properties: dict[str, str],
                                                   problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        ClientConfig.from_properties(properties)


def test_gssapi_without_the_gssapi_package_names_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_gssapi(name: str, *args: object, **kwargs: object) -> object:
        if name == "gssapi":
            raise ImportError("No module named 'gssapi'")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_gssapi)
    with pytest.raises(ConfigError, match=r"pip install 'kafka-ds\[kerberos\]'"):
        ClientConfig.from_properties(_kerberos(f"{KRB5} useTicketCache=true;",
                                               **{"sasl.kerberos.service.name": "kafka"}))
