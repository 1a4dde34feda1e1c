"""The package as a distribution: one version, type hints, one error root."""

import inspect
import pathlib
import re

import pytest

import shade
import shade.errors
import shade.shm

PKG = pathlib.Path(shade.__file__).parent


def test_every_exception_derives_from_shade_error():
    for mod in (shade.errors, shade.shm, shade):
        for name, obj in vars(mod).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                assert issubclass(obj, shade.ShadeError), f"{mod.__name__}.{name}"
    assert issubclass(shade.InvalidArgument, ValueError)
    assert issubclass(shade.OutOfRange, IndexError)
    assert issubclass(shade.MissingDependency, ImportError)


def test_raise_statements_name_package_errors():
    """Every raise in the package raises one of its own exceptions (or
    re-raises)."""
    own = {n for n, o in vars(shade.errors).items()
           if inspect.isclass(o) and issubclass(o, shade.ShadeError)}
    own |= {"_request_error"}  # builds a RequestError
    for path in PKG.glob("*.py"):
        for m in re.finditer(r"^[ \t]*raise[ \t]+([A-Za-z_][\w.]*)", path.read_text(), re.M):
            name = m.group(1).split(".")[-1]
            assert name in own, f"{path.name}: raise {m.group(1)}"


def test_one_version_source():
    text = (PKG / "_version.py").read_text()
    assert f'__version__ = "{shade.__version__}"' in text
    tomllib = pytest.importorskip("tomllib")
    with open(PKG.parent / "pyproject.toml", "rb") as f:
        pyproject = tomllib.load(f)
    project = pyproject["project"]
    assert project["name"] == "shade-mesh"
    assert "version" not in project and "version" in project["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "shade._version.__version__"}
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["shade"]
    for path in PKG.glob("*.py"):
        if path.name != "_version.py":
            assert "__version__ =" not in path.read_text(), path.name


def test_typed():
    assert (PKG / "py.typed").exists()
    for fn in (shade.Client.mget, shade.Client.close, shade.Client.stats, shade.shm.Mapping.copy,
               shade.shm.Mapping.close, shade.shm.map_peer_memory, shade.labels_from_manifest):
        assert "return" in fn.__annotations__, fn.__qualname__
