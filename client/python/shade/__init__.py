"""Trainer-side client of Shade, a peer-to-peer cache for training data.

``shade.Client`` talks to this node's shade-peer over its Unix socket (Redis
protocol); ``shade.torch`` (imported separately, needs PyTorch) holds the
dataset, the PADS batch sampler and the training-loop helpers.

Every exception the package raises derives from ``shade.ShadeError``. The
distribution is named ``shade-mesh`` (the name ``shade`` is another
project's on the Python package index); the import name is ``shade``.
"""

from ._version import __version__
from .client import Client, labels_from_manifest
from .errors import (AuthError, InvalidArgument, MapError, MissingDependency, Moved,
                     OrderTimeout, OutOfRange, PeerUnavailable, ProtocolError, RequestError,
                     SampleError, ShadeError)

__all__ = [
    "Client", "labels_from_manifest", "ShadeError", "PeerUnavailable", "RequestError",
    "OrderTimeout", "AuthError", "SampleError", "InvalidArgument", "OutOfRange",
    "MissingDependency", "ProtocolError", "MapError", "Moved", "__version__",
]
