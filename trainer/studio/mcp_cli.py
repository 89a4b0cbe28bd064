"""``studio mcp``: serve the MCP tools (trainer/studio/mcp_server.py) over stdio, for a coding agent
that starts it, or streamable HTTP on the loopback interface (docs/mcp.md)."""

from __future__ import annotations

from typing import Any

import click

STDIO, HTTP = "stdio", "http"


@click.command("mcp")
@click.option(
    "--transport",
    type=click.Choice([STDIO, HTTP]),
    default=STDIO,
    show_default=True,
    help="stdio: the agent starts `studio mcp` itself; http: streamable HTTP at http://127.0.0.1:PORT/mcp.",
)
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True, help="With http.")
@click.pass_obj
def mcp(context: Any, transport: str, port: int) -> None:
    """A Model Context Protocol server for coding agents: runs, metrics, health, rollouts, search,
    comparisons, and launch/cancel with a token that may write. It calls the REST API with your token."""
    from trainer.studio.mcp_server import build_server

    # HTTP listens on the loopback interface only: whoever reaches it acts with the token it holds.
    server = build_server(context.client(), host="127.0.0.1", port=port)
    server.run("streamable-http" if transport == HTTP else "stdio")
