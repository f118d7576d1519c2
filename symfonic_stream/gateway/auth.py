"""Who may do what (``SYMFONIC_GATEWAY_AUTH=jwt``): a bearer token, verified, and what it
grants (:class:`Grant`): its tenant, its subject, its scopes and the review queues it names.

The token comes in ``Authorization: Bearer <token>``; only the ``GET`` streams (what a
browser's ``EventSource`` opens, unable to set headers) also take ``?access_token=`` (the
gateway keeps no access log). It is verified with PyJWT: HS256 with
``SYMFONIC_GATEWAY_JWT_KEY``, or the asymmetric algorithms of the keys in
``SYMFONIC_GATEWAY_JWKS_FILE``, picked by ``kid`` (a JWKS never admits an HMAC algorithm: a
public key used as an HMAC secret is the classic forgery). It must carry ``exp`` and ``iat``,
live at most ``SYMFONIC_GATEWAY_JWT_MAX_LIFETIME_S`` (``exp - iat``), and carry the
configured ``aud`` (required with ``jwt``: config.py) and ``iss`` (when configured). A run's
tenant is the ``symfonic-tenant`` header of its records (:mod:`.runs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jwt

from symfonic_stream.config import Settings

#: What a JWKS key may sign with; never ``none``, never an HMAC.
ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
              "ES512", "EdDSA")


class AuthError(Exception):
    """A refused request: ``status`` 401 (no valid token). A token of another tenant than
    the run's is not refused here: the run is then as unknown to it (404, after the wait)."""

    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class TokenCheck:
    """Verifies tokens against the gateway's key (an HS256 secret) or its JWKS."""

    secret: str | None
    jwks: jwt.PyJWKSet | None
    audience: str | None
    issuer: str | None
    max_lifetime_s: float
    #: ``SYMFONIC_GATEWAY_UNSCOPED_TOKENS_READ``: see :func:`grant`.
    unscoped_read: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenCheck | None:
        """None when ``SYMFONIC_GATEWAY_AUTH=none``; raises ValueError naming the setting
        when the JWKS file is not a JWKS."""
        if settings.gateway_auth == "none":
            return None
        jwks = None
        if settings.gateway_jwks_file is not None:
            try:
                jwks = jwt.PyJWKSet.from_json(settings.gateway_jwks_file.read_text())
            except (OSError, ValueError, jwt.PyJWTError) as exc:
                raise ValueError(f"SYMFONIC_GATEWAY_JWKS_FILE: not a usable JWKS: {exc}") from None
        secret = settings.gateway_jwt_key
        return cls(secret.get_secret_value() if secret is not None else None, jwks,
                   settings.gateway_jwt_audience, settings.gateway_jwt_issuer,
                   settings.gateway_jwt_max_lifetime_s, settings.gateway_unscoped_tokens_read)

    def grant(self, token: str | None) -> Grant:
        """What ``token`` may do, or :class:`AuthError` (401) when it is no valid token."""
        return grant(self.claims(token), unscoped_read=self.unscoped_read)

    def claims(self, token: str | None) -> dict[str, Any]:
        """The verified claims of ``token``, or :class:`AuthError` (401)."""
        if not token:
            raise AuthError(401, "unauthorized", "a bearer token is required")
        try:
            key, algorithms = self._key_for(token)
            claims: dict[str, Any] = jwt.decode(
                token, key, algorithms=algorithms, audience=self.audience, issuer=self.issuer,
                options={"require": ["exp", "iat"], "verify_aud": self.audience is not None})
        except jwt.PyJWTError as exc:
            raise AuthError(401, "unauthorized", f"invalid token: {exc}") from None
        # PyJWT has checked that both are integers (as int() reads them) and that iat is
        # not in the future; the lifetime is the issuer's promise, bounded here.
        if int(claims["exp"]) - int(claims["iat"]) > self.max_lifetime_s:
            raise AuthError(401, "unauthorized", "invalid token: it lives longer (exp - iat) "
                            f"than {self.max_lifetime_s:g} s")
        return claims

    def _key_for(self, token: str) -> tuple[Any, list[str]]:
        if self.secret is not None:
            return self.secret, ["HS256"]
        assert self.jwks is not None
        kid = jwt.get_unverified_header(token).get("kid")
        matching = [k for k in self.jwks.keys if k.key_id == kid]
        if not matching:
            raise jwt.InvalidKeyError(f"no key with kid {str(kid)[:40]!r} in the JWKS")
        key = matching[0]
        algorithm = key.algorithm_name
        allowed = [algorithm] if algorithm in ASYMMETRIC else list(ASYMMETRIC)
        return key.key, allowed


def bearer(authorization: str | None, access_token: str | None = None) -> str | None:
    """The token of ``Authorization: Bearer <token>``, else of ``?access_token=`` (which
    only a ``GET`` stream passes on)."""
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return access_token or None


#: Reading a run (its stream, GET or an AG-UI POST without ``resume``).
READ_RUNS = "runs:read"
#: Answering and claiming tickets: an AG-UI ``resume``, the review console.
ANSWER_REVIEWS = "reviews:answer"
#: The claim naming the review queues a token may review (a list of queue names).
QUEUES_CLAIM = "queues"
#: In :data:`QUEUES_CLAIM`: every queue of the token's tenant.
EVERY_QUEUE = "*"
#: A subject is compared with a claim's holder and recorded with each answer: a name.
MAX_SUBJECT = 256


@dataclass(frozen=True, slots=True)
class Grant:
    """What one verified token may do (docs/gateway.md, "Who may read", "Answering a
    pause")."""

    #: The ``tenant`` claim when a string (None: the token reads no run).
    tenant: str | None
    #: The ``sub`` claim when a short string: who answers (the answer's ``responder``).
    subject: str | None
    scopes: frozenset[str]
    #: The queues whose tickets it may list, claim and answer (:data:`QUEUES_CLAIM`).
    queues: frozenset[str]

    def reviews(self, queue: str) -> bool:
        """Whether it reviews ``queue`` (a queue of its tenant's: the caller has checked
        the ticket's tenant)."""
        return EVERY_QUEUE in self.queues or queue in self.queues


def grant(claims: dict[str, Any], *, unscoped_read: bool) -> Grant:
    """What ``claims`` (verified) grant. ``unscoped_read``: a token with neither ``scope``
    nor ``scp`` may read runs (``SYMFONIC_GATEWAY_UNSCOPED_TOKENS_READ``); else it may do
    nothing."""
    return Grant(claimed_tenant(claims), subject(claims), scopes(claims, unscoped_read),
                 queues(claims))


def scopes(claims: dict[str, Any], unscoped_read: bool = False) -> frozenset[str]:
    """The token's scopes: OAuth's ``scope`` (space-separated, RFC 8693) or ``scp`` (a
    list). A token with neither has none, or ``runs:read`` with ``unscoped_read``; a scope
    claim of another type grants nothing."""
    scope, scp = claims.get("scope"), claims.get("scp")
    if isinstance(scope, str):
        return frozenset(scope.split())
    if isinstance(scp, list):
        return frozenset(s for s in scp if isinstance(s, str))
    if scope is None and scp is None and unscoped_read:
        return frozenset({READ_RUNS})
    return frozenset()


def queues(claims: dict[str, Any]) -> frozenset[str]:
    """The :data:`QUEUES_CLAIM`'s queue names (strings of a list; anything else: none)."""
    named = claims.get(QUEUES_CLAIM)
    if not isinstance(named, list):
        return frozenset()
    return frozenset(q for q in named if isinstance(q, str) and q)


def subject(claims: dict[str, Any]) -> str | None:
    """The token's ``sub`` (who answers: the answer's ``responder``), if a short string."""
    sub = claims.get("sub")
    return sub if isinstance(sub, str) and 0 < len(sub) <= MAX_SUBJECT else None


def claimed_tenant(claims: dict[str, Any]) -> str | None:
    """The token's ``tenant`` claim when it is a string; None: the token reads no run (a
    run whose tenant is the claim's is readable, docs/gateway.md "Who may read")."""
    claimed = claims.get("tenant")
    return claimed if type(claimed) is str else None
