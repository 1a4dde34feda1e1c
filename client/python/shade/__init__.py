"""Trainer-side client of Shade, a peer-to-peer cache for training data.

``shade.Client`` talks to this node's shade-peer over its Unix socket (Redis
protocol); ``shade.torch`` (imported separately, needs PyTorch) holds the
dataset, the PADS batch sampler and the training-loop helpers.
"""

from .client import Client, labels_from_manifest
from .errors import (AuthError, OrderTimeout, PeerUnavailable, RequestError, SampleError,
                     ShadeError)

__all__ = [
    "Client", "labels_from_manifest", "ShadeError", "PeerUnavailable", "RequestError",
    "OrderTimeout", "AuthError", "SampleError",
]
__version__ = "0.1.0"
