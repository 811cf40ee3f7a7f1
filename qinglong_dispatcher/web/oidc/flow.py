"""The authorization code flow with PKCE (RFC 9700 §2.1.1): the provider found by its discovery
document, a pending sign-in per browser (state and nonce single-use, bound to a cookie), the
code redeemed at the token endpoint and the ID token verified with joserfc (signature by the
provider's published keys, issuer, audience, expiry and nonce; clock skew bounded).

joserfc is imported on the first verification only: it is the `[oidc]` extra, and an
installation without OIDC configured never loads it.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import hmac
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final
from urllib import parse

import aiohttp

from qinglong_dispatcher.web.oidc import mapping

LEEWAY_S: Final = 60
"""Clock skew allowed between this host and the provider (`exp`, `iat`, `nbf`)."""
PENDING_S: Final = 600.0
"""A sign-in must come back from the provider within this."""
MAX_PENDING: Final = 1024
"""Sign-ins begun and not yet back, at most (the oldest is forgotten first)."""
HTTP_TIMEOUT_S: Final = 10.0
ALGORITHMS: Final = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
                     "EdDSA")  # fmt: skip
"""Asymmetric signatures only: never `none`, never an HMAC keyed by the client secret."""

Refusal = mapping.Refusal


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


@dataclasses.dataclass(frozen=True, slots=True)
class Provider:
    """What the discovery document says."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    end_session_endpoint: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Pending:
    """A sign-in sent to the provider: what its return must match."""

    browser_sha256: str
    """The SHA-256 of the browser cookie it was begun with (the cookie's value stays there)."""
    nonce: str
    verifier: str
    next_path: str
    began_s: float


@dataclasses.dataclass(frozen=True, slots=True)
class Identity:
    """A verified ID token: its claims, and the raw token (a logout's `id_token_hint`)."""

    claims: Mapping[str, object]
    id_token: str


class Oidc:
    """One relying party: the provider's issuer, this client, where the provider sends back."""

    def __init__(self, config: mapping.OidcFile, *, leeway_s: int = LEEWAY_S) -> None:
        self.issuer = config.issuer
        self.client_id = config.client_id
        self._secret = config.client_secret
        self.redirect_url = config.redirect_url
        self.mapping = config.mapping
        self.leeway_s = leeway_s
        self._provider: Provider | None = None
        self._pending: OrderedDict[str, Pending] = OrderedDict()
        self._lock = asyncio.Lock()

    async def _get_json(self, session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
        async with session.get(url, allow_redirects=False) as response:
            if response.status != 200:
                raise Refusal("oidc_provider_unavailable", "the identity provider did not answer")
            found = await response.json(content_type=None)
        if not isinstance(found, dict):
            raise Refusal("oidc_provider_unavailable", "the identity provider answered nonsense")
        return found

    def _client(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S))

    async def provider(self) -> Provider:
        """The discovery document, fetched once (again after a failure)."""
        async with self._lock:
            if self._provider is not None:
                return self._provider
            url = self.issuer + "/.well-known/openid-configuration"
            try:
                async with self._client() as session:
                    doc = await self._get_json(session, url)
            except (aiohttp.ClientError, TimeoutError, ValueError):
                raise Refusal(
                    "oidc_provider_unavailable", "the identity provider did not answer"
                ) from None
            if doc.get("issuer") != self.issuer:
                raise Refusal(
                    "oidc_provider_unavailable", "the discovery document's issuer differs"
                )
            try:
                found = Provider(
                    issuer=self.issuer,
                    authorization_endpoint=str(doc["authorization_endpoint"]),
                    token_endpoint=str(doc["token_endpoint"]),
                    jwks_uri=str(doc["jwks_uri"]),
                    end_session_endpoint=(
                        None
                        if doc.get("end_session_endpoint") is None
                        else str(doc["end_session_endpoint"])
                    ),
                )
            except KeyError:
                raise Refusal(
                    "oidc_provider_unavailable", "the discovery document lacks an endpoint"
                ) from None
            self._provider = found
            return found

    async def begin(self, next_path: str) -> tuple[str, str]:
        """A new sign-in: the browser cookie's value and the provider's authorization URL
        (state, nonce, and the S256 challenge of a fresh verifier)."""
        provider = await self.provider()
        browser, state, nonce = (secrets.token_urlsafe(32) for _ in range(3))
        verifier = secrets.token_urlsafe(48)
        self._forget_old()
        self._pending[state] = Pending(
            browser_sha256=_digest(browser),
            nonce=nonce,
            verifier=verifier,
            next_path=next_path,
            began_s=time.monotonic(),
        )
        while len(self._pending) > MAX_PENDING:
            self._pending.popitem(last=False)
        query = parse.urlencode(
            {
                "response_type": "code",
                "client_id": self.client_id,
                "redirect_uri": self.redirect_url,
                "scope": "openid email profile",
                "state": state,
                "nonce": nonce,
                "code_challenge": _b64(hashlib.sha256(verifier.encode("ascii")).digest()),
                "code_challenge_method": "S256",
            }
        )
        separator = "&" if "?" in provider.authorization_endpoint else "?"
        return browser, provider.authorization_endpoint + separator + query

    def _forget_old(self) -> None:
        now = time.monotonic()
        while self._pending:
            state, first = next(iter(self._pending.items()))
            if now - first.began_s < PENDING_S:
                break
            del self._pending[state]

    def spend(self, state: str) -> None:
        """Forget the pending sign-in of `state`, if any (the provider refused it)."""
        self._pending.pop(state, None)

    def take(self, state: str, browser: str | None) -> Pending:
        """The pending sign-in of `state`, spent now (a state answers once, whatever follows);
        `Refusal` when it is unknown, spent, too old, or was begun by another browser."""
        self._forget_old()
        pending = self._pending.pop(state, None)
        if pending is None:
            raise Refusal("oidc_state_unknown", "this sign-in is unknown, used already or too old")
        if browser is None or not hmac.compare_digest(_digest(browser), pending.browser_sha256):
            raise Refusal("oidc_state_foreign", "this sign-in was begun in another browser")
        return pending

    async def redeem(self, pending: Pending, code: str) -> Identity:
        """The code for tokens at the token endpoint (with the PKCE verifier), and the ID
        token verified; `Refusal` naming what failed."""
        provider = await self.provider()
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_url,
            "code_verifier": pending.verifier,
            "client_id": self.client_id,
        }
        headers = {} if self._secret is None else {"Authorization": self._basic(self._secret)}
        try:
            async with self._client() as session:
                async with session.post(
                    provider.token_endpoint, data=form, headers=headers, allow_redirects=False
                ) as response:
                    if response.status != 200:
                        raise Refusal("oidc_code_refused", "the identity provider refused the code")
                    answer = await response.json(content_type=None)
                keys = await self._get_json(session, provider.jwks_uri)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            raise Refusal(
                "oidc_provider_unavailable", "the identity provider did not answer"
            ) from None
        id_token = answer.get("id_token") if isinstance(answer, dict) else None
        if not isinstance(id_token, str):
            raise Refusal("oidc_no_id_token", "the identity provider sent no ID token")
        claims = verify(
            id_token,
            keys,
            issuer=self.issuer,
            audience=self.client_id,
            nonce=pending.nonce,
            leeway_s=self.leeway_s,
        )
        return Identity(claims=claims, id_token=id_token)

    def _basic(self, secret: str) -> str:
        # RFC 6749 §2.3.1: each part form-urlencoded before the pair is base64'd.
        pair = parse.quote_plus(self.client_id) + ":" + parse.quote_plus(secret)
        return "Basic " + base64.b64encode(pair.encode()).decode("ascii")

    async def logout_url(self, id_token: str | None, after: str) -> str | None:
        """The provider's end-session URL (RP-initiated logout) when it offers one."""
        try:
            provider = await self.provider()
        except Refusal:
            return None
        if provider.end_session_endpoint is None:
            return None
        query: dict[str, str] = {"client_id": self.client_id, "post_logout_redirect_uri": after}
        if id_token is not None:
            query["id_token_hint"] = id_token
        separator = "&" if "?" in provider.end_session_endpoint else "?"
        return provider.end_session_endpoint + separator + parse.urlencode(query)


def verify(
    id_token: str,
    keys: Mapping[str, object],
    *,
    issuer: str,
    audience: str,
    nonce: str,
    leeway_s: int = LEEWAY_S,
    now: float | None = None,
) -> dict[str, object]:
    """The claims of an ID token signed by one of the provider's `keys` (a JWKS), issued by
    `issuer` for `audience` (the only audience, or the authorised party), unexpired within
    `leeway_s`, carrying `nonce`; `Refusal` naming the first check that failed."""
    from joserfc import errors as jose_errors
    from joserfc import jwk, jwt

    try:
        key_set = jwk.KeySet.import_key_set(dict(keys))  # type: ignore[arg-type]
    except (jose_errors.JoseError, ValueError, TypeError, KeyError):
        raise Refusal("oidc_provider_unavailable", "the provider's keys are unreadable") from None
    try:
        token = jwt.decode(id_token, key_set, algorithms=list(ALGORITHMS))
    except (jose_errors.BadSignatureError, jose_errors.UnsupportedAlgorithmError):
        raise Refusal(
            "oidc_bad_signature", "the ID token's signature is not the provider's"
        ) from None
    except (jose_errors.JoseError, ValueError, TypeError, KeyError):
        raise Refusal(
            "oidc_bad_signature", "the ID token is malformed or signed by no known key"
        ) from None
    claims = dict(token.claims)
    registry = jwt.JWTClaimsRegistry(
        now=None if now is None else int(now),
        leeway=leeway_s,
        iss={"essential": True, "value": issuer},
        sub={"essential": True},
        exp={"essential": True},
        iat={"essential": True},
    )
    try:
        registry.validate(claims)
    except jose_errors.ExpiredTokenError:
        raise Refusal("oidc_expired", "the ID token has expired") from None
    except (jose_errors.InvalidClaimError, jose_errors.MissingClaimError) as exc:
        claim = str(getattr(exc, "claim", "?"))
        raise Refusal("oidc_bad_claim", f"the ID token's {claim} is wrong or missing") from None
    except jose_errors.JoseError:
        raise Refusal("oidc_bad_claim", "the ID token's claims do not hold") from None
    aud = claims.get("aud")
    audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    if audience not in audiences or (len(audiences) > 1 and claims.get("azp") != audience):
        raise Refusal("oidc_wrong_audience", "the ID token was issued for another client")
    sent = claims.get("nonce")
    if not isinstance(sent, str) or not hmac.compare_digest(sent.encode(), nonce.encode()):
        raise Refusal(
            "oidc_nonce_mismatch", "the ID token's nonce is missing or not this sign-in's"
        )
    return claims


def dumps_claims(claims: Mapping[str, object]) -> str:
    """Claims as one JSON line (tests and debugging; never logged: they name a person)."""
    return json.dumps(claims, sort_keys=True, default=str)
