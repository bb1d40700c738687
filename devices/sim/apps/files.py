"""Files: folders, files in them, and deleting a file (long press, then confirm)."""

from __future__ import annotations

from functools import partial
from typing import ClassVar

from devices.sim.apps.base import App
from devices.sim.screen import Dialog, Screen
from devices.sim.ui import View

DEFAULT_FOLDERS = {
    "Download": ["boarding_pass.pdf", "invoice_0423.pdf", "setup.apk", "wallpaper.jpg"],
    "Documents": ["cv.docx", "notes.txt", "tax_2025.pdf"],
    "Pictures": ["IMG_0001.jpg", "IMG_0002.jpg", "IMG_0003.jpg", "screenshot.png"],
    "Music": ["song.mp3"],
}


class Files(App):
    package = "com.google.android.documentsui"
    label = "Files"
    glyph = "▤"
    color = "#12b5cb"
    activities: ClassVar[dict[str, str]] = {"main": ".files.FilesActivity", "folder": ".files.FolderActivity"}

    def reset(self) -> None:
        super().reset()
        self.folders = {name: list(files) for name, files in DEFAULT_FOLDERS.items()}
        self.folder = "Download"
        self.starred: set[tuple[str, str]] = set()
        self.show_stars = True  # starred files marked in the folder list

    def page_main(self, screen: Screen) -> None:
        screen.title("Files")
        for mark, (name, files) in self.phone.arrange(list(self.folders.items()), "folders"):
            screen.row(
                f"{name}   ({len(files)} items)",
                on_tap=partial(self._open, name),
                rid="folder",
                desc=name,
                mark=mark,
            )

    def page_folder(self, screen: Screen) -> None:
        screen.title(self.folder, back=self.up)
        files = self.phone.arrange(self.folders[self.folder], "folder:" + self.folder)

        def item(i: int, y: int, parent: View) -> None:
            mark, name = files[i]
            star = "★ " if self.show_stars and (self.folder, name) in self.starred else ""
            screen.row(
                star + name,
                on_long_press=lambda: self._options(name),
                on_tap=lambda: None,
                parent=parent,
                y=y,
                rid="file_name",
                desc=name,
                mark=mark,
            )

        screen.scroll_list("folder:" + self.folder, len(files), item)

    def _open(self, name: str) -> None:
        self.folder = name
        self.go("folder")

    def _options(self, name: str) -> None:
        folder = self.folder

        def delete() -> None:
            self.phone.dialog = Dialog(
                "Delete file?",
                f"{name} will be deleted permanently.",
                [("Cancel", lambda: None), ("Delete", lambda: self.folders[folder].remove(name))],
            )

        def star() -> None:
            self.starred ^= {(folder, name)}

        self.phone.dialog = Dialog(name, "Choose an action", [("Star", star), ("Delete", delete)])
