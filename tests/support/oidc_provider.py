"""A real OIDC provider on loopback for the UI's sign-in tests: `oidc-provider-mock` (authlib's
authorization server, in a process of its own: `python -m tests.support.oidc_provider`) behind
a front that is the issuer the relying party sees.

The front serves the discovery document and its own signing key, sends the browser to the
provider's own authorization and end-session endpoints, and forwards the code to the provider's
token endpoint (the provider alone decides whether a code is good, once); the ID token it
answers with is the provider's claims signed again with the front's key, after the change
`mode` names — what a hostile or broken provider would send:

- `forged`: signed by another key under the same key id;
- `audience`: issued for another client;
- `expired`: expired an hour ago;
- `no_nonce` / `other_nonce`: the nonce left out, or another sign-in's.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
from aiohttp import web
from joserfc import jwk, jwt

KID = "front-1"


class Front:
    """The issuer the relying party is configured with."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.key = jwk.RSAKey.generate_key(2048, parameters={"kid": KID, "use": "sig"})
        self.other = jwk.RSAKey.generate_key(2048, parameters={"kid": KID, "use": "sig"})
        self.mode = "honest"
        self.base = ""
        self.tokens_redeemed = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self.discovery)
        app.router.add_get("/jwks", self.jwks)
        app.router.add_post("/token", self.token)
        return app

    async def discovery(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "issuer": self.base,
                "authorization_endpoint": self.upstream + "/oauth2/authorize",
                "token_endpoint": self.base + "/token",
                "end_session_endpoint": self.upstream + "/oauth2/end_session",
                "jwks_uri": self.base + "/jwks",
                "response_types_supported": ["code"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "subject_types_supported": ["public"],
            }
        )

    async def jwks(self, request: web.Request) -> web.Response:
        return web.json_response({"keys": [self.key.as_dict(private=False)]})

    async def token(self, request: web.Request) -> web.Response:
        form = await request.post()
        headers = {k: v for k, v in request.headers.items() if k.lower() == "authorization"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                self.upstream + "/oauth2/token", data=dict(form), headers=headers
            ) as response,
        ):
            body: dict[str, Any] = await response.json(content_type=None)
            if response.status != 200:
                return web.json_response(body, status=response.status)
        self.tokens_redeemed += 1
        claims = dict(jwt.decode(body["id_token"], self._upstream_keys).claims)
        claims["iss"] = self.base
        key = self.key
        now = int(time.time())
        if self.mode == "forged":
            key = self.other
        elif self.mode == "audience":
            claims["aud"] = "someone-else"
        elif self.mode == "expired":
            claims["iat"], claims["exp"] = now - 7200, now - 3600
        elif self.mode == "no_nonce":
            claims.pop("nonce", None)
        elif self.mode == "other_nonce":
            claims["nonce"] = "not-this-sign-ins"
        body["id_token"] = jwt.encode({"alg": "RS256", "kid": KID}, claims, key)
        return web.json_response(body)

    _upstream_keys: jwk.KeySet


@contextlib.contextmanager
def provider() -> Iterator[str]:
    """The provider alone (its own issuer, `http://localhost:<port>`), stopped after."""
    # authlib refuses plain HTTP unless told; the provider is on loopback only.
    env = {**os.environ, "AUTHLIB_INSECURE_TRANSPORT": "1", "PYTHONWARNINGS": "ignore"}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.oidc_provider"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://localhost:{port}"
    finally:
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.close()
        process.wait(timeout=10)
        process.stdout.close()


@contextlib.asynccontextmanager
async def running() -> AsyncIterator[Front]:
    """The provider and its front, both on loopback, stopped after."""
    with provider() as upstream:
        front = Front(upstream)
        async with aiohttp.ClientSession() as session, session.get(upstream + "/jwks") as answer:
            front._upstream_keys = jwk.KeySet.import_key_set(await answer.json())
        runner = web.AppRunner(front.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        front.base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            yield front
        finally:
            await runner.cleanup()


async def set_user(front: Front, sub: str, groups: list[str]) -> None:
    """The provider's user `sub`, in `groups`."""
    async with (
        aiohttp.ClientSession() as session,
        session.put(
            f"{front.upstream}/users/{sub}", json={"groups": groups, "email": f"{sub}@example.com"}
        ) as response,
    ):
        assert response.status == 204, await response.text()


def _serve() -> None:
    """The provider until stdin closes; its port on the first line of stdout."""
    from oidc_provider_mock import run_server_in_thread  # type: ignore[import-untyped]

    with run_server_in_thread(port=0, require_nonce=True) as server:
        print(server.server_port, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    _serve()
