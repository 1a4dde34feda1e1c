"""Exceptions raised by the shade client. All derive from ShadeError.

Where Python has a built-in exception for the same kind of failure, the
package's exception derives from it too (``InvalidArgument`` is a
``ValueError``, ``OutOfRange`` an ``IndexError``...), so code written
against the built-in ones keeps working.
"""

from __future__ import annotations

__all__ = [
    "ShadeError", "InvalidArgument", "OutOfRange", "MissingDependency", "PeerUnavailable",
    "ProtocolError", "RequestError", "OrderTimeout", "AuthError", "SampleError", "MapError",
    "Moved",
]


class ShadeError(Exception):
    """Base class of every error this package raises."""


class InvalidArgument(ShadeError, ValueError):
    """An argument the caller gave is invalid (ids and losses of different
    lengths, a rank outside the world, a manifest path outside a class
    folder...)."""


class OutOfRange(ShadeError, IndexError):
    """An index outside a dataset (``ShadeDataset[i]``)."""


class MissingDependency(ShadeError, ImportError):
    """A module of the package needs a library that is not installed
    (``shade.torch`` needs PyTorch and numpy)."""


class PeerUnavailable(ShadeError):
    """The local shade-peer could not be reached within the client's retry_for."""


class ProtocolError(ShadeError, ValueError):
    """The peer's reply breaks the protocol (a malformed SHADE.LOCATE or
    SHADE.STATS reply, a location outside the mapped memory)."""


class RequestError(ShadeError):
    """The peer refused a request (a Redis error reply); never retried.

    ``code`` is the reply's error code (``ERR``, ``TIMEOUT``, ``WRONGPASS``...).
    """

    def __init__(self, message: str, code: str = "ERR") -> None:
        super().__init__(message)
        self.code = code


class OrderTimeout(RequestError):
    """SHADE.ORDER: the epoch's order was not published within the timeout."""


class AuthError(RequestError):
    """The peer requires a password, or refused the one given."""


class SampleError(ShadeError):
    """A sample could not be read: an error reply for it, or nil (index out of
    range or unknown dataset)."""


class MapError(ShadeError):
    """SHADE.MAP failed; ``refused`` is True when the peer answered with an
    error (it cannot share its memory, or the password is wrong), and
    ``code`` is that error's code."""

    def __init__(self, message: str, refused: bool = False, code: str = "ERR") -> None:
        super().__init__(message)
        self.refused = refused
        self.code = code


class Moved(ShadeError):
    """A located sample was evicted or replaced while it was copied (Go:
    shm.ErrMoved); it is read again over the socket."""
