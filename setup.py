"""Build hook for `scrapyd-deploy`, which runs ``python setup.py bdist_egg``.

The metadata, the packages (`vesti_scrapy`, `spiders`, `pipelines`) and the
``scrapy: settings = vesti_scrapy.settings`` entry point that scrapyd's runner looks up are
declared in pyproject.toml; with a ``[project]`` table there, setuptools would ignore
``entry_points`` given here. Without this file scrapyd-deploy writes its own, naming the
project "project" and packaging nothing but the settings.

What this file adds is package data: every non-Python file inside the packages, so a data
file added later ships in the egg without anyone remembering to list it. Inside the egg
(a zip) such files must be read with ``pkgutil.get_data``, never through a path.
"""

from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
PACKAGES = ("vesti_scrapy", "spiders", "pipelines")
# Build and cache debris that must never ship.
SKIP_SUFFIXES = (".py", ".pyc", ".pyo")


def package_data() -> dict[str, list[str]]:
    data: dict[str, list[str]] = {}
    for package in PACKAGES:
        base = ROOT / package
        files = sorted(
            path.relative_to(base).as_posix()
            for path in base.rglob("*")
            if path.is_file()
            and path.suffix not in SKIP_SUFFIXES
            and "__pycache__" not in path.relative_to(base).parts
        )
        if files:
            data[package] = files
    return data


setup(package_data=package_data())
