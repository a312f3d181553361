"""What stops us reading a repository, by kind: the caller skips, waits or records by the class."""

from __future__ import annotations

from typing import Any


class RegistryError(Exception):
    """Anything that stops us reading a repository; ``str()`` is what the warehouse records."""

    def __init__(self, message: str, *, registry: str = "", repository: str = "", status: int | None = None):
        super().__init__(message)
        self.registry = registry
        self.repository = repository
        self.status = status


class RegistryUnavailable(RegistryError):
    """Unreachable, timing out or answering 5xx after every retry."""

    def __init__(self, message: str, *, unreachable: bool = False, **kw: Any):
        super().__init__(message, **kw)
        self.unreachable = (
            unreachable  # no connection at all (DNS, refused): other repositories there will fail too
        )


class RateLimited(RegistryError):
    """429 (or an exhausted pull budget) for longer than we are willing to wait."""

    def __init__(self, message: str, *, retry_after_s: float | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.retry_after_s = retry_after_s


class AuthError(RegistryError):
    """The registry refused the credentials (or demands some we do not have)."""


class NotFound(RegistryError):
    """404 for a repository, tag or blob."""


class MalformedResponse(RegistryError):
    """A body that is not the JSON (or digest) the protocol promises."""


class NoPlatform(RegistryError):
    """An index with no linux/amd64 manifest: skip the tag with this reason, it is not a failure."""
