"""Would packing blobs pay? Files, fsyncs, disk and write time of loose blobs vs packs (issue 17 item 4).

    python bench/packs.py --calls 300

1. Runs a real registered grid (``bench/grid.py``'s ``_prepare``: the real runner, agent,
   store with fsync on, ledger, zero-latency simulator) in a temporary directory, with
   ``os.fsync``/``os.fdatasync`` counted and every ``os.open`` with ``O_CREAT`` timed, in
   process (the commit pass's worker threads included). It reports per model call: files
   left under the runs directory (objects, runs, ledgers, journals), fsyncs, bytes on disk
   (``st_blocks * 512``) against logical bytes (the difference is block slack), and the
   time spent creating files. It also records, for every commit pass, which blobs that
   pass moved into place: those are the replay's groups, so the group size is the grid's own.
2. Replays the same blobs (read back from ``objects/``), group by group, twice:
   (a) loose, the store's scheme: a temporary file each, every one fsynced (8 at once, as
       the commit pass does), renamed into ``objects/<aa>/``, then one directory fsync per
       group (the store skips even that one: FORMAT.md "Durability"; counted to be fair to
       the crash-safe reading of the scheme);
   (b) packed: an append-only pack, each entry a header line ``<sha256 hex> <length>\\n``
       then the bytes, so its index (digest -> offset, length) can be rebuilt by a scan and
       is derived; one write and ONE fsync per group per pack touched; the index is written
       once at the end (derived, not fsynced). Two granularities: one pack per invocation
       (every blob of this process) and one pack per run (a blob goes in the pack of the
       first sealed run that names it; a group touching k runs costs k fsyncs).
   Both print wall time, files, fsyncs and disk bytes.

Since blobs are packed (FORMAT.md "Packs"), a grid moves no blob into place, so there is
nothing to replay: the script then prints the measured figures only, as its last line
``packs adopted files_per_call=A fsyncs_per_call=C disk_kb_per_call=E create_ms_per_call=G``
(compare with a run on a tree before the change, whose A, C, E are the loose figures).

Last line (loose layout): ``packs files_per_call=A->B fsyncs_per_call=C->D disk_kb_per_call=E->F
write_ms_per_call=G->H`` where A, C, E are the grid's whole runs directory per call as
measured, B, D, F the same with its loose blobs replaced by the per-invocation pack
(measured in the replay), and G, H the replay's blob write time per call, loose and packed.

Verdict (2026-12-02, ext4 on a 2-core VM shared with other work, load 3-5; ``--calls 300``
gives 729 calls, 120 runs; ``--repeat 7``): blobs are 94% of the runs directory's files
(2.64 of 2.81 per call, median 344 bytes, so 57% of their disk is block slack) and one
fsync each. One pack per invocation takes the directory to 0.18 files per call, fsyncs
from ~5.0 to ~3.3 per call, disk from 17.0 to 9.4 KB per call, and the replayed blob
writes from 1.2-2.1 ms to 0.4-0.6 ms per call (the store's own scheme, without the
directory fsync, is the 1.0-1.2 ms figure); file creation for blobs, 0.4-1.0 ms per call
in the grid, happens on the agent's path and goes away. A commit pass covers only ~3 blobs
at concurrency 8 and 32, so the win is per blob, not from bigger groups. A pack per run
keeps a third of the files and half the fsyncs of loose blobs: the invocation (one pack
per writer process, named per writer as ledgers are) is the granularity worth adopting,
once the format questions in the report are answered. Rerun before deciding: single
rounds vary by 2x with the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures as cf
import hashlib
import math
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grid  # noqa: E402  (the same grid bench/grid.py runs)

from benchclaw.evidence import _commit  # noqa: E402
from benchclaw.experiments.runner import run_experiment  # noqa: E402


class Meter:
    """Counts fsyncs and times file creation, in process, by wrapping ``os`` functions
    (every module here calls them through ``os.``, so the wrappers see the commit pass's
    worker threads too). ``stop`` puts the originals back."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fsyncs = 0
        self.creates = 0
        self.create_s = 0.0
        self.create_by: dict[str, list] = {}  # area of the runs directory -> [files, seconds]
        self._orig = (os.fsync, os.fdatasync, os.open)

    def start(self) -> "Meter":
        fsync, fdatasync, op = self._orig

        def counted(real):
            def f(fd):
                with self.lock:
                    self.fsyncs += 1
                return real(fd)
            return f

        def timed_open(path, flags, *a, **kw):
            if not flags & os.O_CREAT:
                return op(path, flags, *a, **kw)
            t0 = time.perf_counter()
            try:
                return op(path, flags, *a, **kw)
            finally:
                dt = time.perf_counter() - t0
                with self.lock:
                    self.creates += 1
                    self.create_s += dt
                    by = self.create_by.setdefault(_area(path), [0, 0.0])
                    by[0] += 1
                    by[1] += dt
        os.fsync, os.fdatasync, os.open = counted(fsync), counted(fdatasync), timed_open
        return self

    def stop(self) -> None:
        os.fsync, os.fdatasync, os.open = self._orig


def _area(path) -> str:
    """The runs directory's folder a created file is in (``objects`` for a staged blob)."""
    parts = Path(path).parts
    for area in ("objects", "open", "runs", "ledgers", "journals", "locks"):
        if area in parts:
            return area
    return "other"


def scan_pack(pack: Path) -> dict[str, tuple[int, int]]:
    """Rebuild a pack's index by scanning it, re-hashing every entry: what recovery and a
    verifier would do. Raises ValueError on a torn tail or an entry whose bytes do not hash
    to its name, so the replay shows content addressing survives packing."""
    data, index, at = pack.read_bytes(), {}, 0
    while at < len(data):
        nl = data.index(b"\n", at)
        hexd, length = data[at:nl].decode().split(" ")
        start, end = nl + 1, nl + 1 + int(length)
        if end > len(data):
            raise ValueError(f"{pack}: torn entry at byte {at}")
        if hashlib.sha256(data[start:end]).hexdigest() != hexd:
            raise ValueError(f"{pack}: entry at byte {at} does not hash to {hexd}")
        index[hexd] = (start, int(length))
        at = end
    return index


def check_packs(out: Path) -> int:
    """Every pack in ``out`` scans clean and its scan equals the index written beside it;
    returns the entries checked."""
    n = 0
    for pack in out.glob("*.pack"):
        scanned = scan_pack(pack)
        written = {h: (int(o), int(ln)) for h, o, ln in
                   (line.split() for line in pack.with_suffix(".idx").read_text().splitlines())}
        if scanned != written:
            raise ValueError(f"{pack}: the written index differs from the scan")
        n += len(scanned)
    return n


def record_groups() -> tuple[list[list[str]], object]:
    """Wrap the committer's pass so each pass's blob renames (their destinations) are kept:
    the groups a real grid commits together. Returns (groups, the original method)."""
    groups: list[list[str]] = []
    orig = _commit.Committer._pass

    def pass_(self, files, dirs, renames):
        if renames:
            groups.append([str(dst) for _, _, dst, _ in renames])
        return orig(self, files, dirs, renames)
    _commit.Committer._pass = pass_
    return groups, orig


def tree(root: Path) -> dict[str, list[int]]:
    """Per top-level folder of the runs directory: [files, logical bytes, disk bytes]."""
    out: dict[str, list[int]] = {}
    for dirpath, _, names in os.walk(root):
        rel = Path(dirpath).relative_to(root).parts
        key = rel[0] if rel else "."
        for n in names:
            st = os.stat(os.path.join(dirpath, n))
            got = out.setdefault(key, [0, 0, 0])
            got[0] += 1
            got[1] += st.st_size
            got[2] += st.st_blocks * 512
    return out


def run_grid(tmp: Path, calls: int, concurrency: int) -> dict:
    """The grid with the meter on; its figures, its blob groups and the runs directory."""
    seeds = max(1, math.ceil(calls / (grid.runs_per_seed() * grid.CALLS_PER_RUN_GUESS)))
    totals = {"sim_cpu": 0.0, "calls": 0}
    tmp.mkdir()
    groups, orig = record_groups()
    meter = Meter().start()  # from registration on: the whole runs directory is counted
    try:
        store = grid._prepare(tmp, seeds, concurrency)
        backends = grid._backends(lambda p: grid.CpuMeter(p, totals))
        w0 = time.perf_counter()
        res = asyncio.run(run_experiment(store, "BENCH", backends=backends, handle_signals=False))
        wall = time.perf_counter() - w0
        _commit.committer().wait()  # whatever rides on the exit flush, counted too
    finally:
        meter.stop()
        _commit.Committer._pass = orig
    return {"res": res, "calls": totals["calls"], "wall": wall, "meter": meter, "groups": groups,
            "root": store.root}


def blob_owner(root: Path) -> dict[str, str]:
    """hex digest -> the first sealed run (by name) whose bytes name it: the per-run pack
    a blob would go in (a blob shared by runs is stored once)."""
    owner: dict[str, str] = {}
    pat = re.compile(rb"sha256:([0-9a-f]{64})")
    for p in sorted((root / "runs").glob("*/*.jsonl")):
        for m in pat.finditer(p.read_bytes()):
            owner.setdefault(m.group(1).decode(), p.stem)
    return owner


def replay_loose(out: Path, groups: list[list[tuple[str, bytes]]], dirsync: bool = True) -> dict:
    """The store's scheme: tmp file, fsync (8 in flight), rename, and (``dirsync``) one
    directory fsync a group (the store itself leaves that to the journal's order)."""
    (out / "tmp").mkdir(parents=True)
    meter = Meter().start()
    pool = cf.ThreadPoolExecutor(8)
    made: set[str] = set()
    t0 = time.perf_counter()
    try:
        for group in groups:
            staged = []
            for hexd, data in group:
                tmp = out / "tmp" / f"{hexd}.t"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                os.write(fd, data)
                staged.append((fd, tmp, hexd))
            list(pool.map(lambda s: os.fsync(s[0]), staged))
            for fd, tmp, hexd in staged:
                os.close(fd)
                if hexd[:2] not in made:
                    (out / hexd[:2]).mkdir(exist_ok=True)
                    made.add(hexd[:2])
                os.replace(tmp, out / hexd[:2] / hexd)
            if dirsync:
                dfd = os.open(out, os.O_RDONLY)
                os.fsync(dfd)
                os.close(dfd)
        wall = time.perf_counter() - t0
    finally:
        meter.stop()
        pool.shutdown()
    (out / "tmp").rmdir()
    return _replayed(out, wall, meter)


def replay_packs(out: Path, groups: list[list[tuple[str, bytes]]], pack_of) -> dict:
    """Append-only packs: per group, each pack touched gets one write of its entries and one
    fsync; a new pack's directory entry is fsynced once (its creation). The index
    (``<pack>.idx``: hex, offset, length per line) is derived and written at the end."""
    out.mkdir(parents=True)
    meter = Meter().start()
    fds: dict[str, int] = {}
    sizes: dict[str, int] = {}
    index: dict[str, list[str]] = {}
    t0 = time.perf_counter()
    try:
        for group in groups:
            by_pack: dict[str, list[bytes]] = {}
            new = False
            for hexd, data in group:
                name = pack_of(hexd)
                if name not in fds:
                    fds[name] = os.open(out / f"{name}.pack", os.O_WRONLY | os.O_CREAT | os.O_EXCL
                                        | os.O_APPEND | os.O_CLOEXEC, 0o644)
                    sizes[name], index[name], new = 0, [], True
                head = f"{hexd} {len(data)}\n".encode()
                index[name].append(f"{hexd} {sizes[name] + len(head)} {len(data)}\n")
                sizes[name] += len(head) + len(data)
                by_pack.setdefault(name, []).extend((head, data))
            for name, parts in by_pack.items():
                os.write(fds[name], b"".join(parts))
                os.fsync(fds[name])
            if new:
                dfd = os.open(out, os.O_RDONLY)
                os.fsync(dfd)
                os.close(dfd)
        for name, lines in index.items():
            os.close(fds[name])
            (out / f"{name}.idx").write_text("".join(lines))
        wall = time.perf_counter() - t0
    finally:
        meter.stop()
    return _replayed(out, wall, meter)


def _replayed(out: Path, wall: float, meter: Meter) -> dict:
    t = tree(out)
    return {"wall": wall, "files": sum(v[0] for v in t.values()), "fsyncs": meter.fsyncs,
            "logical": sum(v[1] for v in t.values()), "disk": sum(v[2] for v in t.values()),
            "create_s": meter.create_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300, help="at least this many model calls")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3, help="replay rounds (interleaved; the median is kept)")
    ap.add_argument("--tmpdir", default=None, help="put the runs directory here (its file system matters)")
    args = ap.parse_args()
    grid.TMPDIR[0] = args.tmpdir
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp_s:
        tmp = Path(tmp_s)
        g = run_grid(tmp / "grid", args.calls, args.concurrency)
        n, root, m = g["calls"], g["root"], g["meter"]
        t = tree(root)
        files = sum(v[0] for v in t.values())
        disk = sum(v[2] for v in t.values())
        logical = sum(v[1] for v in t.values())
        print(f"grid {g['res'].status}: {len(g['res'].runs)} runs, {n} model calls, concurrency "
              f"{args.concurrency}, fsync on, wall {g['wall']:.2f} s; load {grid._load()}")
        for key in sorted(t):
            f, lg, dk = t[key]
            print(f"  {key:9s} {f:6d} files ({f / n:6.2f}/call)  logical {lg / 1024:9.1f} KB  "
                  f"disk {dk / 1024:9.1f} KB  (slack {100 * (1 - lg / dk) if dk else 0:4.1f}%)")
        print(f"  total     {files:6d} files ({files / n:6.2f}/call)  logical {logical / n / 1024:.2f} KB/call"
              f"  disk {disk / n / 1024:.2f} KB/call")
        print(f"fsyncs {m.fsyncs} ({m.fsyncs / n:.2f}/call); files created (os.open O_CREAT) {m.creates} "
              f"({m.creates / n:.2f}/call), {1000 * m.create_s / n:.3f} ms/call in creation "
              "(summed over threads)")
        print("  creation by area: " + ", ".join(
            f"{a} {c} files {1000 * sec / n:.3f} ms/call" for a, (c, sec) in sorted(m.create_by.items())))
        if not g["groups"]:  # no blob was renamed into place: this tree packs blobs already
            print(f"packs adopted files_per_call={files / n:.2f} fsyncs_per_call={m.fsyncs / n:.2f} "
                  f"disk_kb_per_call={disk / n / 1024:.2f} create_ms_per_call={1000 * m.create_s / n:.3f}")
            return
        # the replay's input: every blob a pass moved into place, in the grid's own groups
        groups = [[(Path(d).name, Path(d).read_bytes()) for d in grp] for grp in g["groups"]]
        blobs = sum(len(x) for x in groups)
        sizes = sorted(len(d) for grp in groups for _, d in grp)
        print(f"blob groups: {len(groups)} commit passes moved {blobs} blobs "
              f"({blobs / n:.2f}/call); blobs per pass mean {blobs / max(1, len(groups)):.1f}, "
              f"max {max(map(len, groups), default=0)}; blob size median {sizes[len(sizes) // 2]} B, "
              f"mean {sum(sizes) / len(sizes):.0f} B")
        owner = blob_owner(root)
        kinds = {"loose": lambda o: replay_loose(o, groups),
                 "loose/no-dirsync": lambda o: replay_loose(o, groups, dirsync=False),
                 "pack/invocation": lambda o: replay_packs(o, groups, lambda h: "invocation"),
                 "pack/run": lambda o: replay_packs(o, groups, lambda h: owner.get(h, "unnamed"))}
        got: dict[str, list[dict]] = {k: [] for k in kinds}
        for i in range(args.repeat):  # interleaved, so a burst of load hits every kind alike
            for k, f in kinds.items():
                got[k].append(f(tmp / f"r{i}-{k.replace('/', '-')}"))
        best = {k: sorted(v, key=lambda r: r["wall"])[len(v) // 2] for k, v in got.items()}  # median
        loose, inv, per_run = best["loose"], best["pack/invocation"], best["pack/run"]
        checked = [check_packs(tmp / f"r0-pack-{g_}") for g_ in ("invocation", "run")]
    print(f"pack check: {checked[0]} (per invocation) and {checked[1]} (per run) entries re-hashed; "
          "each index rebuilt by a scan equals the one written")
    print(f"replay: median of {args.repeat} interleaved rounds; load {grid._load()}")
    for name, r in best.items():
        print(f"replay {name:17s} wall {1000 * r['wall']:8.1f} ms ({1000 * r['wall'] / n:.3f} ms/call)  "
              f"files {r['files']:6d}  fsyncs {r['fsyncs']:5d}  disk {r['disk'] / 1024:8.1f} KB "
              f"(logical {r['logical'] / 1024:.1f} KB)  creation {1000 * r['create_s']:.1f} ms")
    objs = t.get("objects", [0, 0, 0])
    files_b = files - objs[0] + inv["files"]
    fsyncs_d = m.fsyncs - blobs + inv["fsyncs"]  # each loose blob costs one fsync in the grid
    disk_f = disk - objs[2] + inv["disk"]
    print(verdict(n, files, files_b, m.fsyncs, fsyncs_d, disk, disk_f, loose, inv, per_run))
    print(f"packs files_per_call={files / n:.2f}->{files_b / n:.2f} "
          f"fsyncs_per_call={m.fsyncs / n:.2f}->{fsyncs_d / n:.2f} "
          f"disk_kb_per_call={disk / n / 1024:.2f}->{disk_f / n / 1024:.2f} "
          f"write_ms_per_call={1000 * loose['wall'] / n:.3f}->{1000 * inv['wall'] / n:.3f}")


def verdict(n, files, files_b, fs, fs_d, disk, disk_f, loose, inv, per_run) -> str:
    """One paragraph from the figures (nothing in it is hard-coded but the reasoning)."""
    saved_ms = 1000 * (loose["wall"] - inv["wall"]) / n
    return (f"verdict: a pack per invocation would cut the runs directory from {files / n:.2f} to "
            f"{files_b / n:.2f} files per call ({100 * (1 - files_b / files):.0f}% fewer), fsyncs from "
            f"{fs / n:.2f} to {fs_d / n:.2f} per call, disk from {disk / n / 1024:.2f} to "
            f"{disk_f / n / 1024:.2f} KB per call, and blob write time by {saved_ms:.3f} ms per call "
            f"({1000 * loose['wall'] / n:.3f} -> {1000 * inv['wall'] / n:.3f}); a pack per run keeps "
            f"{per_run['files'] / n:.2f} files and {per_run['fsyncs'] / n:.2f} fsyncs per call for "
            f"the blobs. The fsyncs run off the event loop in the group commit's pool, so wall time per "
            f"call moves less than the fsync count; weigh the saving against a new format (torn pack "
            f"tails, an index to rebuild, merge as a union of packs, the bundle's layout).")


if __name__ == "__main__":
    sys.exit(main())
