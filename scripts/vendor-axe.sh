#!/usr/bin/env bash
# Refreshes tests/vendor/axe-core/ (the accessibility checker the browser tests inject into
# each page) from the npm package, pinned: the version and integrity in its package.json.
#   scripts/vendor-axe.sh            re-fetch the pinned version and check it is what we ship
#   scripts/vendor-axe.sh 4.15.0     move to another version (then commit the new files)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dest="$here/tests/vendor/axe-core"
version=${1:-$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["vendored"]["version"])' "$dest/package.json")}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "axe-core@$version" >/dev/null && tar xzf "axe-core-$version.tgz")
integrity=$(cd "$work" && npm view "axe-core@$version" dist.integrity)
if [[ -z ${1:-} ]]; then
  pinned=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["vendored"]["integrity"])' "$dest/package.json")
  [[ $integrity == "$pinned" ]] || { echo "integrity differs from the pinned one" >&2; exit 1; }
  cmp "$work/package/axe.min.js" "$dest/axe.min.js" && echo "tests/vendor/axe-core is axe-core $version"
  exit 0
fi
cp "$work/package/axe.min.js" "$work/package/LICENSE" "$work/package/LICENSE-3RD-PARTY.txt" "$dest/"
sum=$(sha256sum "$dest/axe.min.js" | cut -d' ' -f1)
python3 - "$dest/package.json" "$version" "$integrity" "$sum" <<'PY'
import json, sys
path, version, integrity, digest = sys.argv[1:]
doc = json.load(open(path))
doc["dependencies"]["axe-core"] = version
doc["vendored"].update({"version": version, "integrity": integrity, "axe.min.js sha256": digest})
json.dump(doc, open(path, "w"), indent=2)
open(path, "a").write("\n")
PY
echo "tests/vendor/axe-core is now axe-core $version"
