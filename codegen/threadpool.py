"""The fork-join runtime parallel loops call: a persistent pool of worker threads, as LLVM IR.

    void loomtune_parallel_run(void (*fn)(void*), char* tasks, int64_t stride, int32_t n);

runs ``fn(tasks + t * stride)`` for t = 0 … n−1 and returns when all have: task 0 on the
calling thread, task t ≥ 1 on pool worker t. Creating and joining threads on every call
cost tens of microseconds, most of a 2-thread speed-up on a model's small kernels; the
pool's workers are started once (at the first parallel call that needs them), kept, and
between regions spin for ``SPIN_NS`` (a model's next kernel is usually that close; the
spin yields the CPU now and then, see CHECK_EVERY), then sleep on a futex. The caller
waits for its workers the same way. Everything is LLVM IR calling libc
(no compiler, no C extension), so kernels still need only libc, libm and libpthread.

- Where the pool lives: one per JIT process (``codegen.jit`` compiles this module once and
  registers the entry with ``llvm.add_symbol``; every kernel module resolves it), and one per
  exported library: ``export=True`` gives hidden ``weak_odr`` definitions in one COMDAT
  group, linked into each kernel object, of which the linker keeps one.
- Concurrency: one region at a time per pool. A caller that finds the pool busy (another
  thread's region; or a region started from inside a task) runs all its tasks itself,
  serially: correct, never blocks, never deadlocks.
- Fork: the pool's state lives in a page mapped ``MADV_WIPEONFORK``, so a forked child
  finds it zeroed — a fresh pool, no workers, unlocked — and starts its own workers.
  Where the kernel lacks that flag, the state records its process id and a process that
  is not its creator (one ``getpid`` per region) maps a fresh one.
- Failures: a worker that cannot be started leaves its task to the caller; no memory for
  the state runs every region serially. Tasks report their own status.
- Signals: workers start with every signal blocked, so asynchronous signals (Ctrl-C) go
  to the program's own threads.
"""

from __future__ import annotations

import llvmlite.binding as llvm

from ir.errors import LoomtuneError

__all__ = [
    "ENTRY",
    "IMPORTS",
    "MAX_WORKERS",
    "SPIN_NS",
    "UnsupportedPlatformError",
    "runtime_ir",
]

ENTRY = "loomtune_parallel_run"
"""The function generated parallel loops call (see the module docstring)."""

IMPORTS = frozenset(
    {
        "syscall",
        "mmap",
        "munmap",
        "madvise",
        "getpid",
        "sched_yield",
        "clock_gettime",
        "pthread_create",
        "pthread_detach",
        "sigfillset",
        "pthread_sigmask",
    }
)
"""What the runtime calls: libc and libpthread only."""

SPIN_NS = 100_000
"""How long an idle worker (or a caller waiting for its workers) spins before sleeping."""

CHECK_EVERY = 8
"""Pauses between a spinner's ``sched_yield`` and clock checks (a power of two). On a busy
machine the caller and its worker often share a CPU: a spinner that never yielded would
hold it for SPIN_NS while the thread it waits for cannot run (a call took 2 × SPIN_NS)."""

MAX_WORKERS = 255
"""Workers per pool; a region's tasks beyond MAX_WORKERS + 1 run on the calling thread."""

# The state: one zero-filled mapping, fields on their own 64-byte lines.
_LOCK, _WORKERS, _PID = 0, 4, 8  # i32 each: 1 while a region runs; workers started; see above
_FN, _TASKS, _STRIDE = 64, 72, 80  # the region's job
_PENDING, _WAITING = 128, 132  # i32: tasks still running on workers; 1 while the caller sleeps
# Worker w (1-based) has the line at 128 + 64·w: i32 generation (bumped per region it
# runs in), i32 sleeping (1 while it sleeps on the generation), i32 w.
_STATE_BYTES = -(-(128 + 64 * (MAX_WORKERS + 1)) // 4096) * 4096

# Linux: the same on x86-64, AArch64 and RISC-V 64 (not MIPS, Alpha or PA-RISC).
_FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE = 128, 129
_PROT_READ_WRITE, _MAP_PRIVATE_ANONYMOUS, _MADV_WIPEONFORK = 3, 0x22, 18
_SIG_BLOCK, _SIG_SETMASK, _CLOCK_MONOTONIC = 0, 2, 1
_ARCH = {"x86_64": (202, "pause"), "aarch64": (98, "yield"), "riscv64": (98, "")}


class UnsupportedPlatformError(LoomtuneError):
    """The thread pool has no futex syscall number or spin hint for this platform."""


def _platform(triple: str) -> tuple[int, str]:
    arch = triple.split("-")[0]
    if arch not in _ARCH or "linux" not in triple:
        raise UnsupportedPlatformError(
            f"parallel loops need loomtune's thread pool, which runs on 64-bit Linux on "
            f"{', '.join(_ARCH)}; this process is {triple}: compile at -num-threads=1"
        )
    return _ARCH[arch]


_TEMPLATE = r"""
; loomtune's fork-join thread pool: codegen/threadpool.py says what and why.
@COMDAT_DECL@
@loomtune_pool.state = internal global ptr null, @COMDAT_GLOBAL@ align 8

declare i64 @syscall(i64, ...)
declare ptr @mmap(ptr, i64, i32, i32, i32, i64)
declare i32 @munmap(ptr, i64)
declare i32 @madvise(ptr, i64, i32)
declare i32 @getpid()
declare i32 @sched_yield()
declare i32 @clock_gettime(i32, ptr)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i32 @sigfillset(ptr)
declare i32 @pthread_sigmask(i32, ptr, ptr)

define @ENTRY_LINKAGE@ void @@ENTRY@(ptr %fn, ptr %tasks, i64 %stride, i32 %n) @COMDAT_ENTRY@ {
entry:
  %multi = icmp sgt i32 %n, 1
  br i1 %multi, label %get, label %serial
get:
  %s = call ptr @loomtune_pool.get()
  %have = icmp ne ptr %s, null
  br i1 %have, label %lock, label %serial
lock:
  %pair = cmpxchg ptr %s, i32 0, i32 1 acquire monotonic, align 4
  %got = extractvalue { i32, i1 } %pair, 1
  br i1 %got, label %pooled, label %serial
serial:
  call void @loomtune_pool.run(ptr %fn, ptr %tasks, i64 %stride, i32 0, i32 %n)
  ret void
pooled:
  %most = sub i32 %n, 1
  %cap = icmp slt i32 %most, @MAX_WORKERS@
  %want = select i1 %cap, i32 %most, i32 @MAX_WORKERS@
  %k = call i32 @loomtune_pool.grow(ptr %s, i32 %want)
  %fnp = getelementptr inbounds i8, ptr %s, i64 @FN@
  store ptr %fn, ptr %fnp, align 8
  %tasksp = getelementptr inbounds i8, ptr %s, i64 @TASKS@
  store ptr %tasks, ptr %tasksp, align 8
  %stridep = getelementptr inbounds i8, ptr %s, i64 @STRIDE@
  store i64 %stride, ptr %stridep, align 8
  %pending = getelementptr inbounds i8, ptr %s, i64 @PENDING@
  store i32 %k, ptr %pending, align 4
  br label %next_worker
next_worker:
  %w = phi i32 [ 1, %pooled ], [ %w1, %bumped ]
  %more = icmp sle i32 %w, %k
  br i1 %more, label %bump, label %work
bump:
  %slot = call ptr @loomtune_pool.slot(ptr %s, i32 %w)
  %old = atomicrmw add ptr %slot, i32 1 seq_cst, align 4
  %sleepingp = getelementptr inbounds i8, ptr %slot, i64 4
  %sleeping = load atomic i32, ptr %sleepingp seq_cst, align 4
  %asleep = icmp ne i32 %sleeping, 0
  br i1 %asleep, label %wake, label %bumped
wake:
  call void @loomtune_pool.wake(ptr %slot)
  br label %bumped
bumped:
  %w1 = add i32 %w, 1
  br label %next_worker
work:
  call void @loomtune_pool.run(ptr %fn, ptr %tasks, i64 %stride, i32 0, i32 1)
  %unassigned = add i32 %k, 1
  call void @loomtune_pool.run(ptr %fn, ptr %tasks, i64 %stride, i32 %unassigned, i32 %n)
  %waitingp = getelementptr inbounds i8, ptr %s, i64 @WAITING@
  br label %join
join:
  %left = load atomic i32, ptr %pending acquire, align 4
  %done = icmp eq i32 %left, 0
  br i1 %done, label %unlock, label %wait
wait:
  %changed = call i32 @loomtune_pool.wait(ptr %pending, i32 %left, ptr %waitingp)
  br label %join
unlock:
  store atomic i32 0, ptr %s release, align 4
  ret void
}

; Tasks from .. to-1 on this thread.
define internal void @loomtune_pool.run(ptr %fn, ptr %tasks, i64 %stride, i32 %from, i32 %to) @COMDAT@ {
entry:
  br label %loop
loop:
  %t = phi i32 [ %from, %entry ], [ %t1, %body ]
  %more = icmp slt i32 %t, %to
  br i1 %more, label %body, label %done
body:
  %t64 = sext i32 %t to i64
  %offset = mul i64 %t64, %stride
  %task = getelementptr i8, ptr %tasks, i64 %offset
  call void %fn(ptr %task)
  %t1 = add i32 %t, 1
  br label %loop
done:
  ret void
}

; Worker w's line of the state.
define internal ptr @loomtune_pool.slot(ptr %s, i32 %w) @COMDAT@ {
entry:
  %w64 = zext i32 %w to i64
  %line = mul i64 %w64, 64
  %offset = add i64 %line, @PENDING@
  %slot = getelementptr inbounds i8, ptr %s, i64 %offset
  ret ptr %slot
}

; This process's pool state: mapped at the first call (or after a fork without
; MADV_WIPEONFORK); null when no memory can be mapped.
define internal ptr @loomtune_pool.get() @COMDAT@ {
entry:
  %s = load atomic ptr, ptr @loomtune_pool.state acquire, align 8
  %unset = icmp eq ptr %s, null
  br i1 %unset, label %make, label %check
check:
  %pidp = getelementptr inbounds i8, ptr %s, i64 @PID@
  %pid = load atomic i32, ptr %pidp monotonic, align 4
  %wiped_on_fork = icmp eq i32 %pid, 0
  br i1 %wiped_on_fork, label %ok, label %by_pid
by_pid:
  %me = call i32 @getpid()
  %mine = icmp eq i32 %pid, %me
  br i1 %mine, label %ok, label %make
ok:
  ret ptr %s
make:
  %new = call ptr @mmap(ptr null, i64 @STATE_BYTES@, i32 @PROT@, i32 @MAP@, i32 -1, i64 0)
  %address = ptrtoint ptr %new to i64
  %failed = icmp eq i64 %address, -1
  br i1 %failed, label %none, label %advise
none:
  ret ptr null
advise:
  %rc = call i32 @madvise(ptr %new, i64 @STATE_BYTES@, i32 @WIPEONFORK@)
  %wipes = icmp eq i32 %rc, 0
  br i1 %wipes, label %publish, label %record_pid
record_pid:
  %creator = call i32 @getpid()
  %newpidp = getelementptr inbounds i8, ptr %new, i64 @PID@
  store i32 %creator, ptr %newpidp, align 4
  br label %publish
publish:
  %swap = cmpxchg ptr @loomtune_pool.state, ptr %s, ptr %new acq_rel acquire, align 8
  %won = extractvalue { ptr, i1 } %swap, 1
  br i1 %won, label %use_new, label %lost
use_new:
  ret ptr %new
lost:
  %unmapped = call i32 @munmap(ptr %new, i64 @STATE_BYTES@)
  %other = extractvalue { ptr, i1 } %swap, 0
  ret ptr %other
}

; Starts workers until %want exist (or a thread cannot be created); how many do, up to %want.
define internal i32 @loomtune_pool.grow(ptr %s, i32 %want) @COMDAT@ {
entry:
  %tid = alloca i64, align 8
  %all = alloca [16 x i64], align 8
  %saved = alloca [16 x i64], align 8
  %countp = getelementptr inbounds i8, ptr %s, i64 @WORKERS@
  %have0 = load i32, ptr %countp, align 4
  %enough = icmp sge i32 %have0, %want
  br i1 %enough, label %done, label %mask
mask:
  %filled = call i32 @sigfillset(ptr %all)
  %masked = call i32 @pthread_sigmask(i32 @SIG_BLOCK@, ptr %all, ptr %saved)
  br label %loop
loop:
  %have = phi i32 [ %have0, %mask ], [ %w, %started ]
  %more = icmp slt i32 %have, %want
  br i1 %more, label %start, label %unmask
start:
  %w = add i32 %have, 1
  %slot = call ptr @loomtune_pool.slot(ptr %s, i32 %w)
  %indexp = getelementptr inbounds i8, ptr %slot, i64 8
  store i32 %w, ptr %indexp, align 4
  %rc = call i32 @pthread_create(ptr %tid, ptr null, ptr @loomtune_pool.worker, ptr %slot)
  %ok = icmp eq i32 %rc, 0
  br i1 %ok, label %started, label %unmask
started:
  %thread = load i64, ptr %tid, align 8
  %detached = call i32 @pthread_detach(i64 %thread)
  store i32 %w, ptr %countp, align 4
  br label %loop
unmask:
  %have_now = phi i32 [ %have, %loop ], [ %have, %start ]
  %restored = call i32 @pthread_sigmask(i32 @SIG_SETMASK@, ptr %saved, ptr null)
  br label %done
done:
  %count = phi i32 [ %have0, %entry ], [ %have_now, %unmask ]
  %fewer = icmp slt i32 %count, %want
  %usable = select i1 %fewer, i32 %count, i32 %want
  ret i32 %usable
}

; A worker: wait for its generation to change, run task w of the region, count it done.
define internal ptr @loomtune_pool.worker(ptr %slot) @COMDAT@ {
entry:
  %indexp = getelementptr inbounds i8, ptr %slot, i64 8
  %w = load i32, ptr %indexp, align 4
  %w64 = zext i32 %w to i64
  %line = mul i64 %w64, 64
  %back = sub i64 0, %line
  %base = getelementptr i8, ptr %slot, i64 %back
  %s = getelementptr i8, ptr %base, i64 -@PENDING@
  %sleepingp = getelementptr inbounds i8, ptr %slot, i64 4
  %fnp = getelementptr inbounds i8, ptr %s, i64 @FN@
  %tasksp = getelementptr inbounds i8, ptr %s, i64 @TASKS@
  %stridep = getelementptr inbounds i8, ptr %s, i64 @STRIDE@
  %pending = getelementptr inbounds i8, ptr %s, i64 @PENDING@
  %waitingp = getelementptr inbounds i8, ptr %s, i64 @WAITING@
  br label %loop
loop:
  %seen = phi i32 [ 0, %entry ], [ %gen, %next ]
  %gen = call i32 @loomtune_pool.wait(ptr %slot, i32 %seen, ptr %sleepingp)
  %fn = load ptr, ptr %fnp, align 8
  %tasks = load ptr, ptr %tasksp, align 8
  %stride = load i64, ptr %stridep, align 8
  %offset = mul i64 %w64, %stride
  %task = getelementptr i8, ptr %tasks, i64 %offset
  call void %fn(ptr %task)
  %before = atomicrmw sub ptr %pending, i32 1 seq_cst, align 4
  %last = icmp eq i32 %before, 1
  br i1 %last, label %notify, label %next
notify:
  %waiting = load atomic i32, ptr %waitingp seq_cst, align 4
  %asleep = icmp ne i32 %waiting, 0
  br i1 %asleep, label %wake, label %next
wake:
  call void @loomtune_pool.wake(ptr %pending)
  br label %next
next:
  br label %loop
}

; Waits until the i32 at %addr is not %old and returns it: spins up to SPIN_NS (yielding
; the CPU every CHECK_EVERY pauses), then sleeps on the futex with *%sleeping = 1, so that
; the writer knows to wake this thread.
define internal i32 @loomtune_pool.wait(ptr %addr, i32 %old, ptr %sleeping) @COMDAT@ {
entry:
  %t0 = call i64 @loomtune_pool.now()
  br label %spin
spin:
  %i = phi i32 [ 0, %entry ], [ %i1, %pause ], [ %i1, %clock ]
  %v = load atomic i32, ptr %addr acquire, align 4
  %changed = icmp ne i32 %v, %old
  br i1 %changed, label %done, label %pause
pause:
  call void asm sideeffect "@PAUSE@", "~{memory}"()
  %i1 = add i32 %i, 1
  %low = and i32 %i1, @CHECK_MASK@
  %tick = icmp eq i32 %low, 0
  br i1 %tick, label %clock, label %spin
clock:
  %yielded = call i32 @sched_yield()
  %t = call i64 @loomtune_pool.now()
  %dt = sub i64 %t, %t0
  %more = icmp slt i64 %dt, @SPIN_NS@
  br i1 %more, label %spin, label %sleep
sleep:
  store atomic i32 1, ptr %sleeping seq_cst, align 4
  br label %recheck
recheck:
  %w = load atomic i32, ptr %addr seq_cst, align 4
  %same = icmp eq i32 %w, %old
  br i1 %same, label %futex, label %woke
futex:
  %old64 = zext i32 %old to i64
  %rc = call i64 (i64, ...) @syscall(i64 @SYS_FUTEX@, ptr %addr, i64 @FUTEX_WAIT@, i64 %old64, ptr null, ptr null, i64 0)
  br label %recheck
woke:
  store atomic i32 0, ptr %sleeping seq_cst, align 4
  br label %done
done:
  %new = phi i32 [ %v, %spin ], [ %w, %woke ]
  ret i32 %new
}

; Wakes the one thread sleeping on %addr.
define internal void @loomtune_pool.wake(ptr %addr) @COMDAT@ {
entry:
  %rc = call i64 (i64, ...) @syscall(i64 @SYS_FUTEX@, ptr %addr, i64 @FUTEX_WAKE@, i64 1, ptr null, ptr null, i64 0)
  ret void
}

; CLOCK_MONOTONIC in nanoseconds (the vDSO: no system call).
define internal i64 @loomtune_pool.now() @COMDAT@ {
entry:
  %ts = alloca [2 x i64], align 8
  %rc = call i32 @clock_gettime(i32 @CLOCK_MONOTONIC@, ptr %ts)
  %seconds = load i64, ptr %ts, align 8
  %nsp = getelementptr inbounds [2 x i64], ptr %ts, i64 0, i64 1
  %ns = load i64, ptr %nsp, align 8
  %whole = mul i64 %seconds, 1000000000
  %t = add i64 %whole, %ns
  ret i64 %t
}
"""


def runtime_ir(*, export: bool, triple: str | None = None) -> str:
    """The runtime module's LLVM IR text for ``triple`` (default: this process's).

    ``export=False``: the entry has default linkage (the JIT registers it once per
    process). ``export=True``: hidden ``weak_odr`` in one COMDAT group with the rest, to be
    linked into every kernel object of a library; the linker keeps one copy, one pool.
    """
    sys_futex, pause = _platform(triple or llvm.get_process_triple())
    values = {
        "COMDAT_DECL": f"${ENTRY} = comdat any" if export else "",
        "COMDAT_ENTRY": "comdat" if export else "",
        "COMDAT_GLOBAL": f"comdat(${ENTRY})," if export else "",
        "COMDAT": f"comdat(${ENTRY})" if export else "",
        "ENTRY_LINKAGE": "weak_odr hidden" if export else "",
        "ENTRY": ENTRY,
        "MAX_WORKERS": MAX_WORKERS,
        "SPIN_NS": SPIN_NS,
        "CHECK_MASK": CHECK_EVERY - 1,
        "STATE_BYTES": _STATE_BYTES,
        "FN": _FN,
        "TASKS": _TASKS,
        "STRIDE": _STRIDE,
        "PENDING": _PENDING,
        "WAITING": _WAITING,
        "WORKERS": _WORKERS,
        "PID": _PID,
        "PROT": _PROT_READ_WRITE,
        "MAP": _MAP_PRIVATE_ANONYMOUS,
        "WIPEONFORK": _MADV_WIPEONFORK,
        "SIG_BLOCK": _SIG_BLOCK,
        "SIG_SETMASK": _SIG_SETMASK,
        "CLOCK_MONOTONIC": _CLOCK_MONOTONIC,
        "SYS_FUTEX": sys_futex,
        "FUTEX_WAIT": _FUTEX_WAIT_PRIVATE,
        "FUTEX_WAKE": _FUTEX_WAKE_PRIVATE,
        "PAUSE": pause,
    }
    text = _TEMPLATE
    for key, value in values.items():
        text = text.replace(f"@{key}@", str(value))
    return text
