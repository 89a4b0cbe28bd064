"""Where a team's HTTP tools (and any other outbound call a member configures) may go.

The one check every outbound request a member can aim runs through (docs/security.md#outbound):

- an :class:`AllowRule` names a host **and** a port (``tools.internal:8080``), a URL prefix
  (``https://tools.internal/v1/``: scheme, host, port and the start of the path), or a network on a
  port (``93.184.216.0/24:443``: URLs whose host is an address in it);
- an :class:`OutboundPolicy` is the rules plus the product's own service endpoints (web server,
  Postgres, Valkey, the Ray dashboard and GCS), which no rule can open;
- :func:`check_url` matches a URL against the rules (no I/O), and :func:`choose_address` checks the
  addresses the host name resolved to *at call time*: the request is then sent to that very address
  (see :func:`pinned`), so a name that resolves elsewhere a second later (DNS rebinding) changes
  nothing. A private, loopback or link-local address is reached only through a rule that names an
  exact host and port (never a network): loopback only when that host is a loopback one, link-local
  (cloud metadata) only when it is that very address; unspecified, multicast and reserved never.

Redirects are never followed by the callers: a 3xx is an error, not a result.
"""

from __future__ import annotations

import ipaddress
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class OutboundRefused(PermissionError):
    """The URL or the address it resolved to is not one a member's request may reach."""


class NotAllowed(OutboundRefused):
    """No rule names the URL's host and port: ``target`` (``host:port``) is what a rule would have to
    allow."""

    def __init__(self, message: str, target: str) -> None:
        super().__init__(message)
        self.target = target


def _port_of(parts: SplitResult) -> int:
    try:
        port = parts.port
    except ValueError as error:  # a port that is not a number or out of range
        raise OutboundRefused(f"{parts.geturl()}: {error}") from None
    return port if port is not None else DEFAULT_PORTS.get(parts.scheme, 0)


def _address(host: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def is_loopback_host(host: str) -> bool:
    """A host that names this machine: a loopback address or localhost."""
    address = _address(host)
    return address.is_loopback if address is not None else host.lower() in _LOOPBACK_NAMES


def _network(host: str) -> IpNetwork | None:
    try:
        return ipaddress.ip_network(host) if "/" in host else None
    except ValueError:
        return None


@dataclass(frozen=True)
class AllowRule:
    """``host:port`` (any scheme, any path), a URL prefix (that scheme, host, port, path start), or
    ``network:port`` (any URL whose host is an address in the network, on that port)."""

    host: str
    port: int
    scheme: str | None = None
    path_prefix: str = ""

    @classmethod
    def parse(cls, text: str) -> AllowRule:
        """A rule from its text; ValueError says what a rule must look like."""
        text = text.strip()
        if "://" in text:
            parts = urlsplit(text)
            if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
                raise ValueError(
                    f"{text!r}: a URL prefix must start with http:// or https:// and name a host"
                )
            if parts.query or parts.fragment:
                raise ValueError(f"{text!r}: a URL prefix has no query or fragment")
            try:
                port = _port_of(parts)
            except OutboundRefused as error:
                raise ValueError(str(error)) from None
            return cls(parts.hostname.lower(), port, parts.scheme, parts.path or "/")
        host, colon, port_text = text.rpartition(":")
        host = host.strip("[]").lower()
        if not colon or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(
                f"{text!r}: name a host and a port (tools.internal:8080, [::1]:9000), a URL prefix "
                "(https://tools.internal/v1/) or a network and a port (93.184.216.0/24:443); a host "
                "alone would open every port on it"
            )
        return cls(_network_text(text, host), int(port_text))

    @property
    def network(self) -> IpNetwork | None:
        """The network of a ``network:port`` rule (None: the rule names one exact host)."""
        return _network(self.host)

    def matches(self, parts: SplitResult, port: int) -> bool:
        host = (parts.hostname or "").lower()
        if port != self.port or not self.names_host(host):
            return False
        if self.scheme is not None and parts.scheme != self.scheme:
            return False
        return _path_within(parts.path or "/", self.path_prefix)

    def names_host(self, host: str) -> bool:
        """Whether ``host`` is the rule's host, or an address inside its network."""
        network, address = self.network, _address(host)
        if network is None:
            return host.lower() == self.host
        return address is not None and address.version == network.version and address in network

    def __str__(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        if self.scheme is None:
            return f"{shown}:{self.port}"
        default = DEFAULT_PORTS[self.scheme] == self.port
        return f"{self.scheme}://{shown}{'' if default else f':{self.port}'}{self.path_prefix}"


def _network_text(text: str, host: str) -> str:
    """``host`` as a rule stores it: a network in its canonical form, one address as that address."""
    if "/" not in host:
        return host
    try:
        network = ipaddress.ip_network(host)
    except ValueError as error:
        raise ValueError(f"{text!r}: {error} (write the network's first address, e.g. 10.1.0.0/16)") from None
    # A network of one address is that exact host: it then counts as naming it (private addresses).
    return str(network.network_address) if network.num_addresses == 1 else str(network)


def _path_within(path: str, prefix: str) -> bool:
    """Whether ``path`` lies under ``prefix`` segment by segment, both compared as a server reads
    them (:func:`normalised_path`): ``/v1/..\\admin`` is ``/admin``, outside ``/v1/``."""
    if not prefix:
        return True
    inside, folder = normalised_path(path), normalised_path(prefix)
    if inside is None or folder is None:
        return False
    folder = folder.rstrip("/")
    return not folder or inside == folder or inside.startswith(folder + "/")


# Enough for %252e (an encoded "%2e"); a path that still changes after this many decodings is refused.
_DECODINGS = 3


def normalised_path(path: str) -> str | None:
    """The path a server acts on, None when decoding never settles. Percent-decoded (again while
    that changes it: some servers decode twice), backslashes read as slashes (IIS and some proxies
    do), a segment's ``;params`` ignored when telling dot segments (Tomcat's ``..;``), and dot
    segments resolved (RFC 3986, 5.2.4). A rule's prefix is matched against this, never the raw
    text, so no URL that names a folder inside the prefix lands outside it (docs/security.md#outbound)."""
    for _ in range(_DECODINGS + 1):
        decoded = unquote(path)
        if decoded == path:
            segments = [_dot_or_segment(s) for s in path.replace("\\", "/").split("/")]
            return posixpath.normpath("/" + "/".join(segments)).replace("//", "/")
        path = decoded
    return None


def _dot_or_segment(segment: str) -> str:
    name = segment.split(";", 1)[0]
    return name if name in (".", "..") else segment


@dataclass(frozen=True)
class OutboundPolicy:
    """The allow rules and the service endpoints (host, port) that stay closed whatever the rules say."""

    rules: tuple[AllowRule, ...] = ()
    services: tuple[tuple[str, int], ...] = ()
    # Addresses the service hosts resolve to, filled by the caller that can resolve (resolve_services).
    service_addresses: tuple[tuple[str, int], ...] = field(default=(), compare=False)

    @classmethod
    def from_texts(cls, rules: Iterable[str], services: Iterable[tuple[str, int]] = ()) -> OutboundPolicy:
        return cls(tuple(AllowRule.parse(r) for r in rules if r.strip()), tuple(services))

    def conflicts(self) -> list[str]:
        """Rules that name one of the product's own service endpoints (checked at start-up)."""
        found = []
        for rule in self.rules:
            for host, port in self.services:
                same_host = rule.names_host(host) or (is_loopback_host(rule.host) and is_loopback_host(host))
                if same_host and rule.port == port:
                    found.append(f"{rule} is the product's own service at {host}:{port}")
        return found

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON, for a policy that travels with a tool spec to a trainer."""
        return {"rules": [str(rule) for rule in self.rules], "services": [list(s) for s in self.services]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OutboundPolicy:
        return cls.from_texts(data.get("rules", ()), [(str(h), int(p)) for h, p in data.get("services", ())])

    def describe(self) -> str:
        return ", ".join(str(rule) for rule in self.rules) or "(nothing)"


@dataclass(frozen=True)
class Target:
    """A URL that passed the rules: the rule it matched, its host and port."""

    url: str
    host: str
    port: int
    rule: AllowRule


def check_url(url: str, policy: OutboundPolicy) -> Target:
    """The rule ``url`` falls under; OutboundRefused when none does (no name resolution here)."""
    parts = urlsplit(url)
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise OutboundRefused(f"{url}: only http:// and https:// URLs with a host can be called")
    if parts.username or parts.password:
        raise OutboundRefused(f"{url}: credentials in the URL are not allowed; use the secret header")
    port = _port_of(parts)
    for rule in policy.rules:
        if rule.matches(parts, port):
            return Target(url, parts.hostname.lower(), port, rule)
    host = parts.hostname.lower()
    raise NotAllowed(
        f"{host}:{port}{parts.path or '/'} is not allowed; the outbound targets are: {policy.describe()}",
        f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
    )


def choose_address(target: Target, policy: OutboundPolicy, addresses: Sequence[str]) -> str:
    """The first of the addresses ``target.host`` resolved to that the request may be sent to.

    Pure: the caller resolves (at call time) and then connects to exactly the address returned.
    """
    refusals: list[str] = []
    for text in addresses:
        why = _address_refusal(text, target, policy)
        if why is None:
            return text
        refusals.append(why)
    if not refusals:
        raise OutboundRefused(f"{target.host} did not resolve to any address")
    raise OutboundRefused(f"{target.host}:{target.port} is not reachable for tools: {'; '.join(refusals)}")


def _address_refusal(text: str, target: Target, policy: OutboundPolicy) -> str | None:
    address = ipaddress.ip_address(text.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    rule, exact = target.rule, target.rule.network is None
    if address.is_loopback:
        # (::1 lies in a reserved block too: loopback is judged here, by the rule alone.)
        if not (exact and is_loopback_host(rule.host)):
            return f"{address} is this machine, which the rule {rule} does not name"
    elif address.is_link_local:
        if not (exact and _address(rule.host) == address):
            return f"{address} is link-local (cloud metadata lives there): only a rule naming {address} reaches it"
    elif address.is_unspecified or address.is_multicast or address.is_reserved:
        return f"{address} is not an address a tool may call"
    elif address.is_private and not exact:
        return f"{address} is private: only a rule naming its exact host and port reaches it, not the network {rule}"
    for host, port in (*policy.services, *policy.service_addresses):
        if port != target.port:
            continue
        service = _address(host)
        same = (service == address) if service is not None else False
        if same or (address.is_loopback and is_loopback_host(host)):
            return f"{address}:{port} is the product's own service"
    return None


def resolved_services(policy: OutboundPolicy, resolve: Any) -> OutboundPolicy:
    """The policy with the addresses its service host names resolve to (``resolve(host) -> [ip]``)."""
    pairs: list[tuple[str, int]] = []
    for host, port in policy.services:
        if _address(host) is not None:
            continue
        try:
            pairs += [(ip, port) for ip in resolve(host)]
        except OSError:
            continue  # a service name that does not resolve here cannot be reached from here either
    return OutboundPolicy(policy.rules, policy.services, tuple(pairs))


def pinned(target: Target, address: str) -> tuple[str, dict[str, str], dict[str, Any]]:
    """(URL with the checked address in place of the host, headers, httpx request extensions): the
    request goes to the address that was checked, under the name the server and its certificate know."""
    parts = urlsplit(target.url)
    shown = f"[{address}]" if ":" in address else address
    netloc = f"{shown}:{target.port}"
    url = parts._replace(netloc=netloc).geturl()
    default = DEFAULT_PORTS.get(parts.scheme) == target.port
    host_header = (f"[{target.host}]" if ":" in target.host else target.host) + (
        "" if default else f":{target.port}"
    )
    extensions = (
        {"sni_hostname": target.host} if parts.scheme == "https" and _address(target.host) is None else {}
    )
    return url, {"Host": host_header}, extensions
