"""Copy the browser assets the book serves itself from node_modules/ into _assets/vendor/.

The built book must work offline, so MathJax 3, require.js and the ipywidgets HTML manager
(npm packages pinned in package.json, installed by `npm install`) are served from the site:
`_config.yml` copies `_assets/` to the site root (`html_extra_path`) and points MathJax and
myst-nb's widget loader at `vendor/`.
"""

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = ROOT / "node_modules"
VENDOR = ROOT / "_assets" / "vendor"

# (source under node_modules, destination under _assets/vendor)
COPIES = [
    ("mathjax/es5", "mathjax"),
    ("requirejs/require.js", "require.min.js"),
    ("@jupyter-widgets/html-manager/dist", "html-manager"),
]
# Files no page loads: source maps, the other MathJax bundles, the non-AMD widget bundles.
SKIP = shutil.ignore_patterns(
    "*.map",
    "*.LICENSE.txt",
    "mml-*",
    "tex-svg*",
    "tex-mml-*",
    "tex-chtml-full*",
    "embed.js",
    "libembed-amd.js",
)


def main() -> int:
    missing = [src for src, _ in COPIES if not (MODULES / src).exists()]
    if missing:
        print(f"vendor_assets: missing {missing} in {MODULES}; run `npm install` first")
        return 1
    shutil.rmtree(VENDOR, ignore_errors=True)
    VENDOR.mkdir(parents=True)
    for src, dst in COPIES:
        source, target = MODULES / src, VENDOR / dst
        if source.is_dir():
            shutil.copytree(source, target, ignore=SKIP)
        else:
            shutil.copy2(source, target)
    size = sum(f.stat().st_size for f in VENDOR.rglob("*") if f.is_file())
    print(
        f"vendored {len(COPIES)} packages into {VENDOR.relative_to(ROOT)} ({size / 2**20:.1f} MiB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
