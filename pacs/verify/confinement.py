"""The policy a program of the code verifier runs under, inside the sandbox: what ``harness.py`` (its process
plumbing, which loads this file from beside itself) applies in each child before the program's first line
(``confine``), and the harness's own drop to nobody.

- A new session, stdin and stdout only (and the graders' record channel), and limits on address space, CPU
  seconds, file size (the output's bound), open files, processes (as nobody) and core dumps.
- A seccomp filter (x86-64) that refuses creating processes (threads are allowed), sockets, signalling any other
  process, tracing and reading other processes, namespaces, io_uring and a few kernel attack surfaces.
- Outside bubblewrap (``read_dirs`` given), Landlock where the kernel has it: files readable only beneath
  ``read_dirs`` and the working directory, none writable, no signal out.

Standard library only, like the harness; the host imports it too (``landlock_abi``).
"""

import ctypes
import errno
import os
import platform
import resource
import signal

EXIT_RUNTIME, EXIT_MEMORY, EXIT_OUTPUT = 1, 3, 4  # the child's own exit codes

# seccomp: x86-64 system call numbers
AUDIT_ARCH_X86_64 = 0xC000003E
DENY = {  # syscall: errno
    57: errno.EPERM,  # fork
    58: errno.EPERM,  # vfork
    435: errno.ENOSYS,  # clone3 (its flags are in memory, out of a filter's reach; libc falls back to clone)
    41: errno.EACCES,  # socket
    101: errno.EPERM,  # ptrace
    310: errno.EPERM,  # process_vm_readv
    311: errno.EPERM,  # process_vm_writev
    312: errno.EPERM,  # kcmp
    424: errno.EPERM,  # pidfd_send_signal
    434: errno.EPERM,  # pidfd_open
    438: errno.EPERM,  # pidfd_getfd
    440: errno.EPERM,  # process_madvise
    448: errno.EPERM,  # process_mrelease
    272: errno.EPERM,  # unshare
    308: errno.EPERM,  # setns
    165: errno.EPERM,  # mount
    425: errno.EPERM,  # io_uring_setup (its operations bypass seccomp)
    321: errno.EPERM,  # bpf
    298: errno.EPERM,  # perf_event_open
    323: errno.EPERM,  # userfaultfd
    319: errno.EPERM,  # memfd_create (memory outside the address-space limit)
    248: errno.EPERM,  # add_key
    249: errno.EPERM,  # request_key
    250: errno.EPERM,  # keyctl
    141: errno.EPERM,  # setpriority (PRIO_USER reaches every process of the user)
    251: errno.EPERM,  # ioprio_set
    142: errno.EPERM,  # sched_setparam
    144: errno.EPERM,  # sched_setscheduler
    203: errno.EPERM,  # sched_setaffinity
    314: errno.EPERM,  # sched_setattr
    256: errno.EPERM,  # migrate_pages
    279: errno.EPERM,  # move_pages
}
SELF = "self"  # stands for the filtered process's pid
# (syscall, argument, values): allowed only when the argument is one of the values
ONLY_IF = [
    (62, 0, (SELF,)),  # kill
    (200, 0, (SELF,)),  # tkill
    (234, 0, (SELF,)),  # tgkill
    (129, 0, (SELF,)),  # rt_sigqueueinfo
    (297, 0, (SELF,)),  # rt_tgsigqueueinfo
    (302, 0, (0, SELF)),  # prlimit64: its own limits only
    (56, None, None),  # clone: threads only (CLONE_THREAD in its flags), below
]
# (syscall, argument, values): refused when the argument is one of the values
UNLESS = [
    (157, 0, (1,)),  # prctl(PR_SET_PDEATHSIG): a program may not undo dying with the harness
    (72, 1, (8, 10, 15)),  # fcntl F_SETOWN, F_SETSIG, F_SETOWN_EX: a signal to another process on I/O
]
CLONE_THREAD = 0x00010000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36
# the host's "stop" to a harness: a real-time signal, which no scheduler sends (SLURM's SIGTERM and a job's
# --signal reach every process of a job step, and a harness must then finish its test, not end it)
STOP_SIGNAL = signal.SIGRTMIN + 2


def _bpf(code: int, jt: int, jf: int, k: int) -> tuple:
    return (code, jt, jf, k & 0xFFFFFFFF)


def seccomp_filter(pid: int) -> list[tuple]:
    """The filter's instructions for a process ``pid``: the rules above, every other call allowed. Each
    rule is a block that the syscall number jumps over; a block that loads an argument ends in returns."""
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill = 0x7FFF0000, 0x80000000

    def refuse(e: int) -> int:
        return 0x00050000 | e

    prog = [_bpf(ld, 0, 0, 4), _bpf(jeq, 1, 0, AUDIT_ARCH_X86_64), _bpf(ret, 0, 0, kill), _bpf(ld, 0, 0, 0)]
    prog += [_bpf(jge, 0, 1, 0x40000000), _bpf(ret, 0, 0, refuse(errno.EPERM))]  # the x32 ABI
    for nr, e in DENY.items():
        prog += [_bpf(jeq, 0, 1, nr), _bpf(ret, 0, 0, refuse(e))]
    for rules, hit, miss in ((ONLY_IF, allow, refuse(errno.EPERM)), (UNLESS, refuse(errno.EPERM), allow)):
        for nr, arg, values in rules:
            if arg is None:  # clone: a thread, or nothing
                block = [_bpf(ld, 0, 0, 16), _bpf(jset, 1, 0, CLONE_THREAD)]
            else:
                block = [_bpf(ld, 0, 0, 16 + 8 * arg)]
                for i, v in enumerate(values):
                    block.append(_bpf(jeq, len(values) - i, 0, pid if v == SELF else v))
            block += [_bpf(ret, 0, 0, miss), _bpf(ret, 0, 0, hit)]
            prog += [_bpf(jeq, 0, len(block), nr), *block]
    return [*prog, _bpf(ret, 0, 0, allow)]


def install_seccomp() -> None:
    """Load the filter into this process (after no_new_privs); raises OSError where it cannot."""
    if platform.machine() != "x86_64":
        raise OSError(errno.ENOSYS, f"no seccomp filter for {platform.machine()}")

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    prog = seccomp_filter(os.getpid())
    array = (SockFilter * len(prog))(*[SockFilter(*i) for i in prog])
    fprog = SockFprog(len(prog), array)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def seccomp_works() -> bool:
    """Install the filter in a throwaway child and check that it refuses a fork."""
    pid = os.fork()
    if pid == 0:
        try:
            install_seccomp()
            try:
                if os.fork() == 0:
                    os._exit(0)
                os._exit(1)
            except PermissionError:
                os._exit(0)
        except BaseException:  # noqa: BLE001
            os._exit(2)
    return os.waitpid(pid, 0)[1] == 0


LANDLOCK_READ = (1 << 0) | (1 << 2) | (1 << 3)  # execute, read a file, read a directory


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where there is none."""
    return max(ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1), 0)  # landlock_create_ruleset(VERSION)


def install_landlock(read_dirs: list[int], workdir: int, abi: int) -> None:
    """From here on, this process may read and run only files beneath ``read_dirs`` and ``workdir``
    (``O_PATH`` descriptors, opened before root was dropped), create, change or remove none (its stdin
    and stdout stay open: LiveCodeBench's harness lets a program open no file either), and, from ABI 6,
    signal no process outside its domain."""

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    libc = ctypes.CDLL(None, use_errno=True)
    handled = (1 << 13) - 1 | ((1 << 13) if abi >= 2 else 0) | ((1 << 14) if abi >= 3 else 0)
    # ABI 6: no signal to, and no abstract socket of, a process outside this domain
    attr = (ctypes.c_uint64 * 3)(handled, 0, 0b11 if abi >= 6 else 0)
    ruleset = libc.syscall(444, attr, 24 if abi >= 6 else 8, 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    for parent, access in [*((d, LANDLOCK_READ) for d in read_dirs), (workdir, LANDLOCK_READ)]:
        rule = PathBeneath(access, parent)
        if libc.syscall(445, ruleset, 1, ctypes.byref(rule), 0) != 0:  # LANDLOCK_RULE_PATH_BENEATH
            raise OSError(ctypes.get_errno(), "landlock_add_rule")
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.syscall(446, ruleset, 0) != 0:  # no_new_privs, restrict_self
        raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    os.close(ruleset)


def drop_root(uid: int) -> None:
    if os.getuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


def limit(kind: int, value: int) -> None:
    resource.setrlimit(kind, (value, value))


def confine(request: dict, stdin_fd: int, out_fd: int, filters: dict, harness: int, cpu_s: int,
            channel: int | None = None) -> None:
    """In a forked child, before the program's first line: its own session, stdin and stdout (and the
    graders' record channel as fd 3), no other descriptor, its limits and filters. Exits where it cannot."""
    try:
        os.setsid()
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != harness:  # the harness died before that took effect
            os._exit(EXIT_RUNTIME)
        os.dup2(stdin_fd, 0)
        os.dup2(out_fd, 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        if filters["landlock"]:
            install_landlock(filters["read_fds"], os.open(".", os.O_PATH), filters["landlock"])
        if channel is not None:  # after Landlock, whose directories' descriptors may be 3 and above
            os.dup2(channel, 3)
        os.closerange(3 if channel is None else 4, 1 << 16)
        limit(resource.RLIMIT_CORE, 0)
        limit(resource.RLIMIT_FSIZE, request["output_bytes"])
        limit(resource.RLIMIT_NOFILE, 64)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        limit(resource.RLIMIT_AS, request["memory_bytes"])
        if os.getuid() == request["uid"]:  # nobody's processes are only ours: bound them (a fork bomb, unfiltered)
            limit(resource.RLIMIT_NPROC, 64)
        if filters["seccomp"]:
            install_seccomp()
    except BaseException:  # noqa: BLE001
        os._exit(EXIT_RUNTIME)


