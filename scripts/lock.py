"""Write requirements.lock from the project's virtual environment: every installed distribution pinned
to its version, with the SHA-256 of each of that version's files on PyPI, so ``pip install -r
requirements.lock`` (scripts/setup.sh) checks what it downloads (pip's hash-checking mode).

    .venv/bin/pip install NEW-PACKAGE && .venv/bin/python scripts/lock.py

All files of a version are listed (every platform's wheel and the sdist), so the lock installs on
other machines too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

LOCK = Path(__file__).resolve().parents[1] / "requirements.lock"
INDEX = "https://pypi.org/simple"  # PEP 691: the simple index as JSON, every file with its hashes


def pins() -> list[tuple[str, str]]:
    # --all: setuptools too, which torch requires (hash-checking mode installs nothing unpinned); pip
    # itself is the venv's own
    command = [sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable", "--disable-pip-version-check"]
    frozen = subprocess.run(command, check=True, capture_output=True, text=True).stdout  # noqa: S603
    out = []
    for line in frozen.splitlines():
        name, sep, version = line.partition("==")
        if name == "pip":
            continue
        if not sep:
            sys.exit(f"cannot lock {line!r}: only packages installed from PyPI by version can be pinned")
        out.append((name, version))
    return sorted(out, key=lambda p: p[0].lower())


def _version_of(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except (InvalidSdistFilename, InvalidWheelFilename):
        return None  # an egg or an exe of old releases


def hashes(pin: tuple[str, str]) -> list[str]:
    name, version = pin
    url = f"{INDEX}/{canonicalize_name(name)}/"
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})  # noqa: S310
    with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 - INDEX is https
        files = json.load(answer)["files"]
    found = sorted({f["hashes"]["sha256"] for f in files
                    if _version_of(f["filename"]) == Version(version) and "sha256" in f["hashes"]})
    if not found:
        sys.exit(f"PyPI lists no files for {name}=={version}")
    return found


def main() -> None:
    found = pins()
    with ThreadPoolExecutor(max_workers=16) as pool:
        digests = list(pool.map(hashes, found))
    entries = [" \\\n    ".join([f"{name}=={version}", *(f"--hash=sha256:{s}" for s in sums)])
               for (name, version), sums in zip(found, digests, strict=True)]
    LOCK.write_text("\n".join(entries) + "\n")
    print(f"wrote {LOCK}: {len(found)} packages, {sum(map(len, digests))} hashes")


if __name__ == "__main__":
    main()
