# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Quoting for systemd unit files: what systemd itself parses back must be the argv we meant.

``split_exec`` below reads an ExecStart= value the way systemd does (systemd.service(5) "Command
lines", systemd.syntax(7) "Quoting", systemd.unit(5) "Specifiers"), strictly: anything systemd
would expand or warn about (a specifier other than ``%%``, a variable, an unknown escape, a lone
``;``, a quote in the middle of a word) is an error here, so a filter output that only happens to
survive cannot pass.
"""

import re
import shutil
import subprocess

import pytest

from ansible_collections.llmops.vllm.plugins.filter.systemd import systemd_environment, systemd_exec, systemd_quote

SPECULATIVE = '{"method":"mtp","num_speculative_tokens":3}'
ARGV = ["/opt/v/bin/vllm", "serve", "/m/o/c", "--speculative-config", SPECULATIVE,
        "--chat-template", "a b", "--x", "100%", "--y", "$HOME", "--z", 'quote"back\\slash']

# Every argv the round trip must survive: spaces, both quotes, backslashes, $, %, JSON, empty words.
ROUND_TRIP = [
    ARGV,
    ["/bin/echo", ""],
    ["/bin/echo", "", "x", ""],
    ["/bin/echo", "two  spaces", " leading", "trailing "],
    ["/bin/echo", "it's", "'single'", '"double"', "mixed \"' both"],
    ["/bin/echo", "\\", "\\\\", "back\\slash", "end\\", "\\n is not a newline", '\\"'],
    ["/bin/echo", "$", "$$", "${HOME}", "$HOME/x", "a$b", "cost: $5"],
    ["/bin/echo", "%", "%%", "%n", "%i", "50%", "%{x}"],
    ["/bin/echo", ";", "\\;", "a;b"],
    ["/bin/echo", "--speculative-config", SPECULATIVE],
    ["/bin/echo", "--override-generation-config", '{"temperature": 0.6, "stop": ["</s>", "\\n\\n"]}'],
    ["/bin/echo", "--chat-template", "{% for m in messages %}{{ m['content'] }}{% endfor %}"],
    ["/opt/dir with space/bin/vllm", "serve", "/models/org/name/" + "a" * 40],
    ["/bin/echo", "unicode: \u00e9\u4e2d\U0001f600"],
]

_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
                   "\\": "\\", '"': '"', "'": "'", "s": " "}
_WHITESPACE = " \t\n"


class SystemdSyntaxError(ValueError):
    """The line holds something systemd would expand, warn about or split differently."""


def _expand_specifiers(line):
    """systemd.unit(5) specifiers, resolved on the raw line before it is split: '%%' is a literal
    '%'; any other specifier would be replaced by a unit property, so it is an error here."""
    out = []
    position = 0
    while position < len(line):
        char = line[position]
        if char == "%":
            if line[position + 1:position + 2] != "%":
                raise SystemdSyntaxError("specifier %r at %d would be expanded" % (line[position:position + 2], position))
            position += 2
            out.append("%")
            continue
        out.append(char)
        position += 1
    return "".join(out)


def _escape(line, position):
    """(character, next position) for the C-style escape whose backslash is at position."""
    code = line[position + 1:position + 2]
    if code in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[code], position + 2
    for prefix, digits, base in (("x", 2, 16), ("u", 4, 16), ("U", 8, 16)):
        if code == prefix:
            text = line[position + 2:position + 2 + digits]
            if len(text) != digits or not re.match(r"^[0-9a-fA-F]+$", text):
                raise SystemdSyntaxError("bad \\%s escape at %d" % (prefix, position))
            return chr(int(text, base)), position + 2 + digits
    text = line[position + 1:position + 4]
    if re.match(r"^[0-7]{3}$", text):
        return chr(int(text, 8)), position + 4
    raise SystemdSyntaxError("unknown escape %r at %d (systemd warns and keeps it)" % (line[position:position + 2], position))


def _split_words(line, command_line=False):
    """Words as systemd.syntax(7) "Quoting" reads them: whitespace separates; a quote opens only at
    the start of a word and must close before whitespace or the end; escapes work everywhere.
    In a command line, a word that is just '\\;' is a literal ';' (systemd.service(5)).
    Returns (word, the word as written) pairs."""
    if "\n" in line or "\r" in line:
        raise SystemdSyntaxError("a raw line break ends the setting in a unit file")
    words = []
    position = 0
    while True:
        while position < len(line) and line[position] in _WHITESPACE:
            position += 1
        if position >= len(line):
            return words
        start = position
        if command_line and line[position:position + 2] == "\\;" and line[position + 2:position + 3] in ("",) + tuple(_WHITESPACE):
            position += 2
            words.append((";", "\\;"))
            continue
        quote = line[position] if line[position] in "\"'" else None
        if quote:
            position += 1
        word = []
        while True:
            if position >= len(line):
                if quote:
                    raise SystemdSyntaxError("unterminated %s quote" % quote)
                break
            char = line[position]
            if char == "\\":
                if position + 1 >= len(line):
                    raise SystemdSyntaxError("trailing backslash (systemd would join the next line)")
                char, position = _escape(line, position)
                word.append(char)
                continue
            if quote and char == quote:
                position += 1
                if position < len(line) and line[position] not in _WHITESPACE:
                    raise SystemdSyntaxError("closing quote at %d is not followed by whitespace" % (position - 1))
                break
            if not quote and char in _WHITESPACE:
                break
            if not quote and char in "\"'":
                raise SystemdSyntaxError("quote in the middle of a word at %d" % position)
            word.append(char)
            position += 1
        words.append(("".join(word), line[start:position]))


def _substitute_variables(word):
    """systemd.service(5) variable substitution, done on each word after unquoting: '$$' is a literal
    '$'; '$NAME' and '${NAME}' would be replaced, so they are an error here."""
    out = []
    position = 0
    while position < len(word):
        char = word[position]
        if char == "$":
            following = word[position + 1:position + 2]
            if following == "$":
                out.append("$")
                position += 2
                continue
            if following == "{" or re.match(r"[A-Za-z_]", following):
                raise SystemdSyntaxError("variable %r would be substituted" % word[position:])
        out.append(char)
        position += 1
    return "".join(out)


def split_exec(value):
    """The argv systemd runs for an ExecStart= value (one command line, no prefixes)."""
    line = _expand_specifiers(value)
    argv = []
    for word, written in _split_words(line, command_line=True):
        if written == ";":
            raise SystemdSyntaxError("a lone ';' separates command lines")
        argv.append(_substitute_variables(word))
    return argv


def split_assignments(value):
    """Environment= assignments: quoting, escapes and specifiers as above, but systemd.exec(5) says no
    variable expansion happens there ('$' has no special meaning)."""
    return [word for word, _written in _split_words(_expand_specifiers(value))]


# ----------------------------------------------------------------------------- the splitter itself

@pytest.mark.parametrize("value,argv", [
    ('/bin/echo a "b c" \'d e\'', ["/bin/echo", "a", "b c", "d e"]),
    ('/bin/echo "" \'\'', ["/bin/echo", "", ""]),
    ('/bin/echo "%%n" $$HOME \\s', ["/bin/echo", "%n", "$HOME", " "]),
    ('/bin/echo "\\x41\\101\\u00e9" \\\\', ["/bin/echo", "AA\u00e9", "\\"]),
    ('/bin/echo \\;', ["/bin/echo", ";"]),
])
def test_splitter_follows_systemd_syntax(value, argv):
    assert split_exec(value) == argv


@pytest.mark.parametrize("value", ['/bin/echo %n', '/bin/echo $HOME', '/bin/echo ${HOME}', '/bin/echo "a"b',
                                   '/bin/echo a"b"', '/bin/echo "open', '/bin/echo \\q', '/bin/echo x\\',
                                   '/bin/echo a ; /bin/true'])
def test_splitter_refuses_what_systemd_would_change(value):
    with pytest.raises(SystemdSyntaxError):
        split_exec(value)


# ----------------------------------------------------------------------------- the filters

def test_plain_words_stay_plain():
    assert systemd_quote("--tensor-parallel-size") == "--tensor-parallel-size"
    assert systemd_exec(["/bin/true", "0,1,2,3"]) == "/bin/true 0,1,2,3"


def test_specials_are_escaped():
    line = systemd_exec(ARGV)
    assert '"100%%"' in line and '"$$HOME"' in line and '\\"method\\"' in line


def test_relative_executable_is_refused():
    with pytest.raises(ValueError, match="absolute path"):
        systemd_exec(["vllm", "serve"])


@pytest.mark.parametrize("argv", ROUND_TRIP, ids=range(len(ROUND_TRIP)))
def test_exec_round_trip(argv):
    """The rendered ExecStart= value, split back as systemd splits it, is the argv we started from."""
    assert split_exec(systemd_exec(argv)) == argv


@pytest.mark.parametrize("word", [w for argv in ROUND_TRIP for w in argv[1:]])
def test_each_word_is_one_word(word):
    assert split_exec("/bin/echo " + systemd_quote(word)) == ["/bin/echo", word]


def test_environment_assignments():
    assert systemd_environment({"B": "2", "A": "x y"}) == ['"A=x y"', '"B=2"']


def test_environment_round_trip_without_dollar():
    env = {"A": "x y", "JSON": SPECULATIVE, "PCT": "100%", "Q": "it's \"q\"", "BS": "a\\b", "EMPTY": ""}
    words = [word for value in systemd_environment(env) for word in split_assignments(value)]
    assert words == ["%s=%s" % item for item in sorted(env.items())]


def test_environment_keeps_a_dollar():
    assert split_assignments(systemd_environment({"P": "$HOME"})[0]) == ["P=$HOME"]


@pytest.mark.parametrize("word", ["new\nline", "tab\there", "cr\r", "nul\x00", "del\x7f", "nel\x85", "ls\u2028"])
def test_a_control_character_is_refused(word):
    """A line break would end the directive (the next line a directive of its own); no control character is written."""
    with pytest.raises(ValueError, match="control character"):
        systemd_exec(["/bin/echo", word])
    with pytest.raises(ValueError, match="control character"):
        systemd_environment({"A": word})


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed on this machine")
def test_systemd_accepts_it(tmp_path):
    """systemd's own parser reads every rendered line without a warning (unknown escapes, bad quoting,
    unresolvable specifiers are all reported by `systemd-analyze verify`)."""
    unit = tmp_path / "probe.service"
    lines = ["ExecStart=%s" % systemd_exec(["/bin/echo"] + argv[1:]) for argv in ROUND_TRIP]
    unit.write_text("[Service]\nType=oneshot\n%s\n" % "\n".join(lines))
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True,
                          check=False)
    assert "Failed to" not in proc.stderr and "Invalid" not in proc.stderr and "Ignoring" not in proc.stderr, proc.stderr
    assert "probe.service" not in proc.stderr, proc.stderr
