"""Packages of the one import name ``headrace``: ``src/headrace`` holds the root and most
parts; the folders the project's layout asks for at the top of the repository
(``producers/``, ``workers/``, ``consumers/``, ``schemas/``) are mapped into it
(``headrace.workers`` is ``workers/``). Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

MAPPED = ("producers", "workers", "consumers", "schemas")

setup(
    packages=find_packages("src")
    + [
        f"headrace.{package}"
        for package in find_packages(
            ".", include=[f"{top}{sub}" for top in MAPPED for sub in ("", ".*")]
        )
    ],
    package_dir={"": "src", **{f"headrace.{top}": top for top in MAPPED}},
)
