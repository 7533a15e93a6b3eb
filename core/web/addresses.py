"""Which addresses web_fetch may reach: the rule that keeps a page the model asked for from
being one of this machine's or its network's own services.

A URL is checked before anything is sent: http or https, a host, no credentials. Its host is
then resolved, and every address it resolves to must be a public one (not loopback, private,
link-local — where cloud metadata services answer —, site-local, shared, reserved or
multicast; an IPv6 address carrying an IPv4 one is judged by that one), unless the settings
allow private addresses or name the host. The request is then sent to the address that was
checked, so a name that resolves differently a moment later (DNS rebinding) changes nothing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# host, port -> the addresses the host resolves to (socket.getaddrinfo's, by default)
Resolver = Callable[[str, int], Awaitable[list[str]]]

# IPv6 prefixes that carry an IPv4 address in their low 32 bits (NAT64): judged by it.
NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
METADATA = ipaddress.ip_address("169.254.169.254")
# Not reachable from anywhere on the internet (IANA's special-purpose registries), though the
# ipaddress of some Python versions calls them global: site-local (deprecated, still routed
# inside networks), IPv4 protocol assignments and dummy address, the old 6to4 relay, the
# IPv6 dummy prefix, documentation (RFC 9637).
NOT_GLOBAL = (
    (ipaddress.ip_network("fec0::/10"), "a site-local address"),
    (ipaddress.ip_network("192.0.0.0/24"), "a reserved address"),
    (ipaddress.ip_network("192.88.99.0/24"), "a reserved address"),
    (ipaddress.ip_network("100:0:0:1::/64"), "a reserved address"),
    (ipaddress.ip_network("3fff::/20"), "a reserved address"),
)
HOW_TO_ALLOW = 'set "web": {"allow_private": true} or list the host in "web.allow_hosts"'


class Refused(Exception):
    """A URL web_fetch will not fetch; the message is one line naming the rule."""


class Unresolved(Refused):
    """A host name that does not resolve here."""


@dataclass(frozen=True)
class Target:
    """Where one request goes: the URL as written and the address it was checked at."""

    url: str
    scheme: str
    host: str  # as written (lowercase), without brackets
    port: int
    address: str  # the checked address the request is sent to

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"

    def pinned_url(self) -> str:
        """The URL with its host replaced by the checked address."""
        parts = urlsplit(self.url)
        address = f"[{self.address}]" if ":" in self.address else self.address
        path = parts.path or "/"
        query = f"?{parts.query}" if parts.query else ""
        return f"{self.scheme}://{address}:{self.port}{path}{query}"


def parse_url(url: str) -> tuple[str, str, int]:
    """The scheme, host and port of a URL web_fetch may try; Refused saying why not."""
    text = url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"{url!r} is not a URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        shown = f"{scheme}:" if scheme else "no scheme"
        raise Refused(f"web_fetch reads http:// and https:// pages only, not {shown} ({url})")
    if parts.username is not None or parts.password is not None:
        raise Refused("web_fetch does not send credentials written in a URL")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise Refused(f"{url!r} names no host")
    if not host.isascii():  # an international name, as DNS and the Host header take it
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise Refused(f"{url!r} names a host that is not a valid name") from None
    return scheme, host, port or (443 if scheme == "https" else 80)


def why_not_public(address: Address) -> str | None:
    """None for an address anyone on the internet could reach; else what kind it is."""
    if isinstance(address, ipaddress.IPv6Address):
        carried = address.ipv4_mapped or address.sixtofour
        if carried is None and any(address in net for net in NAT64):
            carried = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if carried is not None:
            return why_not_public(carried)
    if address.is_unspecified:
        return "an unspecified address"
    for network, kind in NOT_GLOBAL:
        if address in network:
            return kind
    if address == METADATA:
        return "the cloud metadata address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_private:
        return "a private address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_reserved or not address.is_global:
        return "a reserved address"
    return None


async def system_resolver(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class AddressRule:
    """What web_fetch may reach: public addresses, and private ones only as allowed."""

    allow_private: bool = False
    allow_hosts: frozenset[str] = frozenset()  # host or host:port, lowercase

    @classmethod
    def of(cls, allow_private: bool, hosts: Iterable[str]) -> AddressRule:
        return cls(allow_private, frozenset(h.strip().lower().rstrip(".") for h in hosts))

    def host_allowed(self, host: str, port: int) -> bool:
        return (
            self.allow_private or host in self.allow_hosts or f"{host}:{port}" in self.allow_hosts
        )

    async def target(self, url: str, resolve: Resolver = system_resolver) -> Target:
        """Where to send a request for ``url``: a checked address. Refused naming the rule."""
        scheme, host, port = parse_url(url)
        try:
            addresses = [ipaddress.ip_address(host)]
        except ValueError:
            try:
                found = await resolve(host, port)
            except OSError as exc:
                raise Unresolved(f"cannot resolve {host}: {exc.strerror or exc}") from None
            addresses = [ipaddress.ip_address(a.split("%")[0]) for a in found]
        if not addresses:
            raise Unresolved(f"cannot resolve {host}: no address")
        if self.host_allowed(host, port):
            return Target(url.strip(), scheme, host, port, str(addresses[0]))
        for address in addresses:
            kind = why_not_public(address)
            if kind is not None:
                named = host if host == str(address) else f"{host} ({address})"
                raise Refused(f"web_fetch does not reach {kind}: {named}; {HOW_TO_ALLOW}")
        return Target(url.strip(), scheme, host, port, str(addresses[0]))
