"""The outbound allowlist's pure checks: rules, URLs, and the addresses a name resolved to."""

from __future__ import annotations

import pytest

from trainer.tools.allowlist import (
    AllowRule,
    OutboundPolicy,
    OutboundRefused,
    check_url,
    choose_address,
    pinned,
)

SERVICES = (("127.0.0.1", 8000), ("postgres", 5432), ("10.0.0.5", 6379))


def policy(*rules: str) -> OutboundPolicy:
    return OutboundPolicy.from_texts(rules, SERVICES)


@pytest.mark.parametrize(
    "text", ["tools.internal", "127.0.0.1", "localhost", "tools:0", "tools:http", "ftp://x/"]
)
def test_a_rule_without_a_port_or_url_prefix_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"name a host and a port|must start with http"):
        AllowRule.parse(text)


def test_a_host_port_rule_allows_that_port_only() -> None:
    rules = policy("tools.internal:8080")
    assert check_url("http://tools.internal:8080/any/path?q=1", rules).port == 8080
    assert check_url("https://TOOLS.internal:8080/", rules).host == "tools.internal"
    for url in ("http://tools.internal/", "http://tools.internal:8081/", "http://other:8080/"):
        with pytest.raises(
            OutboundRefused, match=r"is not allowed; the outbound targets are: tools\.internal:8080"
        ):
            check_url(url, rules)


def test_a_url_prefix_rule_checks_scheme_port_and_path_and_no_dot_segments() -> None:
    rules = policy("https://api.example.com/v1/")
    assert check_url("https://api.example.com/v1/search", rules).port == 443
    assert check_url("https://api.example.com:443/v1/", rules)
    assert check_url("https://api.example.com/v1", rules)  # the folder /v1/ itself
    for url in (
        "http://api.example.com/v1/search",  # another scheme
        "https://api.example.com:8443/v1/search",  # another port
        "https://api.example.com/v2/search",
        "https://api.example.com/v1x/search",
        "https://api.example.com/v1/../admin",
        "https://api.example.com/v1/%2e%2e/admin",
    ):
        with pytest.raises(OutboundRefused):
            check_url(url, rules)


@pytest.mark.parametrize(
    "path",
    [
        "/v1/..\\admin",  # a backslash a server reads as a slash
        "/v1\\..\\admin",
        "/v1/%2e%2e\\admin",
        "/v1/%252e%252e/admin",  # decoded twice by some servers
        "/v1/%2E%2E%2Fadmin",  # an encoded slash
        "/v1/..;/admin",  # Tomcat's path parameter on a dot segment
        "/v1/./../admin",
        "/v1/%25252525252e%25252525252e/admin",  # never settles
    ],
)
def test_a_url_prefix_rule_compares_the_path_a_server_would_act_on(path: str) -> None:
    with pytest.raises(OutboundRefused, match="is not allowed"):
        check_url("https://api.example.com" + path, policy("https://api.example.com/v1/"))


def test_a_path_that_stays_inside_the_prefix_once_normalised_is_allowed() -> None:
    rules = policy("https://api.example.com/v1/")
    for path in ("/v1/a/../search", "/v1/./search", "/v1/%73earch", "/v1//search", "/v1/a\\b"):
        assert check_url("https://api.example.com" + path, rules).rule == rules.rules[0], path


def test_credentials_in_the_url_are_refused() -> None:
    with pytest.raises(OutboundRefused, match="credentials in the URL"):
        check_url("http://user:pw@tools.internal:8080/", policy("tools.internal:8080"))


def test_a_rule_naming_a_service_endpoint_is_a_conflict() -> None:
    assert policy("localhost:8000", "postgres:5432", "tools:8000").conflicts() == [
        "localhost:8000 is the product's own service at 127.0.0.1:8000",
        "postgres:5432 is the product's own service at postgres:5432",
    ]


def test_addresses_are_checked_where_the_name_resolved_at_call_time() -> None:
    rules = policy("tools.internal:6379", "localhost:9000")
    target = check_url("http://tools.internal:6379/", rules)
    assert choose_address(target, rules, ["10.0.0.7"]) == "10.0.0.7"
    # DNS rebinding: the same name now points at this machine, at the cloud's metadata service, or at
    # a service of ours; none is dialled, and the first acceptable address wins.
    with pytest.raises(
        OutboundRefused, match=r"is this machine, which the rule tools\.internal:6379 does not name"
    ):
        choose_address(target, rules, ["127.0.0.1"])
    with pytest.raises(OutboundRefused, match=r"169\.254\.169\.254 is link-local"):
        choose_address(target, rules, ["169.254.169.254"])
    with pytest.raises(OutboundRefused, match=r"10\.0\.0\.5:6379 is the product's own service"):
        choose_address(target, rules, ["10.0.0.5"])
    assert choose_address(target, rules, ["0.0.0.0", "::ffff:127.0.0.1", "10.0.0.8"]) == "10.0.0.8"
    loopback = check_url("http://localhost:9000/", rules)
    assert choose_address(loopback, rules, ["::1", "127.0.0.1"]) == "::1"


def test_a_service_port_on_loopback_is_refused_whatever_loopback_address() -> None:
    rules = OutboundPolicy.from_texts(["127.0.0.2:8000"], [("localhost", 8000)])
    target = check_url("http://127.0.0.2:8000/", rules)
    with pytest.raises(OutboundRefused, match="the product's own service"):
        choose_address(target, rules, ["127.0.0.2"])


def test_the_request_goes_to_the_checked_address_under_the_original_name() -> None:
    rules = policy("https://api.example.com/v1/", "[::1]:9000")
    url, headers, extensions = pinned(check_url("https://api.example.com/v1/q?x=1", rules), "93.184.216.34")
    assert (url, headers, extensions) == (
        "https://93.184.216.34:443/v1/q?x=1",
        {"Host": "api.example.com"},
        {"sni_hostname": "api.example.com"},
    )
    url, headers, extensions = pinned(check_url("http://[::1]:9000/", rules), "::1")
    assert (url, headers, extensions) == ("http://[::1]:9000/", {"Host": "[::1]:9000"}, {})


def test_a_policy_travels_as_plain_json() -> None:
    rules = policy("tools.internal:8080", "https://api.example.com/v1/")
    assert OutboundPolicy.from_dict(rules.to_dict()) == rules


def test_a_network_rule_allows_addresses_inside_it_on_its_port_only() -> None:
    rules = policy("93.184.216.0/24:443", "[2606:4700::/32]:8443")
    target = check_url("https://93.184.216.9/score", rules)
    assert choose_address(target, rules, ["93.184.216.9"]) == "93.184.216.9"
    assert check_url("https://[2606:4700::5]:8443/", rules).port == 8443
    # A name is never matched by a network rule (it could resolve anywhere); nor another port.
    for url in ("https://93.184.217.9/", "http://93.184.216.9:80/", "https://tools.example/"):
        with pytest.raises(OutboundRefused, match="is not allowed"):
            check_url(url, rules)
    assert str(AllowRule.parse("93.184.216.7/32:443")) == "93.184.216.7:443"  # one address: that exact host
    with pytest.raises(ValueError, match="has host bits set"):
        AllowRule.parse("93.184.216.7/24:443")


def test_private_loopback_and_link_local_addresses_need_a_rule_naming_that_exact_host_and_port() -> None:
    network = policy("0.0.0.0/0:8080")
    for address in ("10.1.2.3", "192.168.1.4", "127.0.0.1", "169.254.169.254"):
        with pytest.raises(OutboundRefused, match=r"private|this machine|link-local"):
            choose_address(check_url(f"http://{address}:8080/", network), network, [address])
    exact = policy("10.1.2.3:8080", "127.0.0.1:8080", "169.254.169.254:8080", "tools.internal:8080")
    for address in ("10.1.2.3", "127.0.0.1", "169.254.169.254"):
        assert choose_address(check_url(f"http://{address}:8080/", exact), exact, [address]) == address
    # A name the rule names exactly may resolve to a private address, never to link-local.
    named = check_url("http://tools.internal:8080/", exact)
    assert choose_address(named, exact, ["10.9.9.9"]) == "10.9.9.9"
    with pytest.raises(OutboundRefused, match="link-local"):
        choose_address(named, exact, ["169.254.169.254"])
