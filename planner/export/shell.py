"""The words of a launch script's command, read without running anything.

Megatron-LM's example scripts (``examples/gpt3/train_gpt3_175b_distributed.sh``,
core_v0.15.3) state their arguments through variables and bash arrays::

    NUM_NODES=1
    GPT_MODEL_ARGS=(
        --num-layers 96   # a comment
    )
    torchrun --nnodes $NUM_NODES pretrain_gpt.py ${GPT_MODEL_ARGS[@]}

:func:`command_words` interprets only assignments (``NAME=VALUE``, ``export NAME=VALUE``,
``NAME=( ... )``, ``NAME+=( ... )``) and expansions of what they define (``$NAME``,
``${NAME}``, ``${NAME[@]}``, ``${NAME:-default}``); other commands are skipped, nothing is
executed. A variable the script does not define (a positional ``$1``, the environment, an
arithmetic ``$((...))`` or a command substitution) expands to :func:`unresolved`, a marker
that names it: the caller refuses it where it reads the value and may ignore it where the
value does not matter (a data path). The work is linear in the text plus the expansion,
which is capped.
"""

from __future__ import annotations

import re

#: the text a variable that cannot be resolved expands to: NUL never occurs in a read file
#: after the control-character checks, and cannot be typed into an argument
_MARK = "\x00"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_LITERAL = re.compile(r"[^ \t\r\n'\"\\#$`()]+")  # stops at parentheses to check them
# a line ends a statement; ";", "&" and "|" stay literal as in shlex (layouts hold "|")
_DQ_LITERAL = re.compile(r'[^"\\$`]+')


class ShellError(ValueError):
    """The script cannot be read: the message says where."""


def unresolved(name: str) -> str:
    return f"{_MARK}{name}{_MARK}"


def unresolved_names(word: str) -> list[str]:
    """The variables a word holds unresolved (see :func:`unresolved`)."""
    return word.split(_MARK)[1::2] if _MARK in word else []


# A word is a list of parts: ("lit", text) or ("var", name, index, default, quoted)
Part = tuple


class _Lexer:
    """Words and statement ends (``"\\n"``, ``"("``, ``")"``) of a POSIX-quoted text."""

    def __init__(self, text: str) -> None:
        self.text, self.i, self.n = text, 0, len(text)
        self.in_array = False  # parentheses are syntax only in NAME=( ... ); else literal
        self.starts: list[int] = []  # each token's offset in the text (errors name lines)
        self._at = 0  # where the token being read starts

    def tokens(self) -> list[list[Part] | str]:
        out: list[list[Part] | str] = []
        t, n = self.text, self.n
        while self.i < n:
            while len(self.starts) < len(out):  # the tokens appended by the last step
                self.starts.append(self._at)
            self._at = self.i
            c = t[self.i]
            if c in " \t\r":
                self.i += 1
            elif c == "\\" and t.startswith("\\\n", self.i):
                self.i += 2
            elif c == "\n":
                self.i += 1
                out.append("\n")
            elif c == ")" and self.in_array:
                self.i += 1
                self.in_array = False
                out.append(c)
            elif c == "#":
                j = t.find("\n", self.i)
                self.i = n if j < 0 else j
            else:
                word = self._word()
                out.append(word)
                if self.i < n and t[self.i] == "(" and _array_name(word):
                    self.i += 1
                    self.in_array = True
                    out.append("(")
        while len(self.starts) < len(out):
            self.starts.append(self._at)
        return out

    def _word(self) -> list[Part]:
        t, n = self.text, self.n
        parts: list[Part] = []
        while self.i < n:
            c = t[self.i]
            if c in " \t\r\n" or (c == ")" and self.in_array):
                break
            if c == "(" and not self.in_array and _array_name(parts):
                break
            if c == "'":
                j = t.find("'", self.i + 1)
                if j < 0:
                    raise ShellError("No closing quotation")
                parts.append(("lit", t[self.i + 1:j]))
                self.i = j + 1
            elif c == '"':
                self.i += 1
                self._double(parts)
            elif c == "\\":
                if self.i + 1 >= n:
                    raise ShellError("No escaped character")
                if t[self.i + 1] != "\n":
                    parts.append(("lit", t[self.i + 1]))
                self.i += 2
            elif c in "$`":
                parts.append(self._dollar(quoted=False))
            else:  # '#' inside a word is literal in bash
                m = _LITERAL.match(t, self.i)
                end = m.end() if m else self.i + 1
                parts.append(("lit", t[self.i:end]))
                self.i = end
        return parts

    def _double(self, parts: list[Part]) -> None:
        t, n = self.text, self.n
        parts.append(("lit", ""))  # "" is a word
        while True:
            if self.i >= n:
                raise ShellError("No closing quotation")
            c = t[self.i]
            if c == '"':
                self.i += 1
                return
            if c == "\\":
                if self.i + 1 >= n:
                    raise ShellError("No escaped character")
                nxt = t[self.i + 1]
                if nxt != "\n":
                    parts.append(("lit", nxt if nxt in '"\\$`' else "\\" + nxt))
                self.i += 2
            elif c in "$`":
                parts.append(self._dollar(quoted=True))
            else:
                m = _DQ_LITERAL.match(t, self.i)
                assert m is not None
                parts.append(("lit", m.group()))
                self.i = m.end()

    def _dollar(self, quoted: bool) -> Part:
        """``$NAME``, ``${NAME}``, ``${NAME[@]}``, ``${NAME:-word}``, ``$1``, ``$@``;
        ``$(...)``, ``$((...))`` and backquotes become unresolved."""
        t, i = self.text, self.i
        if t[i] == "`":
            j = t.find("`", i + 1)
            if j < 0:
                raise ShellError("No closing backquote")
            self.i = j + 1
            return ("var", None, t[i:j + 1], None, quoted)
        if t.startswith("$(", i):
            j, depth = i + 2, 1
            while j < self.n and depth:
                depth += {"(": 1, ")": -1}.get(t[j], 0)
                j += 1
            if depth:
                raise ShellError(f"no closing ')' for {_clip(t[i:i + 20])}")
            self.i = j
            return ("var", None, t[i:j], None, quoted)
        if t.startswith("${", i):
            j = t.find("}", i + 2)
            if j < 0:
                raise ShellError(f"no closing '}}' for {_clip(t[i:i + 20])}")
            body = t[i + 2:j]
            self.i = j + 1
            m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#])(\[[@*0-9]+\])?"
                             r"(?::-(.*))?", body, re.S)
            if m is None:
                return ("var", None, t[i:j + 1], None, quoted)
            index = m.group(2)[1:-1] if m.group(2) else None
            return ("var", m.group(1), index, m.group(3), quoted)
        m = _NAME.match(t, i + 1)
        if m:
            self.i = m.end()
            return ("var", m.group(), None, None, quoted)
        if i + 1 < self.n and (t[i + 1].isdigit() or t[i + 1] in "@*#?$!-"):
            self.i = i + 2
            return ("var", t[i + 1], None, None, quoted)
        self.i = i + 1
        return ("lit", "$")


def _clip(text: str) -> str:
    return repr(text if len(text) < 20 else text[:20] + "...")


class _Expander:
    def __init__(self, limit_chars: int) -> None:
        self.vars: dict[str, list[str]] = {}
        self.arrays: set[str] = set()
        self.budget = limit_chars

    def _spend(self, words: list[str]) -> list[str]:
        self.budget -= sum(len(w) + 1 for w in words)
        if self.budget < 0:
            raise ShellError("the variables expand to more text than the planner reads "
                             "(nested arrays?)")
        return words

    def value(self, part: Part) -> tuple[list[str], bool]:
        """(the words a variable gives, whether they stay separate words)."""
        _, name, index, default, _quoted = part
        if name is None:  # $(...), $((...)), `...`
            return [unresolved(index)], False
        if name in ("@", "*"):
            return [], True  # the script's own arguments: the caller's to add
        got = self.vars.get(name)
        if got is None or (default is not None and got in ([], [""])):
            if default is not None:
                return [default], False
            return [unresolved("$" + name if index is None else f"${{{name}[{index}]}}")], False
        if index in ("@", "*"):
            return got, True
        if index is not None:
            k = int(index)
            return ([got[k]] if k < len(got) else []), False
        return got[:1], False

    def word(self, parts: list[Part]) -> list[str]:
        """Bash's expansion of one word: arrays give a word per element; unquoted values
        split on whitespace; quoted ones do not."""
        out: list[str] = []
        cur: list[str] | None = None  # the word being built, joined once (linear time)
        only_args = True  # "$@" alone with no arguments is no word at all
        for part in parts:
            if part[0] == "lit":
                if cur is None:
                    cur = []
                cur.append(part[1])
                only_args = only_args and part[1] == ""
                continue
            values, separate = self.value(part)
            only_args = only_args and part[1] in ("@", "*")
            pieces: list[str] = []
            for v in values:
                pieces += [v] if part[4] else v.split()
            if not separate and part[4]:
                pieces = [" ".join(values)]
            if not pieces:
                continue
            first = "".join(cur or []) + pieces[0]
            if len(pieces) == 1:
                cur = [first]
                continue
            out += [first] + pieces[1:-1]
            cur = [pieces[-1]]
        if cur is not None and not (only_args and "".join(cur) == ""):
            out.append("".join(cur))
        return self._spend(out)

    def assign(self, name: str, append: bool, values: list[str], array: bool) -> None:
        old = self.vars.get(name, []) if append else []
        self.vars[name] = old + values if array else [(old[0] if old else "") + "".join(values)]


def command_words(text: str, program_suffix: str = ".py") -> tuple[list[str], list[str]]:
    """(the words before the program, the words after it) of the script's command that
    runs a ``*.py`` program, with the script's variables expanded; the words of later
    commands count as more arguments. Without such a command, every word of every command
    is an argument (an argument string)."""
    lexer = _Lexer(text)
    toks = lexer.tokens()
    ex = _Expander(limit_chars=16 * len(text) + 65_536)
    commands: list[list[str]] = []
    i, n = 0, len(toks)
    line, counted = 1, 0  # the statement's line, counted up to offset ``counted``
    while i < n:
        stmt: list[list[Part]] = []
        line += text.count("\n", counted, lexer.starts[i])  # linear in the text overall
        counted = lexer.starts[i]
        while i < n and toks[i] != "\n":
            tok = toks[i]
            if isinstance(tok, str):  # "(" or ")": an array assignment or a subshell
                if tok == "(" and stmt and not commands_started(stmt) and _array_name(stmt[-1]):
                    name, append = _array_name(stmt[-1])  # type: ignore[misc]
                    i, values = _array_body(toks, i + 1, ex)
                    ex.assign(name, append, values, array=True)
                    stmt.pop()
                    continue
                raise ShellError(f"'{tok}' outside an array assignment: the planner reads "
                                 "assignments and one command, not shell syntax")
            stmt.append(tok)
            i += 1
        i += 1
        _refuse_control_flow(stmt, line)
        words = _statement(stmt, ex)
        if words:
            commands.append(words)
    for c, words in enumerate(commands):
        for k, w in enumerate(words):
            if w.endswith(program_suffix):
                # words on later lines are read as more arguments (an argument string
                # appended to a script), as shlex reads a whole text
                return words[:k], words[k + 1:] + [x for rest in commands[c + 1:] for x in rest]
    return [], [w for words in commands for w in words]


#: bash's reserved words that open, continue or close a compound command (bash manual,
#: "Reserved Words"), and the braces of a group or a function body: the planner does not
#: evaluate conditions or loops, so it cannot know which assignments a script makes
_CONTROL = frozenset(("if", "then", "else", "elif", "fi", "case", "esac", "for", "select",
                      "while", "until", "do", "done", "function", "{", "}", "[[", "]]"))
#: words after which the next word is in command position again
_SEPARATORS = ("&&", "||", "|", "!", ";", "&")


def _literal(parts: list[Part]) -> str | None:
    return "".join(p[1] for p in parts) if all(p[0] == "lit" for p in parts) else None


def _refuse_control_flow(stmt: list[list[Part]], line: int) -> None:
    """A :class:`ShellError` naming ``line`` for a reserved word in command position
    (``if ...; then TP=4; else TP=8; fi`` would be read as both assignments, the last
    winning) or an assignment after ``&&`` / ``||`` (made or not by the condition)."""
    command_pos, chained = True, False
    for parts in stmt:
        word = _literal(parts)
        if word is not None and command_pos:
            bare = word.rstrip(";")
            if bare in _CONTROL or (bare.endswith("()") and _NAME.fullmatch(bare[:-2])):
                raise ShellError(
                    f"line {line}: '{bare}': shell control flow; the planner reads "
                    "assignments and one command and does not evaluate conditions or "
                    "loops, so it cannot tell which values the script sets; write the "
                    "values the run uses without it")
            if chained and _ASSIGN.match(word):
                raise ShellError(
                    f"line {line}: {_clip(word)} after '&&' or '||': whether it is made "
                    "depends on the command before it, which the planner does not run; "
                    "write the assignment on its own line")
        if word in ("&&", "||"):
            chained = True
        command_pos = (word is not None and (word in _SEPARATORS or word.endswith(";")
                                             or word.rstrip(";") in _CONTROL))


def commands_started(stmt: list[list[Part]]) -> bool:
    """Whether a word before the last is not an assignment (``export`` aside)."""
    return any(not (_assignment(w) or w == [("lit", "export")]) for w in stmt[:-1])


def _array_name(parts: list[Part]) -> tuple[str, bool] | None:
    if len(parts) == 1 and parts[0][0] == "lit":
        m = _ASSIGN.fullmatch(parts[0][1])
        if m:
            return m.group(1), bool(m.group(2))
    return None


def _assignment(parts: list[Part]) -> tuple[str, bool, list[Part]] | None:
    if parts and parts[0][0] == "lit":
        m = _ASSIGN.match(parts[0][1])
        if m:
            rest = parts[0][1][m.end():]
            return m.group(1), bool(m.group(2)), [("lit", rest)] + parts[1:]
    return None


def _array_body(toks: list, i: int, ex: _Expander) -> tuple[int, list[str]]:
    values: list[str] = []
    while i < len(toks) and toks[i] != ")":
        tok = toks[i]
        if tok == "(":
            raise ShellError("'(' inside an array assignment")
        if tok != "\n":
            values += ex.word(tok)
        i += 1
    if i >= len(toks):
        raise ShellError("an array assignment '( ...' has no closing ')'")
    return i + 1, values


def _statement(stmt: list[list[Part]], ex: _Expander) -> list[str]:
    """Assignments at the head of a statement are made; the rest are the command's words
    (``export NAME=VALUE`` is an assignment)."""
    k = 0
    export = bool(stmt) and stmt[0] == [("lit", "export")]
    if export:
        k = 1
    while k < len(stmt):
        a = _assignment(stmt[k])
        if a is None:
            break
        name, append, value = a
        ex.assign(name, append, [" ".join(ex.word(value))] if value != [("lit", "")]
                  else [""], array=False)
        k += 1
    if export:  # export NAME (no value) changes nothing the planner reads
        return []
    words: list[str] = []
    for parts in stmt[k:]:
        words += ex.word(parts)
    return words
