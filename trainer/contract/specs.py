"""What a run receives besides its config: the team tools and rewards it names, with their secrets
(GET SPECS_PATH, over the run's own token; never stored in the frozen config, a log or a trajectory)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, JsonValue

from trainer.contract.wire import Wire

__all__ = [
    "OutboundRules",
    "RunSpecs",
    "TeamRewardSpec",
    "TeamToolSpec",
]


class TeamToolSpec(Wire):
    """A team tool as the run receives it (docs/tools.md#team-tools-in-runs): an HTTP endpoint, or a
    staff-registered ``module:Class`` the trainer imports."""

    name: str = Field(min_length=1, max_length=64)
    description: str = ""
    parameters: dict[str, JsonValue] = Field(description="JSON Schema (type object) of the arguments.")
    kind: Literal["http", "python"]
    url: str = ""
    method: Literal["GET", "POST"] = "POST"
    timeout_s: float = Field(default=10.0, gt=0)
    secret: str | None = Field(
        default=None, description="Sent as the secret header; never stored by the run."
    )
    secret_header: str = "X-Tool-Secret"
    entry_point: str = Field(default="", description="python kind: package.module:Class.")

    def __repr__(self) -> str:  # the secret must never reach a log line
        return f"TeamToolSpec(name={self.name!r}, kind={self.kind!r}, url={self.url!r})"

    __str__ = __repr__


class TeamRewardSpec(Wire):
    """A team reward (docs/rewards.md#team-rewards): a rule kind with an optional format bonus, or a
    remote endpoint that answers a POST of (data_source, response, ground_truth, extra_info)."""

    name: str = Field(min_length=1, max_length=64)
    data_source: str = Field(default="", description="The data_source it scores by default; blank: none.")
    kind: Literal["rule", "remote"]
    rule: Literal["exact", "numeric", "contains", "regex", "f1"] = "exact"
    tolerance: float = Field(default=0.0, ge=0)
    pattern: str = Field(default="", description="regex rule: what to extract (group 1, else the match).")
    format_pattern: str = Field(default="", description="A response matching this regex earns the bonus.")
    format_bonus: float = 0.0
    url: str = ""
    timeout_s: float = Field(default=10.0, gt=0)
    retries: int = Field(default=1, ge=0, le=5)
    secret: str | None = None
    secret_header: str = "X-Reward-Secret"

    def __repr__(self) -> str:
        return f"TeamRewardSpec(name={self.name!r}, kind={self.kind!r})"

    __str__ = __repr__


class OutboundRules(Wire):
    """The web app's outbound policy (trainer.tools.allowlist.OutboundPolicy), as it travels to a run."""

    rules: list[str] = Field(
        default_factory=list, description="STUDIO_TOOL_ALLOWLIST entries: host:port or URL prefixes."
    )
    services: list[tuple[str, int]] = Field(
        default_factory=list,
        description="The product's own service endpoints, closed whatever the rules say.",
    )


class RunSpecs(Wire):
    """What GET SPECS_PATH answers: the run's team tools and rewards, and where they may send requests."""

    tools: list[TeamToolSpec] = Field(default_factory=list)
    rewards: list[TeamRewardSpec] = Field(default_factory=list)
    outbound: OutboundRules = Field(
        default_factory=OutboundRules, description="Checked again, with the resolved address, at every call."
    )

    def __repr__(self) -> str:
        return f"RunSpecs(tools={[t.name for t in self.tools]}, rewards={[r.name for r in self.rewards]})"

    __str__ = __repr__
