"""The Android key codes the simulated phone reacts to (``input keyevent N``; android.view.KeyEvent)."""

KEY_HOME, KEY_BACK, KEY_MENU, KEY_ENTER, KEY_DEL, KEY_SPACE, KEY_TAB = 3, 4, 82, 66, 67, 62, 61
KEY_WAKEUP, KEY_SLEEP, KEY_POWER, KEY_APP_SWITCH, KEY_PASTE = 224, 223, 26, 187, 279
