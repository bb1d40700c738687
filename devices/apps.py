"""Resolving an app name ("Settings", "chrome", "Zoho Meeting") to an installed package.

adb has no cheap way to read launcher labels, so names resolve in this order: an exact package
name; the alias table (built-in common apps plus the operator's own entries); then a match of
the name's words against the parts of installed package names. Several candidates or none give
``AppNotFound`` with suggestions, never a guess at an unrelated app.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

# Common apps by label, each with the packages that provide it on different phones.
DEFAULT_ALIASES: dict[str, tuple[str, ...]] = {
    "settings": ("com.android.settings",),
    "chrome": ("com.android.chrome", "org.chromium.chrome"),
    "browser": ("org.chromium.chrome", "com.android.chrome", "com.android.browser"),
    "messages": ("com.google.android.apps.messaging", "com.android.mms", "com.samsung.android.messaging"),
    "contacts": ("com.android.contacts", "com.google.android.contacts", "com.samsung.android.app.contacts"),
    "phone": ("com.google.android.dialer", "com.android.dialer", "com.samsung.android.dialer"),
    "clock": ("com.google.android.deskclock", "com.android.deskclock", "com.sec.android.app.clockpackage"),
    "camera": ("com.android.camera2", "com.google.android.GoogleCamera", "com.sec.android.app.camera"),
    "files": (
        "com.google.android.documentsui",
        "com.android.documentsui",
        "com.google.android.apps.nbu.files",
    ),
    "calendar": ("com.google.android.calendar", "com.android.calendar"),
    "gmail": ("com.google.android.gm",),
    "maps": ("com.google.android.apps.maps",),
    "youtube": ("com.google.android.youtube",),
    "play store": ("com.android.vending",),
    "photos": ("com.google.android.apps.photos",),
    "gallery": ("com.google.android.apps.photos", "com.android.gallery3d", "com.sec.android.gallery3d"),
    "calculator": ("com.google.android.calculator", "com.android.calculator2"),
    "notes": ("com.example.notes", "com.google.android.keep"),
    "keep": ("com.google.android.keep",),
    "whatsapp": ("com.whatsapp",),
    "telegram": ("org.telegram.messenger",),
}

_PACKAGE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)+$")
# Package parts that say nothing about which app it is.
_GENERIC = {"com", "org", "net", "android", "google", "apps", "app", "example", "sec", "samsung"}


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]


class AppResolver:
    def __init__(self, aliases: Mapping[str, Iterable[str]] | None = None) -> None:
        merged = {k: tuple(v) for k, v in DEFAULT_ALIASES.items()}
        for label, packages in (aliases or {}).items():
            merged[label.strip().lower()] = tuple(packages)
        self.aliases = merged

    def resolve(self, name: str, installed: Iterable[str]) -> str:
        """The package for ``name`` among ``installed``; ``LookupError`` with a reason if none."""
        packages = set(installed)
        wanted = name.strip()
        if not wanted:
            raise LookupError("no app name given")
        if _PACKAGE_RE.match(wanted) and wanted in packages:
            return wanted
        for package in self.aliases.get(wanted.lower(), ()):
            if package in packages:
                return package
        words = [w for w in _words(wanted) if w not in _GENERIC]
        if not words:
            raise LookupError(f"no installed app matches {name!r}")
        scored: list[tuple[int, str]] = []
        joined = "".join(words)
        for package in packages:
            parts = [p for p in _words(package) if p not in _GENERIC]
            score = sum(1 for w in words if w in parts)
            if joined in parts:
                score = max(score, len(words))
            if score:
                scored.append((score, package))
        if not scored:
            raise LookupError(f"no installed app matches {name!r}")
        scored.sort(key=lambda s: (-s[0], len(s[1]), s[1]))
        best = scored[0][0]
        top = [p for s, p in scored if s == best]
        if best < len(words) and len(top) > 1:
            raise LookupError(f"{name!r} is ambiguous: {', '.join(sorted(top)[:5])}")
        # When several packages contain every word, the shortest wins (the app, not its plugin).
        return top[0]
