"""The review console's committed bundle is what web/ makes from web/package-lock.json.

The bundle (symfonic_stream/gateway/static/console.js) is committed so that a build needs no
npm: `pip install .` from a clone, the sdist, the wheel and the image all carry it. This
test keeps it honest: it rebuilds the bundle as `make web` does (`npm ci` at the lock file's
versions, then esbuild through web/build.mjs) in a copy of web/, and the bytes must be the
committed ones. When web/ changes, `make web` and commit the bundle with the change.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.packaging.sources import ROOT

BUNDLE = Path("symfonic_stream/gateway/static/console.js")


def test_the_committed_bundle_is_what_the_lock_file_builds(tmp_path: Path) -> None:
    web = tmp_path / "web"
    web.mkdir()
    for name in ("package.json", "package-lock.json", "build.mjs"):
        shutil.copy(ROOT / "web" / name, web / name)
    shutil.copytree(ROOT / "web" / "src", web / "src")
    (tmp_path / BUNDLE).parent.mkdir(parents=True)  # build.mjs writes to ../<BUNDLE>
    for argv in (["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                 ["node", "build.mjs", "console"]):
        done = subprocess.run(argv, cwd=web, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    rebuilt = (tmp_path / BUNDLE).read_bytes()
    assert rebuilt == (ROOT / BUNDLE).read_bytes(), (
        f"{BUNDLE} is not what web/ builds: run `make web` and commit the bundle")
