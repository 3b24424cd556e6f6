"""The fenced blocks of README.md and docs/*.md that tests/docs/test_documented_commands.py
runs, and the one bash script it runs them as. Pure: text in, blocks and script text out.

Every shell block (```sh, ```bash, ```shell, ```console) carries a marker on the line
before its fence, so none escapes the test by being forgotten:

    <!-- doc-test: run [as=admin|producer|worker|none] [until="TEXT"] -->
    <!-- doc-test: skip REASON -->

A Python block may carry ``run [elsewhere]`` (run with the venv's Python, from the document's
folder or, ``elsewhere``, from an empty one) or ``file PATH`` (written to PATH for the blocks
after it, e.g. a handler module). ``as=`` points ORBIT_CREDENTIALS_FILE at the lane's file of
that role (``none``: unset). ``until="TEXT"``: the block's last command runs until it keeps
running (a worker): started in the background, stopped by SIGTERM once TEXT is in its
output, and it must then exit 0.

A command is expected to exit 0, except: a script line whose comment above it says
``exit code N``; a transcript command (``$ ...``) whose output starts with ``orbit:`` (an
error line: any non-zero exit) or that a ``$ echo $?`` line follows (that code). A command
that ends with ``&`` runs in the background; its PID is written to the PIDs file.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

SHELL_LANGS = frozenset({"sh", "bash", "shell", "console"})
ANY_ERROR = -1  # expected: some non-zero exit code

_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"^<!--\s*doc-test:\s*(?P<body>.*?)\s*-->\s*$")
_EXIT_CODE = re.compile(r"exit code (\d+)")
_OPENERS = {"if": "fi", "for": "done", "while": "done", "until": "done", "case": "esac"}


@dataclass(frozen=True)
class Marker:
    action: str  # run, skip or file
    options: dict[str, str] = field(default_factory=dict)
    words: tuple[str, ...] = ()  # the reason of a skip, the flags of a run, the path of a file


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marker: Marker | None

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def shell(self) -> bool:
        return self.lang in SHELL_LANGS


@dataclass(frozen=True)
class Command:
    text: str
    line: int
    expect: int = 0  # ANY_ERROR: any non-zero code
    background: bool = False


class MarkerError(ValueError):
    """A marker that does not parse (the test names the document and line)."""


def parse_marker(body: str) -> Marker:
    action, _, tail = body.strip().partition(" ")
    if action not in ("run", "skip", "file"):
        raise MarkerError(f"doc-test marker must start with run, skip or file: {body!r}")
    if action == "skip":  # the reason is prose, apostrophes and all
        if not tail.strip():
            raise MarkerError("doc-test: skip needs a reason")
        return Marker(action, {}, (tail.strip(),))
    rest = shlex.split(tail)
    if action == "file" and len(rest) != 1:
        raise MarkerError("doc-test: file needs one PATH")
    options = dict(w.split("=", 1) for w in rest if "=" in w and action == "run")
    flags = tuple(w for w in rest if not (action == "run" and "=" in w))
    return Marker(action, options, flags)


def blocks(doc: str, text: str) -> list[Block]:
    """Every fenced block of a Markdown text, with the marker on the line before it."""
    found: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        start = index
        index += 1
        body: list[str] = []
        while index < len(lines) and not lines[index].startswith("```"):
            body.append(lines[index])
            index += 1
        index += 1  # the closing fence
        marker = None
        before = lines[start - 1] if start > 0 else ""
        match = _MARKER.match(before)
        if match is not None:
            try:
                marker = parse_marker(match.group("body"))
            except MarkerError as exc:
                raise MarkerError(f"{doc}:{start}: {exc}") from None
        found.append(Block(doc, start + 1, opening.group(1), "\n".join(body) + "\n", marker))
    return found


def commands(block: Block) -> list[Command]:
    """The commands of a shell block, each with the exit code it is expected to end with."""
    lines = block.text.splitlines()
    if any(line.startswith("$ ") for line in lines):
        return _transcript(block, lines)
    return _script(block, lines)


def _transcript(block: Block, lines: list[str]) -> list[Command]:
    out: list[Command] = []
    index = 0
    while index < len(lines):
        if not lines[index].startswith("$ "):
            index += 1
            continue
        line_no = block.line + 1 + index
        text = lines[index][2:]
        while text.endswith("\\") and index + 1 < len(lines):
            index += 1
            text += "\n" + lines[index]
        index += 1
        output = []
        while index < len(lines) and not lines[index].startswith("$ "):
            output.append(lines[index])
            index += 1
        if text.strip() == "echo $?" and out:
            out[-1] = Command(out[-1].text, out[-1].line, int(output[0]), out[-1].background)
            continue
        expect = ANY_ERROR if output and output[0].startswith("orbit: ") else 0
        out.append(Command(text, line_no, expect, _in_background(text)))
    return out


def _script(block: Block, lines: list[str]) -> list[Command]:
    out: list[Command] = []
    comment: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        stripped = line.strip()
        if not stripped:
            comment = []
            index += 1
            continue
        if stripped.startswith("#"):
            comment.append(stripped)
            index += 1
            continue
        line_no = block.line + 1 + index
        text, index = _logical(lines, index)
        codes = _EXIT_CODE.findall(" ".join(comment))
        out.append(Command(text, line_no, int(codes[0]) if codes else 0, _in_background(text)))
        comment = []
    return out


def _logical(lines: list[str], index: int) -> tuple[str, int]:
    """One command from ``lines[index]``: continuation lines (``\\``) and a compound
    statement (if/for/while/case to its closing word) taken whole; the next index."""
    taken = [lines[index]]
    closing = _OPENERS.get(lines[index].split()[0] if lines[index].split() else "")
    index += 1
    while index < len(lines) and (
            taken[-1].rstrip().endswith("\\") or _open(taken, closing)):
        taken.append(lines[index])
        index += 1
    return "\n".join(taken), index


def _open(taken: list[str], closing: str | None) -> bool:
    if closing is None:
        return False
    return not taken[-1].strip().startswith(closing)


def _in_background(text: str) -> bool:
    return _without_comment(text).rstrip().endswith("&") and not text.rstrip().endswith("&&")


def _without_comment(text: str) -> str:
    last = text.splitlines()[-1]
    return re.sub(r"\s+#[^'\"]*$", "", last)


def script(doc_blocks: list[Block], *, port: int, pids_file: str, elsewhere: str,
           python: str) -> str:
    """The bash script that runs a document's ``run`` and ``file`` blocks in order: each
    command checked against the exit code it is expected to end with (the script stops at
    the first that is not, exit 97, naming it on stderr); ``8080`` becomes ``port``."""
    out = ["set -u", 'DOC_HOME="$PWD"', f"PIDS={shlex.quote(pids_file)}", ': > "$PIDS"']
    for block in doc_blocks:
        marker = block.marker
        if marker is None or marker.action == "skip":
            continue
        if marker.action == "file":
            path = marker.words[0]
            out += [f"mkdir -p \"$(dirname {shlex.quote(path)})\"",
                    f"cat > {shlex.quote(path)} <<'ORBIT_DOC_FILE'", block.text.rstrip("\n"),
                    "ORBIT_DOC_FILE"]
            continue
        role = marker.options.get("as")
        if role == "none":
            out.append("unset ORBIT_CREDENTIALS_FILE")
        elif role is not None:
            out.append(f'export ORBIT_CREDENTIALS_FILE="$DOC_HOME/{role}.json"')
        if not block.shell:
            where = shlex.quote(elsewhere) if "elsewhere" in marker.words else '"$DOC_HOME"'
            out += [_announce(block.where, "python"),
                    f"(cd {where} && {shlex.quote(python)} - <<'ORBIT_DOC_PY'",
                    block.text.rstrip("\n"), "ORBIT_DOC_PY", ")",
                    _check(block.where, 0)]
            continue
        cmds = commands(block)
        until = marker.options.get("until")
        for index, command in enumerate(cmds):
            text = command.text.replace("8080", str(port))
            where = f"{block.doc}:{command.line}"
            out.append(_announce(where, text.splitlines()[0]))
            if until is not None and index == len(cmds) - 1:
                out += _until(where, text, until)
            elif command.background:
                # Its output to a file: an inherited pipe would hold the script's open.
                line = _without_comment(text).rstrip()[:-1].rstrip()
                head = text.splitlines()[:-1]
                log = f'"$DOC_HOME/background-{block.line}-{index}.log"'
                out += [*head, f"{line} > {log} 2>&1 &", 'echo "$!" >> "$PIDS"']
            else:
                out += [text, _check(where, command.expect)]
    return "\n".join(out) + "\n"


def _announce(where: str, first_line: str) -> str:
    return f"echo {shlex.quote(f'@@ {where}: {first_line}')} >&2"


def _check(where: str, expect: int) -> str:
    wrong = '[ "$s" -eq 0 ]' if expect == ANY_ERROR else f'[ "$s" -ne {expect} ]'
    said = "a non-zero code" if expect == ANY_ERROR else str(expect)
    return (f's=$?; if {wrong}; then echo "@@ FAILED {where}: exit $s, expected {said}" >&2; '
            "exit 97; fi")


def _until(where: str, text: str, until: str) -> list[str]:
    """Run ``text`` in the background until ``until`` is in its output (20 s at most), then
    SIGTERM it by PID: it must exit 0."""
    log = '"$DOC_HOME/doc-test-until.log"'
    return [
        f"{text} > {log} 2>&1 &",
        "pid=$!",
        'echo "$pid" >> "$PIDS"',
        "for _ in $(seq 1 200); do",
        f"  grep -qF -- {shlex.quote(until)} {log} && break",
        '  kill -0 "$pid" 2>/dev/null || break',
        "  sleep 0.1",
        "done",
        f"if ! grep -qF -- {shlex.quote(until)} {log}; then",
        f"  echo \"@@ FAILED {where}: no {until!r} in its output:\" >&2; cat {log} >&2; "
        "exit 97",
        "fi",
        'kill -TERM "$pid"; wait "$pid"',
        _check(where, 0),
    ]
