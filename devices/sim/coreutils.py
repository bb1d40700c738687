"""The simulated phone's file tools (toybox): ``echo``, ``rm``, ``cat``, ``md5sum``, ``ls``,
``tail``/``head`` and ``sleep``, over the phone's small file system."""

from __future__ import annotations

import hashlib
import time

from devices.sim.phone import SimPhone
from devices.sim.process import Command, Result


def echo(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    if args[:1] == ["-n"]:
        return Result(stdout=" ".join(args[1:]).encode())
    return Result(stdout=(" ".join(args) + "\n").encode())


def rm(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    for path in (a for a in args if not a.startswith("-")):
        phone.files.pop(path, None)
    return Result()


def cat(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    if not args:
        return Result(stdout=stdin)
    entry = phone.files.get(args[0])
    if entry is None:
        return Result(stderr=f"cat: {args[0]}: No such file or directory\n".encode(), code=1)
    return Result(stdout=entry.data)


def md5sum(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    out, code = [], 0
    for path in args:
        entry = phone.files.get(path)
        if entry is None:
            out.append(f"md5sum: {path}: No such file or directory")
            code = 1
        else:
            out.append(f"{hashlib.md5(entry.data).hexdigest()}  {path}")
    return Result(stdout=("\n".join(out) + "\n").encode(), code=code)


def ls(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    base = (next((a for a in args if not a.startswith("-")), "/sdcard")).rstrip("/") + "/"
    names = sorted({p[len(base) :].split("/", 1)[0] for p in phone.files if p.startswith(base)})
    return Result(stdout="".join(f"{n}\n" for n in names).encode())


def tail_head(which: str) -> Command:
    def run(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
        count = 10
        for a in args:
            if a.startswith("-") and a[1:].lstrip("n").isdigit():
                count = int(a[1:].lstrip("n"))
        lines = stdin.decode("utf-8", "replace").splitlines()
        picked = lines[-count:] if which == "tail" else lines[:count]
        return Result(stdout="".join(f"{line}\n" for line in picked).encode())

    return run


def sleep(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    time.sleep(min(float(args[0]) if args else 0.0, 5.0))
    return Result()
