"""A client of the operator UI without a browser: aiohttp with its own cookie jar, signing in
with a real token and sending forms with the page's CSRF token."""

from __future__ import annotations

import re
from typing import Any

import aiohttp
from multidict import CIMultiDict

from tests.support.api_writes import Served

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def origin(it: Served) -> str:
    """The listener's origin (the API's base without its prefix)."""
    return it.base.removesuffix("/api/v1")


class UiClient:
    """One browser-like client: cookies kept, redirects not followed (tests look at them)."""

    def __init__(self, it: Served) -> None:
        self.it = it
        self.origin = origin(it)
        self.session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        self.csrf = ""

    async def __aenter__(self) -> UiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.close()

    async def get(self, path: str) -> tuple[int, CIMultiDict[str], str]:
        async with self.session.get(self.origin + path, allow_redirects=False) as response:
            text = await response.text()
            found = _CSRF.search(text)
            if found is not None:
                self.csrf = found.group(1)
            return response.status, CIMultiDict(response.headers), text

    async def post(
        self,
        path: str,
        fields: dict[str, str],
        *,
        headers: dict[str, str] | None = None,
        csrf: bool = True,
    ) -> tuple[int, CIMultiDict[str], str]:
        data = {**({"csrf": self.csrf} if csrf else {}), **fields}
        async with self.session.post(
            self.origin + path, data=data, headers=headers or {}, allow_redirects=False
        ) as response:
            text = await response.text()
            return response.status, CIMultiDict(response.headers), text

    async def sign_in(self, who: str) -> tuple[int, CIMultiDict[str], str]:
        """Sign in with `who`'s token; then load the overview (and its CSRF token)."""
        answer = await self.post("/ui/signin", {"token": self.it.secrets[who]}, csrf=False)
        assert answer[0] == 303, answer[2][:500]
        status, _, text = await self.get("/ui")
        assert status == 200, text[:500]
        return answer

    def cookie(self) -> Any:
        """The session cookie's morsel (None: no cookie)."""
        for morsel in self.session.cookie_jar:
            if morsel.key == "qinglong_ui":
                return morsel
        return None
