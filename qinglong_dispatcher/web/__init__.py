"""The control-plane API over HTTP (aiohttp): imported only when `QINGLONG_API_LISTEN` is set."""
