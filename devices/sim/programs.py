"""The Android programs of the simulated phone's shell, with the output formats adb clients parse:
``input``, ``screencap``, ``wm``, ``am``, ``monkey``, ``pm``, ``cmd``, ``uiautomator``,
``dumpsys``, ``getprop``, ``settings``, ``ime``, ``svc``, ``app_process``; ``COMMANDS`` names
every program the shell can run (the file tools are in ``devices.sim.coreutils``)."""

from __future__ import annotations

import base64
import io
import zipfile

from devices.keys import keycode
from devices.sim import coreutils
from devices.sim.display import PHYSICAL_DENSITY
from devices.sim.phone import ADB_KEYBOARD_IME, U2_IME, FileEntry, SimPhone
from devices.sim.process import Command, KeepRunning, Result, Usage, int_arg


def _input(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    while args and (args[0] == "-d" or args[0] in ("touchscreen", "keyboard", "mouse", "touchpad")):
        args = args[2:] if args[0] == "-d" else args[1:]
    if not args:
        raise Usage("usage: input [<source>] <command> [<arg>...]")
    cmd, rest = args[0], args[1:]
    if cmd == "tap" and len(rest) == 2:
        phone.tap(int_arg(rest[0]), int_arg(rest[1]))
    elif cmd in ("swipe", "draganddrop") and len(rest) in (4, 5):
        duration = int_arg(rest[4]) if len(rest) == 5 else 300
        phone.swipe(int_arg(rest[0]), int_arg(rest[1]), int_arg(rest[2]), int_arg(rest[3]), duration)
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
        raise Usage(f"bad arguments: {' '.join(args)}")
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
    raise Usage("usage: wm size|density [DENSITY|reset]")


def _component(phone: SimPhone, value: str) -> tuple[str, str | None]:
    pkg, _, activity = value.partition("/")
    if activity.startswith("."):
        activity = activity
    elif activity.startswith(pkg + "."):
        activity = activity[len(pkg) :]
    return pkg, activity or None


def _am(phone: SimPhone, args: list[str], stdin: bytes, env: dict[str, str]) -> Result:
    if not args:
        raise Usage("usage: am start|force-stop|broadcast ...")
    cmd, rest = args[0], args[1:]
    if cmd in ("start", "start-activity"):
        component = _opt(rest, "-n")
        if component is None:
            raise Usage("am start needs -n package/activity")
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
    raise Usage(f"unknown am command {cmd}")


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
        raise Usage("usage: uiautomator dump [file]")
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
        raise Usage("usage: settings get|put NAMESPACE KEY [VALUE]")
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
            s.brightness = max(0, min(255, int_arg(value)))
        return Result()
    raise Usage("usage: settings get|put NAMESPACE KEY [VALUE]")


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
    raise Usage("usage: ime list|enable|set|reset")


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
    "echo": coreutils.echo,
    "rm": coreutils.rm,
    "cat": coreutils.cat,
    "md5sum": coreutils.md5sum,
    "md5": coreutils.md5sum,
    "ls": coreutils.ls,
    "tail": coreutils.tail_head("tail"),
    "head": coreutils.tail_head("head"),
    "app_process": _app_process,
    "svc": _svc,
    "sleep": coreutils.sleep,
    "true": lambda phone, args, stdin, env: Result(),
    "false": lambda phone, args, stdin, env: Result(code=1),
}
