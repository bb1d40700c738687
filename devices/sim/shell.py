"""The simulated phone's ``/system/bin/sh``: parses command lines the way a POSIX shell does.

Quoting, ``;``/``&&``/``||``, pipes, ``$?`` and command substitution (``$(...)`` and backticks)
behave as on a phone, and every simple command that runs is appended to ``phone.command_log``.
That is what makes the simulated phone a real test of the driver's escaping: text that reaches
this shell unescaped gets *executed*, and the log shows it.

The commands are the ones adb clients send (``input``, ``screencap``, ``wm``, ``am``, ``monkey``,
``pm``, ``uiautomator``, ``dumpsys``, ``getprop``, ``settings``, ``ime``, file tools), with the
output formats the clients parse.
"""

from __future__ import annotations

import base64
import hashlib
import io
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field

from devices.keys import keycode
from devices.sim.display import PHYSICAL_DENSITY
from devices.sim.phone import ADB_KEYBOARD_IME, U2_IME, FileEntry, SimPhone


class KeepRunning(Exception):
    """The command is a server that runs until the client closes the stream (u2's app_process)."""

    def __init__(self, output: bytes, on_close: Callable[[], None]) -> None:
        super().__init__("keep running")
        self.output = output
        self.on_close = on_close


class ShellSyntaxError(ValueError):
    pass


@dataclass
class Result:
    stdout: bytes = b""
    stderr: bytes = b""
    code: int = 0


@dataclass
class _Word:
    text: str
    assignment: bool = False


@dataclass
class _Context:
    phone: SimPhone
    last_code: int = 0
    env: dict[str, str] = field(default_factory=dict)


def _find_closing(line: str, start: int) -> int:
    """Index of the ``)`` closing a ``$(`` whose body starts at ``start``, honouring quotes."""
    depth, i, quote = 1, start, ""
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\" and quote == '"':
                i += 1
        elif ch in "'\"":
            quote = ch
        elif ch == "\\":
            i += 1
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ShellSyntaxError("unterminated $(")


def tokenize(line: str, ctx: _Context) -> list[str | _Word]:
    """Words (quotes removed, substitutions run) and operator strings."""
    tokens: list[str | _Word] = []
    word: list[str] = []
    in_word = False
    i = 0

    def flush() -> None:
        nonlocal in_word
        if in_word:
            text = "".join(word)
            is_assign = "=" in text and text.split("=", 1)[0].isidentifier() and not tokens_since_op()
            tokens.append(_Word(text, assignment=is_assign))
            word.clear()
            in_word = False

    def tokens_since_op() -> bool:
        for tok in reversed(tokens):
            if isinstance(tok, str):
                return False
            if not tok.assignment:
                return True
        return False

    def substitute(body: str) -> str:
        return run_line(ctx, body).stdout.decode("utf-8", "replace").rstrip("\n")

    def dollar(at: int, quoted: bool) -> int:
        """Expand ``$...`` at ``line[at]``; return the index after it."""
        nxt = line[at + 1] if at + 1 < len(line) else ""
        if nxt == "(":
            end = _find_closing(line, at + 2)
            word.append(substitute(line[at + 2 : end]))
            return end + 1
        if nxt == "?":
            word.append(str(ctx.last_code))
            return at + 2
        j = at + 1
        while j < len(line) and (line[j].isalnum() or line[j] == "_"):
            j += 1
        if j == at + 1:
            word.append("$")
            return at + 1
        word.append(ctx.env.get(line[at + 1 : j], ""))
        return j

    while i < len(line):
        ch = line[i]
        if ch == "'":
            end = line.find("'", i + 1)
            if end < 0:
                raise ShellSyntaxError("unterminated '")
            word.append(line[i + 1 : end])
            in_word, i = True, end + 1
        elif ch == '"':
            i += 1
            in_word = True
            while True:
                if i >= len(line):
                    raise ShellSyntaxError('unterminated "')
                c = line[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\" and i + 1 < len(line) and line[i + 1] in '"\\$`\n':
                    word.append(line[i + 1])
                    i += 2
                elif c == "$":
                    i = dollar(i, True)
                elif c == "`":
                    end = line.find("`", i + 1)
                    if end < 0:
                        raise ShellSyntaxError("unterminated `")
                    word.append(substitute(line[i + 1 : end]))
                    i = end + 1
                else:
                    word.append(c)
                    i += 1
        elif ch == "\\":
            if i + 1 < len(line) and line[i + 1] != "\n":
                word.append(line[i + 1])
                in_word = True
            i += 2
        elif ch == "$":
            in_word = True
            i = dollar(i, False)
        elif ch == "`":
            end = line.find("`", i + 1)
            if end < 0:
                raise ShellSyntaxError("unterminated `")
            word.append(substitute(line[i + 1 : end]))
            in_word, i = True, end + 1
        elif ch in " \t":
            flush()
            i += 1
        elif ch in "&<>()":
            # Redirections, background jobs and subshells: not needed by any adb client; refuse
            # rather than guess (a phone would run them, so an unescaped one is still a bug).
            flush()
            tokens.append(ch)
            i += 1
        elif ch == "#" and not in_word:
            break
        else:
            word.append(ch)
            in_word = True
            i += 1
    flush()
    return tokens


def split_commands(line: str) -> list[tuple[str, str]]:
    """Split at top-level ``;``, newline, ``&&``, ``||`` and ``|``: (command text, operator after it).

    Only splitting happens here; each command is expanded just before it runs, as a shell does
    (so ``cmd; echo $?`` reports ``cmd``'s status).
    """
    parts: list[tuple[str, str]] = []
    i, start, quote = 0, 0, ""
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\" and quote == '"':
                i += 1
        elif ch in "'\"`":
            quote = ch
        elif ch == "\\":
            i += 1
        elif line.startswith("$(", i):
            i = _find_closing(line, i + 2)  # a substitution's own ; and | belong to it
        elif line.startswith(("&&", "||"), i) or ch in ";|\n":
            op = line[i : i + 2] if line.startswith(("&&", "||"), i) else ch
            parts.append((line[start:i], op))
            i += len(op)
            start = i
            continue
        i += 1
    if quote:
        raise ShellSyntaxError(f"unterminated {quote}")
    parts.append((line[start:], ";"))
    return parts


def run_line(ctx: _Context, line: str) -> Result:
    """Run a command line: pipelines joined by ``;``, ``&&`` and ``||``."""
    try:
        parts = split_commands(line)
    except ShellSyntaxError as exc:
        return Result(stderr=f"/system/bin/sh: syntax error: {exc}\n".encode(), code=2)
    out, err = bytearray(), bytearray()
    pipeline: list[str] = []
    skip = False
    for text, op in parts:
        pipeline.append(text)
        if op == "|":
            continue
        if not skip and any(t.strip() for t in pipeline):
            try:
                stages = [tokenize(t, ctx) for t in pipeline]
            except ShellSyntaxError as exc:
                return Result(bytes(out), bytes(err) + f"/system/bin/sh: syntax error: {exc}\n".encode(), 2)
            refused = [tok for stage in stages for tok in stage if isinstance(tok, str)]
            if refused:
                ctx.phone.command_log.append(f"<refused operator {refused[0]}>")
                return Result(
                    bytes(out), bytes(err) + f"/system/bin/sh: '{refused[0]}' not supported\n".encode(), 2
                )
            result = _run_pipeline(ctx, [[w for w in stage if isinstance(w, _Word)] for stage in stages])
            out.extend(result.stdout)
            err.extend(result.stderr)
            ctx.last_code = result.code
        skip = (op == "&&" and ctx.last_code != 0) or (op == "||" and ctx.last_code == 0)
        pipeline = []
    return Result(bytes(out), bytes(err), ctx.last_code)


def _run_pipeline(ctx: _Context, stages: list[list[_Word]]) -> Result:
    stdin = b""
    result = Result()
    for stage in stages:
        env = {}
        words = list(stage)
        while words and words[0].assignment:
            key, value = words.pop(0).text.split("=", 1)
            env[key] = value
        if not words:
            ctx.env.update(env)
            continue
        argv = [w.text for w in words]
        ctx.phone.command_log.append(" ".join(argv))
        result = _run_command(ctx, argv, stdin, env)
        stdin = result.stdout
    return result


def _run_command(ctx: _Context, argv: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    name = argv[0].rsplit("/", 1)[-1]
    if name == "toybox" and len(argv) > 1:
        argv, name = argv[1:], argv[1]
    if name in ctx.phone.faults.hang:
        raise TimeoutError(name)  # the service layer turns this into a stream that never ends
    handler = COMMANDS.get(name)
    if handler is None:
        return Result(stderr=f"/system/bin/sh: {argv[0]}: inaccessible or not found\n".encode(), code=127)
    try:
        return handler(ctx.phone, argv[1:], stdin, env)
    except _Usage as exc:
        return Result(stderr=f"{name}: {exc}\n".encode(), code=1)


class _Usage(Exception):
    pass


def _int(value: str) -> int:
    try:
        return round(float(value))
    except ValueError:
        raise _Usage(f"not a number: {value!r}") from None


# -- commands ------------------------------------------------------------------------------------
Command = Callable[[SimPhone, list[str], bytes, dict[str, str]], Result]


def _input(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    while args and (args[0] == "-d" or args[0] in ("touchscreen", "keyboard", "mouse", "touchpad")):
        args = args[2:] if args[0] == "-d" else args[1:]
    if not args:
        raise _Usage("usage: input [<source>] <command> [<arg>...]")
    cmd, rest = args[0], args[1:]
    if cmd == "tap" and len(rest) == 2:
        phone.tap(_int(rest[0]), _int(rest[1]))
    elif cmd in ("swipe", "draganddrop") and len(rest) in (4, 5):
        duration = _int(rest[4]) if len(rest) == 5 else 300
        phone.swipe(_int(rest[0]), _int(rest[1]), _int(rest[2]), _int(rest[3]), duration)
    elif cmd == "text" and rest:
        # Android's input command takes one argument and turns %s into spaces. Characters the
        # virtual keyboard cannot produce fail, as on a phone.
        text = rest[0].replace("%s", " ")
        if any(ord(c) > 126 or (ord(c) < 32 and c != "\t") for c in text):
            return Result(
                stderr=b"Exception occurred while executing 'text':\njava.lang.IllegalArgumentException\n",
                code=1,
            )
        phone.type_text(text)
    elif cmd == "keyevent" and rest:
        codes = [c for c in rest if not c.startswith("--")]
        for code in codes:
            try:
                phone.keyevent(keycode(code))
            except ValueError as exc:
                return Result(stderr=f"{exc}\n".encode(), code=1)
    else:
        raise _Usage(f"bad arguments: {' '.join(args)}")
    return Result()


def _screencap(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    paths = [a for a in args if not a.startswith("-") and not a.isdigit()]
    # As screencap does: PNG with -p or a .png file name, else the raw frame (header + RGBA).
    as_png = "-p" in args or bool(paths and paths[0].endswith(".png"))
    image = phone.screenshot_png() if as_png else phone.screenshot_raw()
    if phone.faults.display_warning and "-d" not in args:
        # What foldables print, on stdout, when no display is named.
        image = (
            b"[Warning] Multiple displays were found, but no display id was specified! Defaulting to the first display found, however this default is not guaranteed to be consistent across captures. A display id should be specified.\n"
            + image
        )
    if paths:
        phone.files[paths[0]] = FileEntry(image)
        return Result()
    return Result(stdout=image)


def _wm(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    if args[:1] == ["size"]:
        return Result(stdout=f"Physical size: {phone.width}x{phone.height}\n".encode())
    if args[:1] == ["density"]:
        # As Android's WindowManager: an override changes the UI scale (devices.sim.display).
        if len(args) == 1:
            lines = f"Physical density: {PHYSICAL_DENSITY}\n"
            if phone.density != PHYSICAL_DENSITY:
                lines += f"Override density: {phone.density}\n"
            return Result(stdout=lines.encode())
        value = args[1]
        if value == "reset":
            phone.density = PHYSICAL_DENSITY
            return Result()
        if not value.isdigit() or not 72 <= int(value) <= 1280:
            return Result(stderr=f"Error: bad density {value!r}\n".encode(), code=255)
        phone.density = int(value)
        return Result()
    raise _Usage("usage: wm size|density [DENSITY|reset]")


def _component(phone: SimPhone, value: str) -> tuple[str, str | None]:
    pkg, _, activity = value.partition("/")
    if activity.startswith("."):
        activity = activity
    elif activity.startswith(pkg + "."):
        activity = activity[len(pkg) :]
    return pkg, activity or None


def _am(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    if not args:
        raise _Usage("usage: am start|force-stop|broadcast ...")
    cmd, rest = args[0], args[1:]
    if cmd in ("start", "start-activity"):
        component = _opt(rest, "-n")
        if component is None:
            raise _Usage("am start needs -n package/activity")
        pkg, activity = _component(phone, component)
        if pkg not in phone.apps:
            return Result(
                stdout=b"Starting: Intent { }\n",
                stderr=f"Error: Activity class {{{component}}} does not exist.\n".encode(),
                code=1,
            )
        phone.start(pkg, activity)
        return Result(stdout=f"Starting: Intent {{ cmp={component} }}\n".encode())
    if cmd == "force-stop" and rest:
        if phone.foreground.package == rest[0]:
            phone.home()
        if rest[0] in phone.apps:
            phone.apps[rest[0]].reset_view()
        return Result()
    if cmd == "broadcast":
        return _broadcast(phone, rest)
    raise _Usage(f"unknown am command {cmd}")


def _opt(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args[:-1]):
        if arg == flag:
            return args[i + 1]
    return None


def _extra(args: list[str], key: str) -> str | None:
    for i in range(len(args) - 2):
        if args[i] in ("--es", "-e") and args[i + 1] == key:
            return args[i + 2]
    return None


def _broadcast(phone: SimPhone, args: list[str]) -> Result:
    action = _opt(args, "-a") or ""
    header = f"Broadcasting: Intent {{ act={action} flg=0x400000 }}\n".encode()
    ime = phone.ime
    text: str | None = None
    try:
        if action in ("ADB_INPUT_B64", "ADB_INPUT_TEXT") and ime == ADB_KEYBOARD_IME:
            msg = _extra(args, "msg") or ""
            text = base64.b64decode(msg).decode("utf-8") if action == "ADB_INPUT_B64" else msg
        elif action == "ADB_KEYBOARD_INPUT_TEXT" and ime == U2_IME:
            text = base64.b64decode(_extra(args, "text") or "").decode("utf-8")
        elif action in ("ADB_CLEAR_TEXT", "ADB_KEYBOARD_CLEAR_TEXT") and phone.focused is not None:
            phone.focused.value = ""
        elif action == "ADB_KEYBOARD_HIDE" and ime == U2_IME:
            phone.focus(None)
            return Result(stdout=header + b'Broadcast completed: result=-1 data="success"\n')
    except (ValueError, UnicodeDecodeError):
        return Result(stdout=header + b"Broadcast completed: result=0\n")
    if text is not None:
        phone.type_text(text)
        return Result(stdout=header + b'Broadcast completed: result=-1 data="success"\n')
    return Result(stdout=header + b"Broadcast completed: result=0\n")


def _monkey(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    pkg = _opt(args, "-p")
    if pkg is None or pkg not in phone.apps:
        return Result(stdout=b"** No activities found to run, monkey aborted.\n", code=252)
    phone.start(pkg)
    return Result(stdout=b"  bash arg: -p\n  bash arg: " + pkg.encode() + b"\nEvents injected: 1\n")


def _apk_package(data: bytes) -> str | None:
    """The package an APK declares (read from its binary manifest's UTF-16 string pool)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as apk:
            manifest = apk.read("AndroidManifest.xml")
    except (zipfile.BadZipFile, KeyError):
        return None
    for known in KNOWN_APKS:
        if known.encode("utf-16-le") in manifest:
            return known
    return "com.example.sideloaded"


# Packages whose install changes the phone: uiautomator2's helper app brings its input method.
KNOWN_APKS = {"com.github.uiautomator": U2_IME, "com.android.adbkeyboard": ADB_KEYBOARD_IME}


def _pm(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    if args[:1] == ["install"]:
        path = args[-1]
        entry = phone.files.get(path)
        package = _apk_package(entry.data) if entry is not None else None
        if package is None:
            return Result(stdout=b"Failure [INSTALL_FAILED_INVALID_APK]\n", code=1)
        phone.installed.add(package)
        ime = KNOWN_APKS.get(package)
        if ime is not None and ime not in phone.imes:
            phone.imes.append(ime)
        return Result(stdout=b"Success\n")
    if args[:1] == ["uninstall"] and len(args) >= 2:
        package = args[-1]
        if package not in phone.installed:
            return Result(stdout=b"Failure [DELETE_FAILED_INTERNAL_ERROR]\n", code=1)
        phone.installed.discard(package)
        ime = KNOWN_APKS.get(package)
        if ime is not None:
            phone.imes = [i for i in phone.imes if i != ime]
            phone.enabled_imes = [i for i in phone.enabled_imes if i != ime]
            if phone.ime == ime:
                phone.ime = phone.imes[0]
        return Result(stdout=b"Success\n")
    if args[:2] == ["list", "packages"]:
        pkgs = sorted({*phone.apps, *phone.installed})
        needle = next((a for a in args[2:] if not a.startswith("-")), "")
        return Result(stdout="".join(f"package:{p}\n" for p in pkgs if needle in p).encode())
    if args[:1] == ["clear"] and len(args) == 2:
        app = phone.apps.get(args[1])
        if app is None:
            return Result(stdout=b"Failed\n", code=1)
        app.reset()
        return Result(stdout=b"Success\n")
    if args[:1] == ["path"] and len(args) == 2 and args[1] in phone.apps:
        return Result(stdout=f"package:/data/app/{args[1]}/base.apk\n".encode())
    return Result(stderr=b"Error: unknown pm command\n", code=1)


def _cmd(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    if args[:2] == ["package", "resolve-activity"]:
        pkg = args[-1]
        app = phone.apps.get(pkg)
        if app is None:
            return Result(stdout=b"No activity found\n")
        return Result(
            stdout=f"priority=0 preferredOrder=0\n{pkg}/{app.activities.get('main', '.MainActivity')}\n".encode()
        )
    return Result(stderr=b"cmd: unknown service\n", code=1)


def _uiautomator(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    if args[:1] != ["dump"]:
        raise _Usage("usage: uiautomator dump [file]")
    xml = phone.hierarchy()
    target = next((a for a in args[1:] if not a.startswith("-")), "/sdcard/window_dump.xml")
    if target == "/dev/tty":
        return Result(stdout=xml.encode() + b"UI hierchary dumped to: /dev/tty\n")
    phone.files[target] = FileEntry(xml.encode())
    return Result(stdout=f"UI hierchary dumped to: {target}\n".encode())


def _dumpsys(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    service = args[0] if args else ""
    component = phone.current_activity()
    if service == "window":
        text = (
            f"  mCurrentFocus=Window{{1a2b3c u0 {component}}}\n"
            f"  mFocusedApp=ActivityRecord{{4d5e6f u0 {component} t12}}\n"
        )
    elif service == "activity":
        text = f"    mResumedActivity: ActivityRecord{{4d5e6f u0 {component} t12}}\n"
    elif service == "display":
        text = f'  mDisplayInfos:\n    DisplayInfo{{"Built-in Screen", displayId 0, real {phone.width} x {phone.height}, orientation={phone.rotation}}}\n'
    elif service == "power":
        text = f"  mHoldingDisplaySuspendBlocker={'true' if phone.screen_on else 'false'}\n  mWakefulness={'Awake' if phone.screen_on else 'Asleep'}\n"
    elif service == "input_method":
        text = (
            f"  mCurMethodId={phone.ime}\n  mInputShown={'true' if phone.focused is not None else 'false'}\n"
        )
    elif service == "SurfaceFlinger":
        text = 'Display 4619827259835644672 (HWC display 0): port=0 pnpId=GGL displayName="EMU_display_0"\n'
    elif service == "battery":
        text = "Current Battery Service state:\n  AC powered: true\n  level: 87\n"
    else:
        text = f"Can't find service: {service}\n"
    return Result(stdout=text.encode())


def properties(phone: SimPhone) -> dict[str, str]:
    return {
        "ro.product.model": phone.model,
        "ro.product.manufacturer": "Google",
        "ro.product.brand": "google",
        "ro.product.name": "sim",
        "ro.product.device": "sim",
        "ro.serialno": phone.serial,
        "ro.build.version.release": "14",
        "ro.build.version.sdk": "34",
        "ro.build.characteristics": "phone",
        "sys.boot_completed": "1",
    }


def _getprop(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    props = properties(phone)
    if args:
        return Result(stdout=(props.get(args[0], "") + "\n").encode())
    return Result(stdout="".join(f"[{k}]: [{v}]\n" for k, v in sorted(props.items())).encode())


def _settings(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    if len(args) < 3:
        raise _Usage("usage: settings get|put NAMESPACE KEY [VALUE]")
    op, _, key = args[:3]
    s = phone.settings
    values = {
        "default_input_method": phone.ime,
        "screen_brightness": str(s.brightness),
        "airplane_mode_on": "1" if s.airplane else "0",
        "wifi_on": "1" if s.wifi else "0",
        "bluetooth_on": "1" if s.bluetooth else "0",
        "ui_night_mode": "2" if s.dark_mode else "1",
    }
    if op == "get":
        return Result(stdout=(values.get(key, "null") + "\n").encode())
    if op == "put" and len(args) >= 4:
        value = args[3]
        if key == "default_input_method" and value in phone.enabled_imes:
            phone.ime = value
        elif key == "screen_brightness":
            s.brightness = max(0, min(255, _int(value)))
        return Result()
    raise _Usage("usage: settings get|put NAMESPACE KEY [VALUE]")


def _ime(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    if args[:1] == ["list"]:
        shown = phone.imes if "-a" in args else phone.enabled_imes
        return Result(stdout="".join(f"{i}\n" for i in shown).encode())
    if args[:1] in (["enable"], ["set"]) and len(args) >= 2:
        ime = args[-1]
        if ime not in phone.imes:
            return Result(
                stderr=f"Unknown input method {ime} cannot be enabled for user #0\n".encode(), code=1
            )
        if args[0] == "enable":
            if ime not in phone.enabled_imes:
                phone.enabled_imes.append(ime)
            return Result(stdout=f"Input method {ime}: now enabled for user #0\n".encode())
        if ime not in phone.enabled_imes:
            return Result(stderr=f"Input method {ime} is not enabled\n".encode(), code=1)
        phone.ime = ime
        return Result(stdout=f"Input method {ime} selected for user #0\n".encode())
    if args[:1] == ["reset"]:
        phone.ime = phone.imes[0]
        return Result()
    raise _Usage("usage: ime list|enable|set|reset")


def _echo(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    if args[:1] == ["-n"]:
        return Result(stdout=" ".join(args[1:]).encode())
    return Result(stdout=(" ".join(args) + "\n").encode())


def _rm(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    for path in (a for a in args if not a.startswith("-")):
        phone.files.pop(path, None)
    return Result()


def _cat(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    if not args:
        return Result(stdout=stdin)
    entry = phone.files.get(args[0])
    if entry is None:
        return Result(stderr=f"cat: {args[0]}: No such file or directory\n".encode(), code=1)
    return Result(stdout=entry.data)


def _md5sum(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    out, code = [], 0
    for path in args:
        entry = phone.files.get(path)
        if entry is None:
            out.append(f"md5sum: {path}: No such file or directory")
            code = 1
        else:
            out.append(f"{hashlib.md5(entry.data).hexdigest()}  {path}")
    return Result(stdout=("\n".join(out) + "\n").encode(), code=code)


def _ls(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    base = (next((a for a in args if not a.startswith("-")), "/sdcard")).rstrip("/") + "/"
    names = sorted({p[len(base) :].split("/", 1)[0] for p in phone.files if p.startswith(base)})
    return Result(stdout="".join(f"{n}\n" for n in names).encode())


def _tail_head(which: str) -> Command:
    def run(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
        count = 10
        for a in args:
            if a.startswith("-") and a[1:].lstrip("n").isdigit():
                count = int(a[1:].lstrip("n"))
        lines = stdin.decode("utf-8", "replace").splitlines()
        picked = lines[-count:] if which == "tail" else lines[:count]
        return Result(stdout="".join(f"{line}\n" for line in picked).encode())

    return run


def _app_process(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    if "com.wetest.uia2.Main" in args:
        phone.u2_running = True
        raise KeepRunning(
            b"[server] INFO: [UiAutomator2Server] Starting Server\n",
            on_close=lambda: setattr(phone, "u2_running", False),
        )
    return Result(stderr=b"app_process: class not found\n", code=1)


def _svc(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    if len(args) == 2 and args[0] in ("wifi", "bluetooth") and args[1] in ("enable", "disable"):
        setattr(phone.settings, args[0], args[1] == "enable")
    return Result()


def _sleep(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    time.sleep(min(float(args[0]) if args else 0.0, 5.0))
    return Result()


COMMANDS: dict[str, Command] = {
    "input": _input,
    "screencap": _screencap,
    "wm": _wm,
    "am": _am,
    "monkey": _monkey,
    "pm": _pm,
    "cmd": _cmd,
    "uiautomator": _uiautomator,
    "dumpsys": _dumpsys,
    "getprop": _getprop,
    "settings": _settings,
    "ime": _ime,
    "echo": _echo,
    "rm": _rm,
    "cat": _cat,
    "md5sum": _md5sum,
    "md5": _md5sum,
    "ls": _ls,
    "tail": _tail_head("tail"),
    "head": _tail_head("head"),
    "app_process": _app_process,
    "svc": _svc,
    "sleep": _sleep,
    "true": lambda phone, args, stdin, env: Result(),
    "false": lambda phone, args, stdin, env: Result(code=1),
}


def run(phone: SimPhone, line: str) -> Result:
    """Run one ``shell:`` command line on the phone."""
    return run_line(_Context(phone), line)
