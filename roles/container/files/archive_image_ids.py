"""Print, as a JSON list, the IDs an image of a `docker save` archive may have in an engine: its config digest
(the classic image store's ID) and its manifest digests (the containerd store's). Reads the archive's index only
(tarfile seeks past the layers), so it takes well under a second for a training image of several GB.

Usage: python3 archive_image_ids.py ARCHIVE REF      REF as the engine lists it (name:tag); [] when absent
"""

import json
import sys
import tarfile


def _digest(name: str) -> str:
    """'blobs/sha256/<hex>' (OCI layout) or '<hex>.json' (older docker save) -> 'sha256:<hex>'."""
    return "sha256:" + name.rsplit("/", 1)[-1].removesuffix(".json")


def image_ids(archive: str, ref: str) -> list[str]:
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("manifest.json"))
        index = json.load(tar.extractfile("index.json")) if "index.json" in names else {}
    ids = [_digest(entry["Config"]) for entry in manifest if ref in (entry.get("RepoTags") or [])]
    for entry in index.get("manifests", []) if ids else []:
        named = (entry.get("annotations") or {}).get("io.containerd.image.name", "")
        if named.endswith(ref) or len(manifest) == 1:
            ids.append(entry["digest"])
    return ids


if __name__ == "__main__":
    print(json.dumps(image_ids(sys.argv[1], sys.argv[2])))
