#!/usr/bin/env python3
"""Copy one execution record and the blobs it references out of a state dir.

Usage: ci-bundle.py --state-dir STATE --to DIR RECORD_ID

DIR gets the state directory's layout for that record only:

    DIR/records/RECORD_ID.json          the record, byte for byte
    DIR/blobs/xx/<sha256 hex>           every blob it names

so that, after downloading the CI artifact,

    agentsandbox records verify --state-dir DIR RECORD_ID

re-hashes the record and every blob exactly as on the runner. A blob is
named in the record as "sha256:<hex>" (logs, job specs, the workflow file,
inputs, the decision log) or as an SRI "sha256-<base64>" NAR hash (outputs;
closure paths have NAR hashes too, but live in the Nix store, not in
blobs/, and are left out). Blobs that are JSON (sandbox entries) are
searched the same way. Only the Python standard library.
"""

import argparse
import base64
import json
import os
import re
import shutil
import sys

HEX = re.compile(r"sha256:([0-9a-f]{64})")
SRI = re.compile(r"sha256-([A-Za-z0-9+/]{43}=)")
RECORD_ID = re.compile(r"^[0-9abcdfghijklmnpqrsvwxyz]{52}$")
MAX_SCANNED = 1 << 20  # blobs searched for more digests: sandbox entries are small


def digests(text):
    out = set(HEX.findall(text))
    for b64 in SRI.findall(text):
        out.add(base64.b64decode(b64).hex())
    return out


def blob_path(root, hexdigest):
    return os.path.join(root, "blobs", hexdigest[:2], hexdigest)


def bundle(state, record_id, to):
    if not RECORD_ID.match(record_id):
        raise SystemExit("ci-bundle: %r is not a record id (52 characters of Nix base32); "
                         "give the full id apply printed" % record_id)
    src = os.path.join(state, "records", record_id + ".json")
    try:
        with open(src, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise SystemExit("ci-bundle: read record %s: %s" % (record_id, e))
    os.makedirs(os.path.join(to, "records"), exist_ok=True)
    dst = os.path.join(to, "records", record_id + ".json")
    with open(dst, "wb") as f:
        f.write(raw)
    os.chmod(dst, 0o444)

    todo = sorted(digests(raw.decode("utf-8", "replace")))
    seen, copied = set(), 0
    while todo:
        h = todo.pop()
        if h in seen:
            continue
        seen.add(h)
        path = blob_path(state, h)
        if not os.path.isfile(path) or os.path.islink(path):
            continue  # a closure path's hash, an input digest, ...: not a blob
        out = blob_path(to, h)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        shutil.copyfile(path, out)
        os.chmod(out, 0o444)
        copied += 1
        if os.path.getsize(path) <= MAX_SCANNED:
            with open(path, "rb") as f:
                data = f.read()
            try:
                json.loads(data)
            except ValueError:
                continue
            todo.extend(sorted(digests(data.decode("utf-8", "replace")) - seen))
    return copied


def main(argv):
    p = argparse.ArgumentParser(description="copy a record and its blobs out of a state dir")
    p.add_argument("--state-dir", required=True)
    p.add_argument("--to", required=True)
    p.add_argument("record")
    a = p.parse_args(argv)
    n = bundle(a.state_dir, a.record, a.to)
    print("ci-bundle: record %s and %d blobs in %s" % (a.record, n, a.to))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
