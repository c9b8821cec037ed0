"""Package list for setuptools; everything else is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

setup(
    packages=[
        *find_namespace_packages("platform", include=["tidings*"]),
        "tidings.schemas",
        "tidings.topics",
    ]
)
