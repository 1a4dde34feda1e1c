"""Exceptions raised by the shade client. All derive from ShadeError."""


class ShadeError(Exception):
    """Base class of every error this package raises."""


class PeerUnavailable(ShadeError):
    """The local shade-peer could not be reached within the client's retry_for."""


class RequestError(ShadeError):
    """The peer refused a request (a Redis error reply); never retried.

    ``code`` is the reply's error code (``ERR``, ``TIMEOUT``, ``WRONGPASS``...).
    """

    def __init__(self, message, code="ERR"):
        super().__init__(message)
        self.code = code


class OrderTimeout(RequestError):
    """SHADE.ORDER: the epoch's order was not published within the timeout."""


class AuthError(RequestError):
    """The peer requires a password, or refused the one given."""


class SampleError(ShadeError):
    """A sample could not be read: an error reply for it, or nil (index out of
    range or unknown dataset)."""
