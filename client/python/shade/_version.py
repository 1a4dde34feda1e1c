"""The package's version: the one source, read by pyproject.toml and
exported as ``shade.__version__``."""

__version__ = "0.1.0"
