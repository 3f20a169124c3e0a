"""What pyproject.toml promises holds in the tree: every package-data pattern names files that exist, the
license file is there, and the console script resolves."""
from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_data_pattern_matches_files():
    for pkg, patterns in PROJECT["tool"]["setuptools"]["package-data"].items():
        base = ROOT / pkg.replace(".", "/")
        for pat in patterns:
            assert [p for p in base.glob(pat) if p.is_file()], f"package-data {pkg}:{pat} matches no file"


def test_license_file_and_classifiers():
    lic = PROJECT["project"]["license"]["file"]
    assert (ROOT / lic).is_file() and "MIT" in (ROOT / lic).read_text()
    assert "License :: OSI Approved :: MIT License" in PROJECT["project"]["classifiers"]


def test_console_script_resolves():
    mod, _, fn = PROJECT["project"]["scripts"]["amdq"].partition(":")
    assert callable(getattr(importlib.import_module(mod), fn))
