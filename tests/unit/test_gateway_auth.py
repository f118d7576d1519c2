"""``SYMFONIC_GATEWAY_AUTH=jwt``: token verification, what a token grants, and the settings
that keep a gateway from serving without them (pure: no server)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from symfonic_stream.config import ConfigError, Settings, load_settings
from symfonic_stream.gateway.auth import (
    AuthError,
    TokenCheck,
    bearer,
    claimed_tenant,
    grant,
    queues,
    scopes,
)

SECRET = "s3cret-for-tests-only-0123456789abcdef"
SECRET_512 = SECRET * 2  # HS512 wants 64 bytes (HS256 is the only algorithm admitted)
AUDIENCE = "symfonic-gateway"


def _claims(**extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"tenant": "acme", "aud": AUDIENCE, "iat": now, "exp": now + 60, **extra}


def _hs(**overrides: Any) -> TokenCheck:
    settings = Settings(gateway_auth="jwt", gateway_jwt_key=SECRET,
                        **{"gateway_jwt_audience": AUDIENCE, **overrides})
    check = TokenCheck.from_settings(settings)
    assert check is not None
    return check


def test_no_auth_means_no_check() -> None:
    assert TokenCheck.from_settings(Settings()) is None


def test_a_valid_hs256_token_gives_its_claims() -> None:
    token = jwt.encode(_claims(), SECRET, algorithm="HS256")
    assert _hs().claims(token)["tenant"] == "acme"


@pytest.mark.parametrize("key", ["k", "x" * 31, "é" * 15])
def test_an_hs256_key_shorter_than_32_bytes_is_refused_at_start(key: str) -> None:
    """Issue 33: a 1-character key was accepted; one token is enough to guess it offline."""
    with pytest.raises(ConfigError, match="SYMFONIC_GATEWAY_JWT_KEY must be at least 32 bytes"
                       ) as refused:
        load_settings(gateway_auth="jwt", gateway_jwt_key=key, gateway_jwt_audience=AUDIENCE)
    assert len(key) == 1 or key not in str(refused.value)  # (one letter is in any text)
    load_settings(gateway_auth="jwt", gateway_jwt_key="x" * 32, gateway_jwt_audience=AUDIENCE)
    load_settings(gateway_auth="jwt", gateway_jwt_key="é" * 16,  # 32 bytes of UTF-8
                  gateway_jwt_audience=AUDIENCE)


def test_a_token_living_longer_than_the_maximum_is_refused() -> None:
    """Issue 33: ``exp`` 2**40 was accepted; exp - iat is bounded (an hour by default)."""
    now = int(time.time())
    check = _hs()
    assert check.max_lifetime_s == 3600
    assert check.claims(jwt.encode(_claims(iat=now - 10, exp=now - 10 + 3600), SECRET))
    for exp in (2**40, now + 3601):
        with pytest.raises(AuthError, match="lives longer") as refused:
            check.claims(jwt.encode(_claims(iat=now, exp=exp), SECRET, algorithm="HS256"))
        assert refused.value.status == 401
    day = _hs(gateway_jwt_max_lifetime_s=86_400)
    assert day.claims(jwt.encode(_claims(iat=now, exp=now + 86_400), SECRET, algorithm="HS256"))


def test_a_token_without_iat_or_issued_in_the_future_is_refused() -> None:
    now = int(time.time())
    no_iat = {"tenant": "acme", "exp": now + 60}
    future = _claims(iat=now + 600, exp=now + 900)
    for claims, why in ((no_iat, "iat"), (future, "not yet valid")):
        with pytest.raises(AuthError, match=why):
            _hs().claims(jwt.encode(claims, SECRET, algorithm="HS256"))


def test_jwt_needs_an_audience_exposed_or_not() -> None:
    """Issues 33 and 43: ``aud`` was optional unless the chart marked the gateway exposed,
    so behind a hand-made Ingress, a mesh or a route a token the same issuer minted for
    another service read the runs."""
    for exposed in (True, False):
        with pytest.raises(ConfigError, match="SYMFONIC_GATEWAY_JWT_AUDIENCE"):
            load_settings(gateway_auth="jwt", gateway_jwt_key=SECRET, gateway_exposed=exposed)
    check = TokenCheck.from_settings(load_settings(
        gateway_auth="jwt", gateway_jwt_key=SECRET, gateway_jwt_audience=AUDIENCE))
    assert check is not None
    with pytest.raises(AuthError, match="Audience"):
        check.claims(jwt.encode(_claims(aud="billing"), SECRET, algorithm="HS256"))
    with pytest.raises(AuthError, match="aud"):
        check.claims(jwt.encode({k: v for k, v in _claims().items() if k != "aud"}, SECRET,
                                algorithm="HS256"))


def test_an_exposed_gateway_without_auth_does_not_start_unless_meant() -> None:
    """Issue 43: only the chart refused it; the application started exposed, serving every
    tenant's runs to whoever reached it."""
    with pytest.raises(ConfigError, match="SYMFONIC_GATEWAY_ALLOW_UNAUTHENTICATED"):
        load_settings(gateway_exposed=True)
    load_settings(gateway_exposed=True, gateway_allow_unauthenticated=True)
    load_settings()  # not exposed: no auth is the operator's choice (a warning at start)


def test_a_token_without_a_scope_claim_has_no_right_unless_a_setting_grants_reading() -> None:
    """Issue 43: a token with no scope claim could read; now only with
    SYMFONIC_GATEWAY_UNSCOPED_TOKENS_READ, and never more than reading."""
    token = jwt.encode(_claims(sub="ana"), SECRET, algorithm="HS256")
    assert _hs().grant(token).scopes == frozenset()
    assert _hs(gateway_unscoped_tokens_read=True).grant(token).scopes == {"runs:read"}
    scoped = jwt.encode(_claims(scope="reviews:answer"), SECRET, algorithm="HS256")
    assert _hs(gateway_unscoped_tokens_read=True).grant(scoped).scopes == {"reviews:answer"}
    assert scopes({"scope": "runs:read reviews:answer"}) == {"runs:read", "reviews:answer"}
    assert scopes({"scp": ["reviews:answer", 7]}) == {"reviews:answer"}
    assert scopes({"scope": ["runs:read"]}, True) == frozenset()  # of another type: nothing


def test_a_token_names_the_queues_it_reviews() -> None:
    assert queues({"queues": ["payments", 7, "", "support"]}) == {"payments", "support"}
    for claims in ({}, {"queues": "payments"}, {"queues": None}):
        assert queues(claims) == frozenset()
    named = grant({"tenant": "acme", "queues": ["payments"]}, unscoped_read=False)
    assert named.reviews("payments") and not named.reviews("support")
    every = grant({"tenant": "acme", "queues": ["*"]}, unscoped_read=False)
    assert every.reviews("payments") and every.reviews("support")
    assert not grant({"tenant": "acme"}, unscoped_read=False).reviews("payments")


@pytest.mark.parametrize(("token", "why"), [
    (None, "required"),
    ("", "required"),
    ("not.a.jwt", "invalid token"),
    (jwt.encode(_claims(), "another-secret-another-secret-0123", algorithm="HS256"), "Signature"),
    (jwt.encode(_claims(exp=int(time.time()) - 5), SECRET, algorithm="HS256"), "expired"),
    (jwt.encode({"tenant": "acme"}, SECRET, algorithm="HS256"), "exp"),
    (jwt.encode(_claims(), SECRET_512, algorithm="HS512"), "alg"),
], ids=["none", "empty", "not-a-jwt", "another-key", "expired", "no-exp", "another-alg"])
# (ids of our own: a token carries the time it was made, and pytest-xdist's workers, which
# each collect the tests, must name them alike)
def test_bad_tokens_are_401(token: str | None, why: str) -> None:
    with pytest.raises(AuthError, match=why) as refused:
        _hs().claims(token)
    assert refused.value.status == 401


def test_audience_and_issuer_are_checked_when_set() -> None:
    check = _hs(gateway_jwt_audience="ui", gateway_jwt_issuer="idp")
    good = jwt.encode(_claims(aud="ui", iss="idp"), SECRET, algorithm="HS256")
    assert check.claims(good)["aud"] == "ui"
    for bad in (_claims(aud="other", iss="idp"), _claims(aud="ui", iss="other"),
                _claims(aud="ui")):
        with pytest.raises(AuthError):
            check.claims(jwt.encode(bad, SECRET, algorithm="HS256"))


def _rsa_jwks(tmp_path: Path) -> tuple[rsa.RSAPrivateKey, Path]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [{**public, "kid": "k1", "alg": "RS256", "use": "sig"}]}))
    return key, path


def test_jwks_tokens_are_verified_by_kid(tmp_path: Path) -> None:
    key, path = _rsa_jwks(tmp_path)
    check = TokenCheck.from_settings(Settings(gateway_auth="jwt", gateway_jwks_file=path,
                                                gateway_jwt_audience=AUDIENCE))
    assert check is not None
    token = jwt.encode(_claims(), key, algorithm="RS256", headers={"kid": "k1"})
    assert check.claims(token)["tenant"] == "acme"
    with pytest.raises(AuthError, match="kid"):
        check.claims(jwt.encode(_claims(), key, algorithm="RS256", headers={"kid": "k2"}))


def test_a_jwks_public_key_used_as_an_hmac_secret_is_refused(tmp_path: Path) -> None:
    key, path = _rsa_jwks(tmp_path)
    check = TokenCheck.from_settings(Settings(gateway_auth="jwt", gateway_jwks_file=path,
                                                gateway_jwt_audience=AUDIENCE))
    assert check is not None
    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(AuthError, match="invalid token"):
        check.claims(_forge_hs256(pem))


def _forge_hs256(secret: bytes) -> str:
    """An HS256 token signed with ``secret`` (PyJWT refuses a PEM as an HMAC key, so it
    is signed by hand, as an attacker would)."""
    import base64
    import hashlib
    import hmac

    def b64(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    body = b64(json.dumps(_claims()).encode())
    signature = b64(hmac.new(secret, head + b"." + body, hashlib.sha256).digest())
    return (head + b"." + body + b"." + signature).decode()


def test_a_file_that_is_no_jwks_fails_at_start(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"keys": "nope"}')
    with pytest.raises(ValueError, match="SYMFONIC_GATEWAY_JWKS_FILE"):
        TokenCheck.from_settings(Settings(gateway_auth="jwt", gateway_jwks_file=path,
                                                gateway_jwt_audience=AUDIENCE))


def test_jwt_needs_exactly_one_key_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="SYMFONIC_GATEWAY_JWT_KEY"):
        load_settings(gateway_auth="jwt", gateway_jwt_audience=AUDIENCE)
    path = tmp_path / "jwks.json"
    path.write_text('{"keys": []}')
    with pytest.raises(ConfigError, match="exactly one"):
        load_settings(gateway_auth="jwt", gateway_jwt_key=SECRET, gateway_jwks_file=path,
                      gateway_jwt_audience=AUDIENCE)


def test_a_bad_jwt_key_value_is_never_shown() -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(gateway_auth="jwt", gateway_jwt_key=["not", "a", "string"],
                      gateway_jwt_audience=AUDIENCE)
    assert "not" not in str(refused.value).replace("not a valid", "")
    assert "<secret>" in str(refused.value)


def test_the_tenant_claim_is_a_string_or_nothing() -> None:
    assert claimed_tenant({"tenant": "acme"}) == "acme"
    for claims in ({}, {"tenant": ["acme"]}, {"tenant": 7}, {"tenant": None}):
        assert claimed_tenant(claims) is None


@pytest.mark.parametrize(("header", "query", "token"), [
    ("Bearer abc", None, "abc"), ("bearer  abc ", None, "abc"), (None, "q", "q"),
    ("Basic xyz", "q", "q"), ("Bearer ", None, None), (None, None, None), (None, "", None),
])
def test_bearer(header: str | None, query: str | None, token: str | None) -> None:
    assert bearer(header, query) == token
