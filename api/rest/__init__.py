"""The REST admin API (Confluent REST Proxy v3 paths and shapes, plus pykraft extensions).

`create_app(ctx)` builds the FastAPI app for a node; `serve_rest(ctx, host, port)` runs it
with uvicorn inside the node's own asyncio loop.
"""

from __future__ import annotations

from api.rest.app import create_app
from api.rest.server import RestServer, serve_rest

__all__ = ["RestServer", "create_app", "serve_rest"]
