#!/usr/bin/env python3
"""Assemble a one-layer OCI image archive from local files, without a registry or a daemon.

No base image can be pulled on the machines this project is built on, so images are made the
way a `FROM scratch` Dockerfile would make them: the files a program needs and nothing else.
`--with-libs` adds exactly the shared libraries `ldd` reports for an ELF file (and its
interpreter), so a glibc binary runs in the image without a distribution underneath.

The output is an OCI image layout in a tar (`oci-layout`, `index.json`, `blobs/sha256/...`),
loadable with `ctr -n k8s.io images import FILE` (containerd reads the full name from the
`io.containerd.image.name` annotation), `skopeo copy oci-archive:FILE ...` or `docker load`
(Docker 25+). The archive is reproducible: fixed timestamps, owners and order, so the same
inputs give the same digests.

Usage (repeatable options may be given several times):

  oci.py --name REF --out FILE
         [--add SRC:DEST[:MODE]] [--with-libs DEST] [--symlink TARGET:DEST] [--dir DEST[:MODE]]
         [--text DEST=CONTENT] [--user USER] [--entrypoint JSON] [--cmd JSON]
         [--env K=V] [--port N/tcp] [--label K=V] [--workdir DIR]

Prints the manifest digest on stdout. Stdlib only.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path, PurePosixPath

# SOURCE_DATE_EPOCH (reproducible-builds.org) if set, else the epoch.
EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))

MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


class ImageError(Exception):
    """Bad input: a missing file, an ldd failure, a malformed option."""


def norm_dest(dest: str) -> str:
    p = PurePosixPath("/" + dest.lstrip("/"))
    if ".." in p.parts:
        raise ImageError(f"destination {dest!r} leaves the image root")
    return str(p)


def ldd_paths(elf: Path) -> list[str]:
    """Absolute paths of the shared libraries and the interpreter `ldd` resolves for `elf`;
    empty for a static binary. Fails if a library is not found."""
    r = subprocess.run(["ldd", str(elf)], capture_output=True, text=True)
    text = r.stdout + r.stderr
    if "not a dynamic executable" in text or "statically linked" in text:
        return []
    if r.returncode != 0:
        raise ImageError(f"ldd {elf} failed: {text.strip()}")
    out = []
    for line in r.stdout.splitlines():
        line = line.strip()
        if "=> not found" in line:
            raise ImageError(f"{elf}: {line}")
        m = re.match(r"^\S+ => (/\S+) \(0x[0-9a-f]+\)$", line) or re.match(r"^(/\S+) \(0x[0-9a-f]+\)$", line)
        if m:
            out.append(m.group(1))
        elif not line.startswith("linux-vdso") and line:
            raise ImageError(f"unexpected ldd line for {elf}: {line!r}")
    return out


class Layer:
    """The files of the one layer, keyed by their path in the image."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[str, int, bytes | str]] = {}  # path -> (kind, mode, data)

    def _parents(self, dest: str) -> None:
        for parent in list(PurePosixPath(dest).parents)[:-1]:
            self.entries.setdefault(str(parent), ("dir", 0o755, b""))

    def dir(self, dest: str, mode: int = 0o755) -> None:
        dest = norm_dest(dest)
        self._parents(dest)
        self.entries[dest] = ("dir", mode, b"")

    def file(self, dest: str, data: bytes, mode: int) -> None:
        dest = norm_dest(dest)
        self._parents(dest)
        self.entries[dest] = ("file", mode, data)

    def symlink(self, target: str, dest: str) -> None:
        dest = norm_dest(dest)
        self._parents(dest)
        self.entries[dest] = ("symlink", 0o777, target)

    def tar(self) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for path in sorted(self.entries):
                kind, mode, data = self.entries[path]
                ti = tarfile.TarInfo(path.lstrip("/"))
                ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname, ti.mode = EPOCH, 0, 0, "", "", mode
                if kind == "dir":
                    ti.type = tarfile.DIRTYPE
                    tf.addfile(ti)
                elif kind == "symlink":
                    ti.type = tarfile.SYMTYPE
                    ti.linkname = str(data)
                    tf.addfile(ti)
                else:
                    assert isinstance(data, bytes)
                    ti.size = len(data)
                    tf.addfile(ti, io.BytesIO(data))
        return buf.getvalue()


def parse_mode(s: str | None, default: int) -> int:
    return int(s, 8) if s else default


def build_layer(a: argparse.Namespace) -> Layer:
    layer = Layer()
    for spec in a.dir:
        dest, _, mode = spec.partition(":")
        layer.dir(dest, parse_mode(mode, 0o755))
    added: dict[str, Path] = {}
    for spec in a.add:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            raise ImageError(f"--add wants SRC:DEST[:MODE], got {spec!r}")
        src = Path(parts[0])
        if not src.is_file():
            raise ImageError(f"--add: {src} is not a file")
        st_mode = src.stat().st_mode & 0o777
        layer.file(parts[1], src.read_bytes(), parse_mode(parts[2] if len(parts) == 3 else None,
                                                           0o755 if st_mode & 0o111 else 0o644))
        added[norm_dest(parts[1])] = src
    for spec in a.text:
        dest, sep, content = spec.partition("=")
        if not sep:
            raise ImageError(f"--text wants DEST=CONTENT, got {spec!r}")
        layer.file(dest, content.replace("\\n", "\n").encode(), 0o644)
    for spec in a.symlink:
        target, _, dest = spec.partition(":")
        if not dest:
            raise ImageError(f"--symlink wants TARGET:DEST, got {spec!r}")
        layer.symlink(target, dest)
    for dest in a.with_libs:
        src = added.get(norm_dest(dest))
        if src is None:
            raise ImageError(f"--with-libs {dest}: not added with --add")
        for lib in ldd_paths(src):
            # The library goes where the loader found it on the build machine (the path ldd
            # prints); its bytes are the file the path resolves to.
            layer.file(lib, Path(lib).resolve().read_bytes(), 0o755)
    return layer


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def kv(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep:
            raise ImageError(f"--{what} wants K=V, got {it!r}")
        out[k] = v
    return out


def build(a: argparse.Namespace) -> str:
    if ":" not in a.name.rsplit("/", 1)[-1]:
        raise ImageError(f"--name {a.name!r} has no tag")
    layer_tar = build_layer(a).tar()
    # mtime=0 in the gzip header: reproducible.
    layer_gz = gzip.compress(layer_tar, compresslevel=6, mtime=0)
    created = datetime.datetime.fromtimestamp(EPOCH, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    cfg: dict = {"Env": a.env or ["PATH=/usr/local/bin:/usr/bin:/bin"], "WorkingDir": a.workdir}
    if a.user:
        cfg["User"] = a.user
    if a.entrypoint:
        cfg["Entrypoint"] = json.loads(a.entrypoint)
    if a.cmd:
        cfg["Cmd"] = json.loads(a.cmd)
    if a.port:
        cfg["ExposedPorts"] = {p: {} for p in a.port}
    labels = kv(a.label, "label")
    if labels:
        cfg["Labels"] = labels
    config = {
        "created": created, "architecture": "amd64", "os": "linux", "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": [sha(layer_tar)]},
        "history": [{"created": created, "created_by": "images/oci.py"}],
    }
    config_b = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2, "mediaType": MT_MANIFEST,
        "config": {"mediaType": MT_CONFIG, "digest": sha(config_b), "size": len(config_b)},
        "layers": [{"mediaType": MT_LAYER, "digest": sha(layer_gz), "size": len(layer_gz)}],
    }
    if labels:
        manifest["annotations"] = labels
    manifest_b = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    tag = a.name.rsplit(":", 1)[1]
    index = {
        "schemaVersion": 2, "mediaType": MT_INDEX,
        "manifests": [{
            "mediaType": MT_MANIFEST, "digest": sha(manifest_b), "size": len(manifest_b),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": a.name,
                            "org.opencontainers.image.ref.name": tag},
        }],
    }
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True, separators=(",", ":")).encode(),
    }
    for blob in (layer_gz, config_b, manifest_b):
        files["blobs/sha256/" + sha(blob)[7:]] = blob
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for d in ("blobs", "blobs/sha256"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, EPOCH
            tf.addfile(ti)
        for name in sorted(files):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(files[name]), 0o644, EPOCH
            tf.addfile(ti, io.BytesIO(files[name]))
    tmp.replace(out)
    return sha(manifest_b)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--name", required=True, help="full image reference, e.g. ghcr.io/o/x:1.0")
    p.add_argument("--out", required=True, help="archive to write")
    p.add_argument("--add", action="append", default=[], metavar="SRC:DEST[:MODE]")
    p.add_argument("--with-libs", action="append", default=[], metavar="DEST",
                   help="add the shared libraries ldd reports for this added ELF file")
    p.add_argument("--symlink", action="append", default=[], metavar="TARGET:DEST")
    p.add_argument("--dir", action="append", default=[], metavar="DEST[:MODE]")
    p.add_argument("--text", action="append", default=[], metavar="DEST=CONTENT",
                   help="a small file (mode 0644); \\n in CONTENT is a newline")
    p.add_argument("--user", default="")
    p.add_argument("--entrypoint", default="", help="JSON list")
    p.add_argument("--cmd", default="", help="JSON list")
    p.add_argument("--env", action="append", default=[], metavar="K=V")
    p.add_argument("--port", action="append", default=[], metavar="N/tcp")
    p.add_argument("--label", action="append", default=[], metavar="K=V")
    p.add_argument("--workdir", default="/")
    a = p.parse_args(argv)
    try:
        print(build(a))
    except (ImageError, OSError, json.JSONDecodeError) as e:
        print(f"oci.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
