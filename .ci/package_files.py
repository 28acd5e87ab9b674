"""Exit 1 unless the built sdist and wheel in DIST each hold every file the package needs at
run time: each module, Lua script, template and static file git tracks under wheelq/.

    python .ci/package_files.py DIST
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    dist = Path(sys.argv[1])
    tracked = subprocess.run(
        ["git", "ls-files", "wheelq"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    wanted = {path for path in tracked if not path.endswith((".pyc", ".md"))}
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(f"expected one wheel and one sdist in {dist}, found {wheels + sdists}")
        return 1
    with zipfile.ZipFile(wheels[0]) as wheel:
        in_wheel = set(wheel.namelist())
    with tarfile.open(sdists[0]) as sdist:
        in_sdist = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    failed = 0
    for what, held in (("wheel", in_wheel), ("sdist", in_sdist)):
        missing = sorted(wanted - held)
        if missing:
            failed = 1
            print(f"{what} {dist} lacks {len(missing)} files: {', '.join(missing[:10])}")
    kinds = {Path(p).suffix for p in wanted}
    print(f"wheel and sdist hold all {len(wanted)} package files ({', '.join(sorted(kinds))})")
    return failed


if __name__ == "__main__":
    sys.exit(main())
