"""Test-suite guards: no real model requests, no network beyond loopback."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from planexec.models import block_model_requests

block_model_requests()

_real_connect = socket.socket.connect


def _loopback_only(self: socket.socket, address: object) -> object:
    host = address[0] if isinstance(address, tuple) else None
    if host is not None and self.family in (socket.AF_INET, socket.AF_INET6):
        try:
            ok = ipaddress.ip_address(host).is_loopback
        except ValueError:
            ok = host == "localhost"
        if not ok:
            raise ConnectionRefusedError(f"tests may only connect to loopback, not {host!r}")
    return _real_connect(self, address)


socket.socket.connect = _loopback_only  # type: ignore[method-assign]


@pytest.fixture
def registry():
    """A registry with the built-ins loaded."""
    from planexec import Registry

    return Registry.default()
