"""Who may call the front door, and from which web pages: API keys and CORS as `vllm serve` has them
(`--api-key`, `--allowed-origins`, `--allowed-methods`, `--allowed-headers`, `--allow-credentials`), as aiohttp
middlewares and a response-prepare signal.

Keys: every route needs one of the keys except /health (a load balancer's probe), /metrics with
`--metrics-open`, and CORS preflights (OPTIONS), as vLLM guards every route but its public ones. A key comes as
`Authorization: Bearer KEY` (OpenAI's SDK) or `x-api-key: KEY` (Anthropic's), on any route. Each key is
compared as its SHA-256 digest with hmac.compare_digest against every configured key, none skipped, so the
time taken says nothing about which key, or how much of one, matched. A refusal is an ApiError (401,
code invalid_api_key) that the server's error middleware writes in the route's own error body.

CORS follows Starlette's CORSMiddleware, which `vllm serve` installs with these flags (defaults: every origin,
method and header, no credentials): a preflight (OPTIONS with Origin and Access-Control-Request-Method) is
answered here, 200 when origin, method and headers are allowed, else 400 naming what was refused; any other
response to a request with an allowed Origin carries Access-Control-Allow-Origin (the origin itself when
credentials are allowed, or a cookie came, or origins are listed; else "*").

    access = Access(keys=["sk-1"], metrics_open=False)
    app = web.Application(middlewares=[access.preflight, errors, access.authenticate])
    app.on_response_prepare.append(access.cors_headers)
"""

from __future__ import annotations

import hashlib
import hmac
import os

from aiohttp import web

from tokworker.api.errors import UNAUTHORIZED, ApiError

KEY_VARIABLES = ("VLLM_API_KEY", "TOKWORKER_API_KEY")
ALL_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")    # what "*" allows (Starlette's)
SAFELISTED_HEADERS = frozenset(("Accept", "Accept-Language", "Content-Language", "Content-Type"))
PREFLIGHT_MAX_AGE = "600"


def api_keys(flags: list[str] | None, environ=os.environ) -> list[str]:
    """The keys the server takes: `--api-key`'s when given (as vLLM, the flag wins), else VLLM_API_KEY's and
    TOKWORKER_API_KEY's; ValueError for an empty key.

    >>> api_keys(["a", "b"], {"VLLM_API_KEY": "c"}), api_keys(None, {"VLLM_API_KEY": "c", "TOKWORKER_API_KEY": "d"})
    (['a', 'b'], ['c', 'd'])
    >>> api_keys(None, {})
    []
    """
    keys = list(flags) if flags else [environ[name] for name in KEY_VARIABLES if name in environ]
    if any(not key for key in keys):
        raise ValueError("an API key is empty (--api-key, VLLM_API_KEY or TOKWORKER_API_KEY)")
    return keys


def presented_key(headers) -> str | None:
    """The key a request carries: `Authorization: Bearer KEY` (the scheme in any case), else `x-api-key`.

    >>> presented_key({"Authorization": "bearer sk-1"}), presented_key({"x-api-key": "sk-2"}), presented_key({})
    ('sk-1', 'sk-2', None)
    """
    authorization = headers.get("Authorization")
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer":
            return value.strip()
    return headers.get("x-api-key")


class Access:
    """See the module's docstring. No keys: every route is open (as `vllm serve` without --api-key)."""

    def __init__(self, keys: list[str] = (), *, metrics_open: bool = False, allowed_origins=("*",),
                 allowed_methods=("*",), allowed_headers=("*",), allow_credentials: bool = False):
        self.digests = [hashlib.sha256(key.encode()).digest() for key in keys]
        self.public = frozenset(("/health", "/metrics") if metrics_open else ("/health",))
        self.any_origin = "*" in allowed_origins
        self.origins = frozenset(allowed_origins)
        self.methods = ALL_METHODS if "*" in allowed_methods else tuple(m.upper() for m in allowed_methods)
        self.any_header = "*" in allowed_headers
        self.listed = ", ".join(sorted(SAFELISTED_HEADERS | set(allowed_headers)))   # as Starlette lists them
        self.headers = {h.lower() for h in SAFELISTED_HEADERS | set(allowed_headers)}
        self.credentials = allow_credentials

    def allows(self, key: str | None) -> bool:
        """Whether `key` is one of the keys, in time that depends on neither which key nor how much of it."""
        digest = hashlib.sha256((key or "").encode()).digest()
        matched = False
        for expected in self.digests:                  # no early exit: every key is compared
            matched |= hmac.compare_digest(digest, expected)
        return matched and key is not None

    @web.middleware
    async def authenticate(self, request: web.Request, handler):
        if (self.digests and request.method != "OPTIONS" and request.path not in self.public
                and not self.allows(presented_key(request.headers))):
            raise ApiError(UNAUTHORIZED, "a valid API key is required: send it as `Authorization: Bearer KEY` "
                                         "or `x-api-key: KEY`")
        return await handler(request)

    # ------------------------------------------------------------ CORS
    def origin_allowed(self, origin: str) -> bool:
        return self.any_origin or origin in self.origins

    @web.middleware
    async def preflight(self, request: web.Request, handler):
        """Answer a CORS preflight here (before the key check: browsers send no credentials with one)."""
        origin = request.headers.get("Origin")
        method = request.headers.get("Access-Control-Request-Method")
        if request.method != "OPTIONS" or origin is None or method is None:
            return await handler(request)
        refused = [] if self.origin_allowed(origin) else ["origin"]
        if method.upper() not in self.methods:
            refused.append("method")
        headers = {"Access-Control-Allow-Methods": ", ".join(self.methods), "Access-Control-Max-Age": PREFLIGHT_MAX_AGE}
        asked = request.headers.get("Access-Control-Request-Headers")
        if self.any_header and asked:
            headers["Access-Control-Allow-Headers"] = asked
        else:
            if not self.any_header:
                headers["Access-Control-Allow-Headers"] = self.listed
            if asked and any(h.strip().lower() not in self.headers for h in asked.split(",") if h.strip()):
                refused.append("headers")
        if self.any_origin and not self.credentials:
            headers["Access-Control-Allow-Origin"] = "*"
        else:
            headers.update({"Access-Control-Allow-Origin": origin, "Vary": "Origin"})
        if self.credentials:
            headers["Access-Control-Allow-Credentials"] = "true"
        if refused:
            return web.Response(status=400, text=f"Disallowed CORS {', '.join(refused)}", headers=headers)
        return web.Response(status=200, text="OK", headers=headers)

    async def cors_headers(self, request: web.Request, response: web.StreamResponse) -> None:
        """on_response_prepare: the CORS headers of an ordinary response (streamed ones too: the signal runs
        before the headers go out)."""
        origin = request.headers.get("Origin")
        if origin is None or not self.origin_allowed(origin):
            return
        if self.credentials:
            response.headers["Access-Control-Allow-Credentials"] = "true"
        if self.any_origin and not self.credentials and "Cookie" not in request.headers:
            response.headers["Access-Control-Allow-Origin"] = "*"
        else:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers.add("Vary", "Origin")
