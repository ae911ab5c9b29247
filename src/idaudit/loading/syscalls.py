"""The system calls a caged program may make: an allow list, every other call refused.

The list is what loading and calling torch programs needs, found by tracing the real loads of
every route inside the cage (TorchScript, ``torch.export``, Hugging Face, timm, LeWM and
``--trust-code`` pickles, on torch 2.13 and 2.14: ``scripts/trace_cage_syscalls.py``), grouped
by what they touch. Files are Landlock's business (the rules decide which paths), so the file
calls are here; what Landlock does not rule on — modes, owners, times and extended attributes
of files, signals to other processes, scheduling, the clock, the host, devices — is not, and
a few calls are allowed only with arguments that keep them inside the process
(:data:`OWN_PROCESS`, :data:`CLONE`, :data:`PRCTL_REFUSED`, :data:`IOCTLS`).

:data:`NUMBERS` gives each name's number on x86_64 and aarch64, read off the kernel's headers
by ``scripts/syscall_numbers.py``; :func:`idaudit.loading.confine.seccomp_program` compiles it.
"""

from __future__ import annotations

__all__ = ["ALLOWED", "CLONE", "CLONE3", "CLONE_THREAD", "IOCTLS", "NAMED", "NUMBERS", "OWN_PROCESS",
           "PRCTL_REFUSED", "ZERO_IS_SELF"]

#: allowed whatever their arguments, by what they touch
ALLOWED: dict[str, tuple[str, ...]] = {
    "files, under Landlock's rules": (
        "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev",
        "preadv2", "pwritev2", "open", "openat", "openat2", "creat", "close", "close_range",
        "lseek", "stat", "fstat", "lstat", "newfstatat", "statx", "fstatfs", "statfs",
        "access", "faccessat", "faccessat2", "readlink", "readlinkat", "getdents",
        "getdents64", "getcwd", "chdir", "fchdir", "mkdir", "mkdirat", "rmdir", "unlink",
        "unlinkat", "rename", "renameat", "renameat2", "link", "linkat", "symlink",
        "symlinkat", "truncate", "ftruncate", "fallocate", "fsync", "fdatasync", "fadvise64",
        "readahead", "flock", "umask", "sendfile", "copy_file_range", "splice", "tee"),
    "descriptors": (
        "dup", "dup2", "dup3", "fcntl", "pipe", "pipe2", "poll", "ppoll", "select",
        "pselect6", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
        "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4"),
    "sockets made by socketpair (socket itself is refused)": (
        "socketpair", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "sendto", "recvfrom",
        "shutdown", "getsockopt", "setsockopt", "getsockname", "getpeername"),
    "the process's own memory": (
        "mmap", "munmap", "mprotect", "mremap", "madvise", "brk", "mincore", "msync",
        "membarrier", "memfd_create", "get_mempolicy", "set_mempolicy", "mbind", "mseal",
        "map_shadow_stack"),
    "its threads": (
        "futex", "futex_waitv", "set_robust_list", "get_robust_list", "set_tid_address",
        "rseq", "gettid", "sched_yield", "sched_getaffinity", "sched_getparam",
        "sched_getscheduler", "sched_get_priority_max", "sched_get_priority_min",
        "sched_rr_get_interval", "sched_getattr", "getcpu", "exit", "exit_group", "wait4",
        "waitid"),
    "its signals": (
        "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "rt_sigsuspend",
        "rt_sigtimedwait", "rt_sigpending", "pause", "restart_syscall"),
    "reading the clock, timers": (
        "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday",
        "time", "times", "getitimer", "setitimer", "alarm", "timer_create", "timer_settime",
        "timer_gettime", "timer_getoverrun", "timer_delete", "timerfd_create",
        "timerfd_settime", "timerfd_gettime"),
    "who and where it is": (
        "getpid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getgroups",
        "getresuid", "getresgid", "getpgrp", "getpgid", "getsid", "capget", "uname", "sysinfo",
        "getrlimit", "setrlimit", "getrusage", "getpriority", "getrandom", "arch_prctl"),
}

#: allowed only where their first argument is the process itself (its pid; for those of
#: :data:`ZERO_IS_SELF`, 0 too): no signal, and no limit, for any other process or group
OWN_PROCESS = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "prlimit64")
ZERO_IS_SELF = ("prlimit64",)
#: clone: only with CLONE_THREAD (a thread, never a process); clone3 answers ENOSYS, so that
#: the C library falls back to clone, whose flags can be checked
CLONE, CLONE3, CLONE_THREAD = "clone", "clone3", 0x00010000
#: prctl's options that detach the process from idaudit or open it to others: refused
#: (PR_SET_PDEATHSIG, which a program would clear to outlive idaudit; PR_SET_PTRACER)
PRCTL_REFUSED = (1, 0x59616D61)
#: ioctl's requests allowed (a terminal's and a descriptor's own): TCGETS, TIOCGWINSZ,
#: FIONREAD, FIONBIO, FIONCLEX, FIOCLEX, FIOASYNC
IOCTLS = (0x5401, 0x5413, 0x541B, 0x5421, 0x5450, 0x5451, 0x5452)

#: every name this module uses, the allowed and those with argument rules
NAMED = frozenset({n for names in ALLOWED.values() for n in names} | set(OWN_PROCESS) |
                  {CLONE, CLONE3, "prctl", "ioctl"})

#: each name's number, per architecture (a name an architecture lacks is not in its table)
NUMBERS: dict[str, dict[str, int]] = {
    "x86_64": {
        "access": 21, "alarm": 37, "arch_prctl": 158, "brk": 12, "capget": 125, "chdir": 80,
        "clock_getres": 229, "clock_gettime": 228, "clock_nanosleep": 230, "clone": 56,
        "clone3": 435, "close": 3, "close_range": 436, "copy_file_range": 326, "creat": 85,
        "dup": 32, "dup2": 33, "dup3": 292, "epoll_create": 213, "epoll_create1": 291,
        "epoll_ctl": 233, "epoll_pwait": 281, "epoll_pwait2": 441, "epoll_wait": 232,
        "eventfd": 284, "eventfd2": 290, "exit": 60, "exit_group": 231, "faccessat": 269,
        "faccessat2": 439, "fadvise64": 221, "fallocate": 285, "fchdir": 81, "fcntl": 72,
        "fdatasync": 75, "flock": 73, "fstat": 5, "fstatfs": 138, "fsync": 74, "ftruncate": 77,
        "futex": 202, "futex_waitv": 449, "get_mempolicy": 239, "get_robust_list": 274,
        "getcpu": 309, "getcwd": 79, "getdents": 78, "getdents64": 217, "getegid": 108,
        "geteuid": 107, "getgid": 104, "getgroups": 115, "getitimer": 36, "getpeername": 52,
        "getpgid": 121, "getpgrp": 111, "getpid": 39, "getppid": 110, "getpriority": 140,
        "getrandom": 318, "getresgid": 120, "getresuid": 118, "getrlimit": 97, "getrusage": 98,
        "getsid": 124, "getsockname": 51, "getsockopt": 55, "gettid": 186, "gettimeofday": 96,
        "getuid": 102, "ioctl": 16, "kill": 62, "link": 86, "linkat": 265, "lseek": 8,
        "lstat": 6, "madvise": 28, "map_shadow_stack": 453, "mbind": 237, "membarrier": 324,
        "memfd_create": 319, "mincore": 27, "mkdir": 83, "mkdirat": 258, "mmap": 9,
        "mprotect": 10, "mremap": 25, "mseal": 462, "msync": 26, "munmap": 11, "nanosleep": 35,
        "newfstatat": 262, "open": 2, "openat": 257, "openat2": 437, "pause": 34, "pipe": 22,
        "pipe2": 293, "poll": 7, "ppoll": 271, "prctl": 157, "pread64": 17, "preadv": 295,
        "preadv2": 327, "prlimit64": 302, "pselect6": 270, "pwrite64": 18, "pwritev": 296,
        "pwritev2": 328, "read": 0, "readahead": 187, "readlink": 89, "readlinkat": 267,
        "readv": 19, "recvfrom": 45, "recvmmsg": 299, "recvmsg": 47, "rename": 82,
        "renameat": 264, "renameat2": 316, "restart_syscall": 219, "rmdir": 84, "rseq": 334,
        "rt_sigaction": 13, "rt_sigpending": 127, "rt_sigprocmask": 14, "rt_sigqueueinfo": 129,
        "rt_sigreturn": 15, "rt_sigsuspend": 130, "rt_sigtimedwait": 128,
        "rt_tgsigqueueinfo": 297, "sched_get_priority_max": 146, "sched_get_priority_min": 147,
        "sched_getaffinity": 204, "sched_getattr": 315, "sched_getparam": 143,
        "sched_getscheduler": 145, "sched_rr_get_interval": 148, "sched_yield": 24,
        "select": 23, "sendfile": 40, "sendmmsg": 307, "sendmsg": 46, "sendto": 44,
        "set_mempolicy": 238, "set_robust_list": 273, "set_tid_address": 218, "setitimer": 38,
        "setrlimit": 160, "setsockopt": 54, "shutdown": 48, "sigaltstack": 131,
        "signalfd": 282, "signalfd4": 289, "socketpair": 53, "splice": 275, "stat": 4,
        "statfs": 137, "statx": 332, "symlink": 88, "symlinkat": 266, "sysinfo": 99,
        "tee": 276, "tgkill": 234, "time": 201, "timer_create": 222, "timer_delete": 226,
        "timer_getoverrun": 225, "timer_gettime": 224, "timer_settime": 223,
        "timerfd_create": 283, "timerfd_gettime": 287, "timerfd_settime": 286, "times": 100,
        "truncate": 76, "umask": 95, "uname": 63, "unlink": 87, "unlinkat": 263, "wait4": 61,
        "waitid": 247, "write": 1, "writev": 20,
    },
    "aarch64": {
        "brk": 214, "capget": 90, "chdir": 49, "clock_getres": 114, "clock_gettime": 113,
        "clock_nanosleep": 115, "clone": 220, "clone3": 435, "close": 57, "close_range": 436,
        "copy_file_range": 285, "dup": 23, "dup3": 24, "epoll_create1": 20, "epoll_ctl": 21,
        "epoll_pwait": 22, "epoll_pwait2": 441, "eventfd2": 19, "exit": 93, "exit_group": 94,
        "faccessat": 48, "faccessat2": 439, "fadvise64": 223, "fallocate": 47, "fchdir": 50,
        "fcntl": 25, "fdatasync": 83, "flock": 32, "fstat": 80, "fstatfs": 44, "fsync": 82,
        "ftruncate": 46, "futex": 98, "futex_waitv": 449, "get_mempolicy": 236,
        "get_robust_list": 100, "getcpu": 168, "getcwd": 17, "getdents64": 61, "getegid": 177,
        "geteuid": 175, "getgid": 176, "getgroups": 158, "getitimer": 102, "getpeername": 205,
        "getpgid": 155, "getpid": 172, "getppid": 173, "getpriority": 141, "getrandom": 278,
        "getresgid": 150, "getresuid": 148, "getrlimit": 163, "getrusage": 165, "getsid": 156,
        "getsockname": 204, "getsockopt": 209, "gettid": 178, "gettimeofday": 169,
        "getuid": 174, "ioctl": 29, "kill": 129, "linkat": 37, "lseek": 62, "madvise": 233,
        "map_shadow_stack": 453, "mbind": 235, "membarrier": 283, "memfd_create": 279,
        "mincore": 232, "mkdirat": 34, "mmap": 222, "mprotect": 226, "mremap": 216,
        "mseal": 462, "msync": 227, "munmap": 215, "nanosleep": 101, "newfstatat": 79,
        "openat": 56, "openat2": 437, "pipe2": 59, "ppoll": 73, "prctl": 167, "pread64": 67,
        "preadv": 69, "preadv2": 286, "prlimit64": 261, "pselect6": 72, "pwrite64": 68,
        "pwritev": 70, "pwritev2": 287, "read": 63, "readahead": 213, "readlinkat": 78,
        "readv": 65, "recvfrom": 207, "recvmmsg": 243, "recvmsg": 212, "renameat": 38,
        "renameat2": 276, "restart_syscall": 128, "rseq": 293, "rt_sigaction": 134,
        "rt_sigpending": 136, "rt_sigprocmask": 135, "rt_sigqueueinfo": 138,
        "rt_sigreturn": 139, "rt_sigsuspend": 133, "rt_sigtimedwait": 137,
        "rt_tgsigqueueinfo": 240, "sched_get_priority_max": 125, "sched_get_priority_min": 126,
        "sched_getaffinity": 123, "sched_getattr": 275, "sched_getparam": 121,
        "sched_getscheduler": 120, "sched_rr_get_interval": 127, "sched_yield": 124,
        "sendfile": 71, "sendmmsg": 269, "sendmsg": 211, "sendto": 206, "set_mempolicy": 237,
        "set_robust_list": 99, "set_tid_address": 96, "setitimer": 103, "setrlimit": 164,
        "setsockopt": 208, "shutdown": 210, "sigaltstack": 132, "signalfd4": 74,
        "socketpair": 199, "splice": 76, "statfs": 43, "statx": 291, "symlinkat": 36,
        "sysinfo": 179, "tee": 77, "tgkill": 131, "timer_create": 107, "timer_delete": 111,
        "timer_getoverrun": 109, "timer_gettime": 108, "timer_settime": 110,
        "timerfd_create": 85, "timerfd_gettime": 87, "timerfd_settime": 86, "times": 153,
        "truncate": 45, "umask": 166, "uname": 160, "unlinkat": 35, "wait4": 260, "waitid": 95,
        "write": 64, "writev": 66,
    },
}
