"""The simulated phone's ``/system/bin/sh``: parses command lines the way a POSIX shell does.

Quoting, ``;``/``&&``/``||``, pipes, ``$?`` and command substitution (``$(...)`` and backticks)
behave as on a phone, and every simple command that runs is appended to ``phone.command_log``.
That is what makes the simulated phone a real test of the driver's escaping: text that reaches
this shell unescaped gets *executed*, and the log shows it.

The programs it runs are the ones adb clients send (``devices.sim.programs``: ``input``,
``screencap``, ``wm``, ``am``, ``pm``, ``dumpsys`` and the rest, with the output formats the
clients parse; ``devices.sim.coreutils``: the file tools).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from devices.sim.phone import SimPhone
from devices.sim.process import KeepRunning, Result, Usage
from devices.sim.programs import COMMANDS, properties

__all__ = [
    "KeepRunning",
    "Result",
    "ShellSyntaxError",
    "properties",
    "run",
    "run_line",
    "split_commands",
    "tokenize",
]


class ShellSyntaxError(ValueError):
    pass


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
    """Words (quotes removed, substitutions run) and operator strings.

    Longer than most functions here on purpose: one pass over the line, as a shell's lexer is
    written, whose small helpers (``flush``, ``dollar``) share its state and so stay inside it.
    """
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
    except Usage as exc:
        return Result(stderr=f"{name}: {exc}\n".encode(), code=1)


def run(phone: SimPhone, line: str) -> Result:
    """Run one ``shell:`` command line on the phone."""
    return run_line(_Context(phone), line)
