#!/usr/bin/env python3
"""What scripts/test-real-es.sh asks of the cluster itself, with the run's API key and CA
(STORAGE_TEST_ES_URL, STORAGE_TEST_ES_API_KEY, STORAGE_TEST_ES_CA_FILE):

  real-es-cluster.py probe                 prints "<distribution> <version>" or fails saying why
  real-es-cluster.py save-script ID FILE   keeps stored script ID (if any) in FILE
  real-es-cluster.py cleanup ROOT FILE     deletes, by name, every index and index template
                                           whose name starts with ROOT, and puts back the
                                           stored script kept in FILE (or deletes it if
                                           there was none before)

Only the standard library: it runs before anything is installed.
"""

import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request

URL = os.environ.get("STORAGE_TEST_ES_URL", "").rstrip("/")
KEY = os.environ.get("STORAGE_TEST_ES_API_KEY") or None
CA = os.environ.get("STORAGE_TEST_ES_CA_FILE") or None


def call(method, path, body=None):
    """(status, parsed JSON or text) of one request."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(URL + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if KEY:
        req.add_header("Authorization", f"ApiKey {KEY}")
    context = ssl.create_default_context(cafile=CA) if URL.startswith("https") else None
    try:
        with urllib.request.urlopen(req, timeout=60, context=context) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, raw.decode(errors="replace")


def quote(name):
    return urllib.parse.quote(name, safe="*,")


def probe():
    try:
        status, info = call("GET", "/")
    except (urllib.error.URLError, OSError) as e:
        sys.exit(f"cannot reach {URL}: {e}")
    if status != 200:
        sys.exit(f"GET {URL}/ answered {status}: {info} (API key or CA missing?)")
    version = info.get("version", {})
    # The emulator says what it is, so that a rehearsal of the run is never taken for one
    # against a cluster.
    posing = " (the scanstore emulator)" if version.get("build_type") == "emulator" else ""
    print(f"{version.get('distribution', 'elasticsearch')} {version.get('number', '?')}{posing}")


def save_script(script_id, file):
    status, body = call("GET", f"/_scripts/{quote(script_id)}")
    kept = body.get("script") if status == 200 and isinstance(body, dict) else None
    with open(file, "w") as f:
        json.dump({"id": script_id, "script": kept}, f)
    if kept:
        print(f"stored script {script_id} exists on the cluster: kept, put back at the end")


def cleanup(root, file):
    # By name: clusters may refuse wildcard deletes (action.destructive_requires_name), and
    # only names starting with the run's own root are touched.
    if not root or len(root) < 6:
        sys.exit(f"refusing to clean up under a short root {root!r}")
    deleted = []
    _, indices = call("GET", f"/{quote(root)}*")
    for name in sorted(indices if isinstance(indices, dict) else {}):
        if name.startswith(root):
            call("DELETE", f"/{quote(name)}")
            deleted.append(name)
    _, templates = call("GET", f"/_index_template/{quote(root)}*")
    for t in (templates or {}).get("index_templates", []) if isinstance(templates, dict) else []:
        if t.get("name", "").startswith(root):
            call("DELETE", f"/_index_template/{quote(t['name'])}")
            deleted.append("template " + t["name"])
    try:
        with open(file) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        saved = None
    if saved:
        path = f"/_scripts/{quote(saved['id'])}"
        if saved["script"]:
            call("PUT", path, {"script": saved["script"]})
        elif call("DELETE", path)[0] == 200:
            deleted.append("stored script " + saved["id"])
    _, left = call("GET", f"/{quote(root)}*")
    left = sorted(n for n in (left if isinstance(left, dict) else {}) if n.startswith(root))
    print(f"cleanup: deleted {len(deleted)} (indices, templates, scripts) under {root}; "
          f"left: {', '.join(left) if left else 'none'}")
    if left:
        sys.exit(1)


def main(argv):
    if not URL:
        sys.exit("STORAGE_TEST_ES_URL is not set")
    if argv == ["probe"]:
        return probe()
    if len(argv) == 3 and argv[0] == "save-script":
        return save_script(argv[1], argv[2])
    if len(argv) == 3 and argv[0] == "cleanup":
        return cleanup(argv[1], argv[2])
    sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
