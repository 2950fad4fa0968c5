"""A protected MCP server for the OAuth tier, written with the Python SDK's
resource-server pieces: protected resource metadata, the bearer middleware
with a token verifier that asks the authorization server (RFC 7662
introspection), and a tool.

    python protected_server.py PORT ISSUER
"""

import base64
import json
import sys
import urllib.parse
import urllib.request

import anyio
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

PORT = int(sys.argv[1])
ISSUER = sys.argv[2]
RESOURCE = f"http://127.0.0.1:{PORT}/mcp"


class Introspection:
    """Asks the authorization server whether a token is active, and for whom."""

    async def verify_token(self, token: str) -> AccessToken | None:
        info = await anyio.to_thread.run_sync(introspect, token)
        if info is None:
            return None
        if not info.get("active"):
            return None
        audience = info.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if RESOURCE not in audiences:
            return None
        return AccessToken(
            token=token,
            client_id=info.get("client_id", ""),
            scopes=(info.get("scope") or "").split(),
            expires_at=info.get("exp"),
            resource=RESOURCE,
        )


def introspect(token: str) -> dict | None:
    basic = base64.b64encode(b"mcp-server:mcp-server-secret").decode()
    request = urllib.request.Request(
        f"{ISSUER}/token/introspection",
        data=urllib.parse.urlencode({"token": token}).encode(),
        headers={"authorization": f"Basic {basic}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.load(answer)
    except OSError:
        return None


server = MCPServer(
    "protected",
    token_verifier=Introspection(),
    auth=AuthSettings(
        issuer_url=ISSUER,
        resource_server_url=RESOURCE,
        required_scopes=["mcp:tools"],
        validate_token_resource=True,
    ),
)


@server.tool()
def whoami() -> str:
    """Says that the caller got through."""
    return "authorized"


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=PORT)
