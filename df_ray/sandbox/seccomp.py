"""A small seccomp filter (classic BPF) that bubblewrap installs in the sandbox.

It refuses the system calls a HumanEval program has no use for and that widen the kernel's
attack surface or the program's reach: new namespaces (``unshare``, ``setns``, ``clone``
with a namespace flag; ``clone3`` answers ENOSYS so the C library falls back to ``clone``),
mounts, ``ptrace`` and ``process_vm_*``, keyrings, ``bpf``, ``perf_event_open``,
``userfaultfd``, ``io_uring`` and Linux AIO (``io_setup`` ...: host-wide ``fs.aio-max-nr``),
module loading, file handles, ``kcmp``, ``pidfd_getfd``; ``prctl(PR_SET_DUMPABLE, v)`` for
any v but 0 (a program stays non-dumpable: no core dump to a ``core_pattern`` pipe, its
``/proc`` files stay root's); huge-page mappings (``MAP_HUGETLB``, ``SHM_HUGETLB``,
``MFD_HUGETLB``: reserved huge pages no memory cgroup charges); where asked, UDP and other
AF_INET/AF_INET6 datagram sockets (cgroup v1 does not charge their buffers);
and sockets of any address family but AF_UNIX, AF_INET and AF_INET6 (``SOCKET_FAMILIES``:
vsock, netlink, packet, ... fail with EAFNOSUPPORT). Other refused calls fail with EPERM; a call made through another architecture's ABI (i386 or
x32 on x86-64) kills the process. Built for x86-64 and aarch64; elsewhere there is none
(the layer is optional: the namespaces and the uid are the guarantee).
"""

from __future__ import annotations

import platform
import struct

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

# name -> (x86_64 nr, aarch64 nr)
BLOCKED = {
    "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39),
    "pivot_root": (155, 41), "chroot": (161, 51), "ptrace": (101, 117),
    "process_vm_readv": (310, 270), "process_vm_writev": (311, 271), "keyctl": (250, 219),
    "add_key": (248, 217), "request_key": (249, 218), "bpf": (321, 280),
    "perf_event_open": (298, 241), "userfaultfd": (323, 282), "kexec_load": (246, 104),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264), "kcmp": (312, 272),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427), "open_tree": (428, 428), "move_mount": (429, 429),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432),
    "fspick": (433, 433), "pidfd_getfd": (438, 438), "mount_setattr": (442, 442),
    "quotactl": (179, 60), "swapon": (167, 224), "swapoff": (168, 225),
    "reboot": (169, 142), "acct": (163, 89), "syslog": (103, 116),
    # Linux AIO: its contexts count against the host-wide fs.aio-max-nr
    "io_setup": (206, 0), "io_destroy": (207, 1), "io_submit": (209, 2),
    "io_cancel": (210, 3), "io_getevents": (208, 4), "io_pgetevents": (333, 292),
}
CLONE = (56, 220)
CLONE3 = (435, 435)
SOCKET = (41, 198)
SOCKETPAIR = (53, 199)
#: The address families ``socket``/``socketpair`` may create: AF_UNIX, AF_INET, AF_INET6 (in
#: the sandbox's network namespace, whose only interface is loopback). Any other (AF_VSOCK,
#: which no network namespace confines, AF_NETLINK, AF_PACKET, AF_BLUETOOTH, AF_ALG, ...)
#: fails with EAFNOSUPPORT.
SOCKET_FAMILIES = (1, 2, 10)
#: CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 \
    | 0x20000000 | 0x40000000 | 0x00000080

#: Calls refused when a flag argument has a bit of the mask: (argument index, mask).
#: Huge-page mappings (MAP_HUGETLB, SHM_HUGETLB, MFD_HUGETLB) take reserved huge pages,
#: which no memory cgroup charges.
FLAGGED = {"mmap": (3, 0x40000), "shmget": (2, 0x800), "memfd_create": (1, 0x4)}
FLAGGED_NR = {"mmap": (9, 222), "shmget": (29, 194), "memfd_create": (319, 279),
              "prctl": (157, 167)}
PR_SET_DUMPABLE = 4
AF_UNIX = 1
SOCK_DGRAM = 2


def _arg(i: int) -> int:
    """Offset of the low 32 bits of argument ``i`` in ``struct seccomp_data``."""
    return 16 + 8 * i


_ALU_AND_K = 0x54
_LD_W_ABS = 0x20
_JEQ = 0x15
_JGE = 0x35
_JSET = 0x45
_RET = 0x06
RET_ALLOW = 0x7FFF0000
RET_KILL = 0x80000000
EPERM, ENOSYS, EAFNOSUPPORT = 1, 38, 97


def _ret_errno(e: int) -> int:
    return 0x00050000 | e


def arch() -> str | None:
    m = platform.machine().lower()
    m = {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)
    return m if m in AUDIT_ARCH else None


def build(machine: str | None = None, *, deny_inet_datagrams: bool = False) -> bytes | None:
    """The filter as bytes of ``struct sock_filter``, or None on an unsupported arch.

    ``deny_inet_datagrams``: AF_INET/AF_INET6 datagram sockets (UDP, ping) fail with EPERM
    too, for hosts whose memory cgroup does not charge their buffers (cgroup v1)."""
    m = machine or arch()
    if m not in AUDIT_ARCH:
        return None
    col = 0 if m == "x86_64" else 1
    # instructions as (code, jt_label|int, jf_label|int, k); labels resolved below
    prog: list[tuple[int, object, object, int]] = [
        (_LD_W_ABS, 0, 0, 4),  # arch
        (_JEQ, 0, "kill", AUDIT_ARCH[m]),
        (_LD_W_ABS, 0, 0, 0),  # syscall nr
    ]
    if m == "x86_64":
        prog.append((_JGE, "kill", 0, 0x40000000))  # x32 ABI
    for nrs in BLOCKED.values():
        prog.append((_JEQ, "deny", 0, nrs[col]))
    prog.append((_JEQ, "enosys", 0, CLONE3[col]))
    prog.append((_JEQ, "socket", 0, SOCKET[col]))
    prog.append((_JEQ, "socket", 0, SOCKETPAIR[col]))
    for name, nrs in FLAGGED_NR.items():  # prctl: its own block below
        prog.append((_JEQ, name, 0, nrs[col]))
    prog.append((_JEQ, 0, "allow", CLONE[col]))
    prog.append((_LD_W_ABS, 0, 0, _arg(0)))
    prog.append((_JSET, "deny", "allow", NAMESPACE_FLAGS))
    labels: dict[str, int] = {}
    for name, (arg, mask) in FLAGGED.items():
        labels[name] = len(prog)
        prog.append((_LD_W_ABS, 0, 0, _arg(arg)))
        prog.append((_JSET, "deny", "allow", mask))
    # prctl(PR_SET_DUMPABLE, v): only v == 0
    labels["prctl"] = len(prog)
    prog.append((_LD_W_ABS, 0, 0, _arg(0)))
    prog.append((_JEQ, 0, "allow", PR_SET_DUMPABLE))
    prog.append((_LD_W_ABS, 0, 0, _arg(1)))
    prog.append((_JEQ, "allow", "deny", 0))
    labels["socket"] = len(prog)
    prog.append((_LD_W_ABS, 0, 0, _arg(0)))  # the address family (an int)
    prog.append((_JEQ, "allow", 0, AF_UNIX))
    prog.append((_JEQ, "inet", 0, 2))
    prog.append((_JEQ, "inet", 0, 10))
    prog.append((_RET, 0, 0, _ret_errno(EAFNOSUPPORT)))
    labels["inet"] = len(prog)
    if deny_inet_datagrams:
        prog.append((_LD_W_ABS, 0, 0, _arg(1)))  # the type, with SOCK_NONBLOCK/CLOEXEC
        prog.append((_ALU_AND_K, 0, 0, 0xF))
        prog.append((_JEQ, "deny", "allow", SOCK_DGRAM))
    labels.update({"allow": len(prog), "deny": len(prog) + 1, "enosys": len(prog) + 2,
                   "kill": len(prog) + 3})
    prog += [(_RET, 0, 0, RET_ALLOW), (_RET, 0, 0, _ret_errno(EPERM)),
             (_RET, 0, 0, _ret_errno(ENOSYS)), (_RET, 0, 0, RET_KILL)]

    def rel(x: object, at: int) -> int:
        if isinstance(x, str):
            off = labels[x] - at - 1
            assert 0 <= off < 256
            return off
        return int(x)  # type: ignore[call-overload]

    out = [struct.pack("<HBBI", code, rel(jt, i), rel(jf, i), k)
           for i, (code, jt, jf, k) in enumerate(prog)]
    return b"".join(out)
