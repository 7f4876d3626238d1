"""Is the page-fault simulation wrong about the heap, or about what the trace allocates?

    python benchmarks/malloc_replay.py --profile benchmarks/results/cpu-xeon/cpu-profile-x12.json \\
        --models tcn-6x128@1024:16,gpt2-6x512@64:16 --out benchmarks/results/cpu-xeon/malloc-replay.md

For each corpus model (``name:batch``) a child process, as ``benchmarks/plain_measure.py``
runs it (plain glibc malloc, 2 threads, ``torch.no_grad``; the batches of ``--prior`` run
first, as a corpus process measures 1, 4 and 16 in turn), with a small ``malloc`` logger
preloaded (``LD_PRELOAD``; C source below, compiled with the system's ``cc``):

* counts the minor page faults of 5 calls after warm-up (``getrusage``), as the corpus does;
* logs every ``malloc``/``posix_memalign``/``free`` of one call, with the program break
  (``sbrk(0)``) after each and the calling thread: how often the real heap grew and was trimmed.

The parent then replays the main arena's logged calls (the main thread's allocations and
their frees from any thread: glibc gives the library's worker threads arenas of their own)
through :func:`ftmodel.estimate.allocator.stream_page_faults` (``--passes`` passes from an empty
heap; every thread's calls as one heap beside it) and through glibc itself in a fresh
interpreter (:func:`ftmodel.calibration.allocator.replay_in_glibc`), and compares the
allocations of 128 KiB or more that the call made with those the trace counts
(:func:`~ftmodel.estimate.allocator.allocations`), beside the prediction's own simulated
faults. Nothing is timed.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import dataclasses
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LOGGER_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
#define N (4u << 20)
typedef struct { char op; size_t size; uintptr_t ptr, old, brk; long tid; } E;
static E ev[N];
static unsigned n = 0;
static int on = 0;
static void rec(char op, size_t s, void *p, void *old) {
  if (!on) return;
  unsigned i = __atomic_fetch_add(&n, 1, __ATOMIC_RELAXED);
  if (i >= N) return;
  ev[i] = (E){op, s, (uintptr_t)p, (uintptr_t)old, (uintptr_t)sbrk(0),
              (long)syscall(SYS_gettid)};
}
void *malloc(size_t s) { void *p = __libc_malloc(s); rec('m', s, p, 0); return p; }
void free(void *p) { if (p) rec('f', 0, p, 0); __libc_free(p); }
void *calloc(size_t a, size_t b) { void *p = __libc_calloc(a, b); rec('m', a * b, p, 0); return p; }
void *realloc(void *o, size_t s) { void *p = __libc_realloc(o, s); rec('r', s, p, o); return p; }
int posix_memalign(void **r, size_t al, size_t s) {
  void *p = __libc_memalign(al, s); if (!p) return ENOMEM; *r = p; rec('a', s, p, 0); return 0; }
void *memalign(size_t al, size_t s) { void *p = __libc_memalign(al, s); rec('a', s, p, 0); return p; }
void *aligned_alloc(size_t al, size_t s) { void *p = __libc_memalign(al, s); rec('a', s, p, 0); return p; }
void mlog_start(void) { n = 0; on = 1; }
unsigned mlog_stop(const char *path) {
  on = 0; unsigned m = n < N ? n : N;
  FILE *f = fopen(path, "w");
  for (unsigned i = 0; i < m; i++)
    fprintf(f, "%c %zu %lx %lx %lx %ld\n", ev[i].op, ev[i].size, (unsigned long)ev[i].ptr,
            (unsigned long)ev[i].old, (unsigned long)ev[i].brk, ev[i].tid);
  fclose(f); return m;
}
"""
BIG = 128 * 1024


def _child(name: str, batch: int, prior: list[int], logger: str, log_path: str,
           framework: str = "eager") -> None:
    import threading

    import torch

    from ftmodel.frameworks.base import get_framework
    from ftmodel.tools.corpus import get_corpus_model
    from ftmodel.tools.validation import framework_call
    torch.set_num_threads(2)
    zm = get_corpus_model(name)
    model = zm.build().eval()
    lib = ctypes.CDLL(logger)
    lib.mlog_stop.argtypes = [ctypes.c_char_p]

    fw = get_framework(framework)

    def call_at(b: int):  # type: ignore[no-untyped-def]
        return framework_call(fw, model, zm.make_inputs, b)

    for b in prior:
        warm = call_at(b)
        for _ in range(20):
            warm()
    fn = call_at(batch)
    for _ in range(10):
        fn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        fn()
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5
    lib.mlog_start()
    fn()
    lib.mlog_stop(log_path.encode())
    print(json.dumps({"faults_per_call": faults, "main_tid": threading.get_native_id()}))


def _stream(log_path: str, tid: int | None = None
            ) -> tuple[list[tuple[str, int, int]], int, int, list[int]]:
    """(events for the replay, real grows, real trims, sizes of the allocations >= BIG); with
    ``tid``, the main arena's calls: that thread's allocations (glibc serves other threads from
    arenas of their own, not the main heap the replay simulates) and their frees from whichever
    thread frees them (a chunk goes back to the arena it came from; a worker thread that frees
    the main thread's buffer frees it in the main heap)."""
    events: list[tuple[str, int, int]] = []
    grows = trims = 0
    big: list[int] = []
    last_brk = None
    ours: set[int] = set()  # live pointers the main thread allocated
    for line in Path(log_path).read_text().splitlines():
        op, size, ptr, old, brk, caller = line.split()
        b = int(brk, 16)
        if last_brk is not None:
            grows += b > last_brk
            trims += b < last_brk
        last_brk = b
        mine = tid is None or int(caller) == tid
        if op == "r":  # realloc: a free of the old pointer, then a malloc
            if int(old, 16) in ours or (tid is None and int(old, 16)):
                events.append(("free", 0, int(old, 16)))
                ours.discard(int(old, 16))
            op = "m"
        if op in ("m", "a"):  # malloc, or posix_memalign (a tensor's data)
            if not mine:
                continue
            events.append(("memalign" if op == "a" else "malloc", int(size), int(ptr, 16)))
            ours.add(int(ptr, 16))
            if int(size) >= BIG:
                big.append(int(size))
        elif mine or int(ptr, 16) in ours:
            events.append(("free", 0, int(ptr, 16)))
            ours.discard(int(ptr, 16))
    return events, grows, trims, big


def _sizes(sizes: list[int]) -> str:
    c = collections.Counter(sizes)
    return ", ".join(f"{n}× {s / 2**20:.2f}" for s, n in sorted(c.items(), key=lambda x: -x[0])[:4])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--profile", default=None, help="a CPU profile (the trace's lowering)")
    ap.add_argument("--models", default="", help="name:batch,... (corpus models)")
    ap.add_argument("--prior", default="1,4", help="batches each process runs first")
    ap.add_argument("--framework", default="eager",
                    help="the framework whose runner the child calls and whose lowering the "
                         "trace columns show (eager's by default)")
    ap.add_argument("--passes", type=int, default=4, help="passes of each replay")
    ap.add_argument("--as-aligned", action="store_true",
                    help="replay every logged allocation as a posix_memalign (the large chunks' "
                         "placement apart from the small plain mallocs')")
    ap.add_argument("--out", type=Path, default=None, help="also write the report here")
    ap.add_argument("--keep-logs", type=Path, default=None,
                    help="copy each logged call's malloc log into this folder")
    ap.add_argument("--child", nargs=4, metavar=("NAME", "BATCH", "LOGGER", "LOG"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    prior = [int(b) for b in args.prior.split(",") if b]
    if args.child:
        name, batch, logger, log = args.child
        _child(name, int(batch), [b for b in prior if b != int(batch)], logger, log,
               args.framework)
        return 0
    if not args.models:
        ap.error("--models is required (name:batch,...)")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("benchmarks/malloc_replay.py needs a C compiler (cc) for its malloc "
                         "logger; install one (e.g. build-essential) and run it again")

    from ftmodel.api import Predictor
    from ftmodel.calibration.allocator import replay_in_glibc
    from ftmodel.estimate.allocator import allocations, page_faults, stream_page_faults
    from ftmodel.tools.corpus import get_corpus_model

    lines = ["# A real process's malloc calls, replayed through the page-fault simulation", "",
             f"- command: `python benchmarks/malloc_replay.py --profile {args.profile} --models "
             + args.models
             + f" --prior {args.prior} --passes {args.passes}"
             + (f" --framework {args.framework}" if args.framework != "eager" else "")
             + (" --as-aligned`" if args.as_aligned else "`"),
             "- replayed: " + ("every logged allocation as a `posix_memalign(64, n)`"
                               if args.as_aligned else
                               "`posix_memalign` calls as aligned ones (a tensor's data), "
                               "`malloc`, `calloc` and `realloc` as plain ones"),
             "- measured: minor faults per call (getrusage, 5 calls after warm-up, in a plain "
             "process with the logger preloaded); real heap: times the program break moved up / "
             "down during one logged call",
             "- replay: the main arena's logged calls (the main thread's allocations, the one "
             "that calls the model, and their frees from any thread; glibc serves the library's "
             "worker threads from arenas of their own) through `stream_page_faults`, passes "
             "1, 2, ... from an empty heap with the thresholds `import torch` leaves (the "
             "profile's `mmap_threshold_bytes`) and glibc's `_int_memalign` placement of aligned "
             "calls (`GlibcMalloc(memalign_padding=True)`) (faults, grows / trims); "
             "all threads: every thread's calls replayed as one heap; trace: the prediction's own "
             "simulation",
             "- glibc itself: the same main-arena calls replayed through glibc's own "
             "`posix_memalign`, `malloc` and `free` in a fresh interpreter after `import torch` "
             "(`ftmodel.calibration.allocator.replay_in_glibc`), last pass",
             "", "| model | batch | measured faults | real heap grows / trims | replay faults "
             "(each pass) | replay grows / trims (last pass) | glibc itself | all threads, last "
             "pass | trace faults | logged ≥128 KiB (MiB) | traced ≥128 KiB (MiB) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        src, lib = Path(tmp, "mlog.c"), Path(tmp, "mlog.so")
        src.write_text(LOGGER_C)
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
        if args.profile is None:
            ap.error("--profile is required")
        predictor = Predictor(args.framework, args.profile, heap="plain")
        for spec in args.models.split(","):
            name, _, b = spec.partition(":")
            batch = int(b or 1)
            log = str(Path(tmp, "log.txt"))
            env = {**os.environ, "LD_PRELOAD": str(lib), "OMP_NUM_THREADS": "2"}
            res = subprocess.run([sys.executable, __file__, "--prior", args.prior,
                                  "--framework", args.framework, "--child",
                                  name, str(batch), str(lib), log], env=env, check=True,
                                 capture_output=True, text=True)
            out = json.loads(res.stdout.strip().splitlines()[-1])
            measured = out["faults_per_call"]
            events, grows, trims, big = _stream(log, int(out["main_tid"]))
            everyone = _stream(log)[0]
            if args.as_aligned:
                events, everyone = ([("memalign" if op == "malloc" else op, n, k)
                                     for op, n, k in evs] for evs in (events, everyone))
            # glibc's own placement of aligned chunks (the prediction's simulation, in the
            # trace column, places them as plain mallocs)
            cfg = dataclasses.replace(predictor.malloc, memalign_padding=True)
            replay = stream_page_faults(events, cfg, passes=args.passes)
            every = stream_page_faults(everyone, cfg, passes=args.passes)[-1]
            real = replay_in_glibc(events, args.passes, after_import_torch=True)
            glibc = "–" if real is None else f"{real[-1]:,}"
            if args.keep_logs is not None:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                shutil.copy(log, args.keep_logs / f"{name}-b{batch}.log")
            zm = get_corpus_model(name)
            model = zm.build().eval()
            program = predictor.lower(model, zm.make_inputs, batch,
                                      predictor.trace(model, zm.make_inputs, batch))
            traced = [a.size_bytes for a in allocations(program.kernels) if a.size_bytes >= BIG]
            simulated = float(page_faults(program.kernels, predictor.malloc).sum())
            lines.append(
                f"| {name} | {batch} | {measured:,.0f} | {grows} / {trims} | "
                + " / ".join(f"{p.faults:,}" for p in replay)
                + f" | {replay[-1].grows} / {replay[-1].trims} | {glibc} | {every.faults:,} | "
                f"{simulated:,.0f} | "
                f"{len(big)}: {_sizes(big)} | {len(traced)}: {_sizes(traced)} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
