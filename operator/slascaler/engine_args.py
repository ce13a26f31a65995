"""Engine flags in a container's command line: read one, or set one keeping everything else.

An engine's max batch and chunk size are command-line flags (`--max-num-seqs 64` or
`--max-num-seqs=64`, and for vLLM also the underscore spelling `--max_num_seqs`). The
process's argv is the container's `command` followed by its `args`; a flag may sit in
either. Reading takes the last occurrence (as argparse does); writing replaces the value of
every occurrence in place, or appends `--flag value` to `args` when the flag is absent. Every
other element is kept as it was.

What cannot be read or edited safely is refused with an `EngineArgsError` whose `reason`
(CamelCase, for a condition) and message name the value and the fix:

- `ShellScript`: the process is a shell running a script (`sh -c "vllm serve …"`, `bash -lc`):
  a flag inside the script cannot be edited, and one appended after it is ignored by the
  shell (it becomes `$0`), so neither reading nor writing is attempted;
- `InvalidValue` / `MissingValue` / `OutOfRange`: `--max-num-seqs=abc`, a flag with no value
  (last, or followed by another flag), a value that is not positive or beyond int32 (the
  status fields are int32: such a value could never be reported).

Pure (no I/O). Called by `engine_container` (the operator's fleet reader and actuation), the
simulator's cluster and the e2e engines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

INT32_MAX = 2**31 - 1
# Shells whose `-c` runs a script; busybox/toybox as `sh` are covered by their link name.
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash", "ksh", "mksh", "busybox"})
# `-c`, and the combined short options people write with it: -ec, -lc, -euxc, -c.
_SCRIPT_OPTION = re.compile(r"^-[a-zA-Z]*c[a-zA-Z]*$")
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


class EngineArgsError(ValueError):
    """The container's command line cannot be read or edited for this flag.

    `reason` is a CamelCase word for a condition; the message names the value and the fix.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class CommandLine:
    """A container's `command` and `args` (either may be empty)."""

    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()

    @property
    def argv(self) -> tuple[str, ...]:
        return (*self.command, *self.args)


def shell_script(line: CommandLine) -> str | None:
    """The script when the process is a shell running one (`sh -c "…"`), else None.

    The process is argv[0] after any `env` wrapper (`env A=1 sh -c …`); when `command` is
    empty the image's entrypoint is unknown, so `args` starting with `-c` count as a script
    too (an entrypoint of `["/bin/sh"]` is common in engine images built in-house).
    """
    argv = list(line.argv)
    if argv and argv[0].rsplit("/", 1)[-1] == "env":
        argv.pop(0)
        while argv and (_ENV_ASSIGNMENT.match(argv[0]) or argv[0].startswith("-")):
            argv.pop(0)
    if not argv:
        return None
    if argv[0].rsplit("/", 1)[-1] in SHELLS:
        options = argv[1:]
        if options and options[0] == "sh":  # `busybox sh -c …`
            options = options[1:]
    elif not line.command and _SCRIPT_OPTION.match(argv[0]):
        options = argv
    else:
        return None
    for index, option in enumerate(options):
        if not option.startswith("-"):
            return None  # `sh script.sh`: a script file, not a string (still not editable)
        if _SCRIPT_OPTION.match(option):
            return options[index + 1] if index + 1 < len(options) else ""
    return None


def refuse_shell(line: CommandLine, flag: str) -> None:
    """Raise `ShellScript` when the engine runs inside a shell script."""
    script = shell_script(line)
    if script is None:
        return
    shown = script if len(script) <= 80 else script[:77] + "..."
    inside = "is inside" if flag in script or _underscored(flag) in script else "would go after"
    raise EngineArgsError(
        "ShellScript",
        f"the engine runs in a shell script ({shown!r}): {flag} {inside} it, where slascaler "
        "can neither read nor set it; run the engine directly (command: [vllm, serve] or the "
        "engine's own launcher) with its flags in args, one element each",
    )


def _underscored(flag: str) -> str:
    return "--" + flag.removeprefix("--").replace("-", "_")


def _spellings(flag: str) -> tuple[str, ...]:
    underscored = _underscored(flag)
    return (flag,) if underscored == flag else (flag, underscored)


def _matches(element: str, spellings: Sequence[str]) -> tuple[bool, bool]:
    """(is this flag, value inline after '=')."""
    for spelling in spellings:
        if element == spelling:
            return True, False
        if element.startswith(spelling + "="):
            return True, True
    return False, False


def _check_not_in_one_element(parts: Sequence[str], spellings: Sequence[str]) -> None:
    for element in parts:
        if " " in element.strip() and any(s in element for s in spellings):
            raise EngineArgsError(
                "ShellScript",
                f"{spellings[0]} is inside one argument with spaces ({element[:60]!r}), which the "
                "engine does not split; put the engine's flags in the container's args, one "
                "element each, so they can be read and set",
            )


def parse_value(flag: str, text: str, written: str) -> int:
    """A flag's value as a positive int32; `written` is how it appears (for the message)."""
    try:
        value = int(text.strip())
    except ValueError:
        raise EngineArgsError(
            "InvalidValue",
            f"{written} is not a whole number; write e.g. {flag} 64, or remove it to use the "
            "engine's default",
        ) from None
    if value <= 0:
        raise EngineArgsError(
            "InvalidValue",
            f"{written}: {value} is not a positive number; slascaler tunes only positive values "
            f"(set {flag} to a positive number, or leave the knob out of spec.knobs)",
        )
    if value > INT32_MAX:
        raise EngineArgsError(
            "OutOfRange",
            f"{written}: {value} is beyond {INT32_MAX}, the largest value Kubernetes' int32 "
            f"status fields (and spec.knobs) hold; set {flag} to a realistic value",
        )
    return value


def read_flag(line: CommandLine, flag: str) -> int | None:
    """The flag's value (the last occurrence wins), or None when it is not set."""
    spellings = _spellings(flag)
    refuse_shell(line, flag)
    parts = line.argv
    _check_not_in_one_element(parts, spellings)
    value: int | None = None
    for index, element in enumerate(parts):
        found, inline = _matches(element, spellings)
        if not found:
            continue
        if inline:
            value = parse_value(flag, element.split("=", 1)[1], element)
        elif index + 1 < len(parts) and not parts[index + 1].startswith("--"):
            value = parse_value(flag, parts[index + 1], f"{element} {parts[index + 1]}")
        else:
            after = f" (it is followed by {parts[index + 1]})" if index + 1 < len(parts) else ""
            raise EngineArgsError(
                "MissingValue",
                f"{element} has no value{after}; the engine refuses it: write e.g. {flag} 64",
            )
    return value


def has_flag(line: CommandLine, flag: str) -> bool:
    """True when the flag appears in the command line, with or without a value."""
    spellings = _spellings(flag)
    return any(_matches(element, spellings)[0] for element in line.argv)


def flag_text(line: CommandLine, flag: str) -> str | None:
    """The raw value of the last occurrence of a flag (`--config x.yaml` → "x.yaml")."""
    spellings = _spellings(flag)
    parts = line.argv
    text: str | None = None
    for index, element in enumerate(parts):
        found, inline = _matches(element, spellings)
        if found:
            text = (
                element.split("=", 1)[1]
                if inline
                else (parts[index + 1] if index + 1 < len(parts) else "")
            )
    return text


def _replace_in(
    parts: Sequence[str], spellings: Sequence[str], value: int
) -> tuple[list[str], bool]:
    out = list(parts)
    found_any = False
    for index, element in enumerate(out):
        found, inline = _matches(element, spellings)
        if not found:
            continue
        found_any = True
        if inline:
            out[index] = element.split("=", 1)[0] + f"={value}"
        elif index + 1 < len(out):
            out[index + 1] = str(value)
        else:
            raise EngineArgsError(
                "MissingValue", f"{spellings[0]} is the last element and has no value"
            )
    return out, found_any


def with_flag(line: CommandLine, flag: str, value: int) -> CommandLine:
    """The command line with the flag set to `value`; everything else unchanged."""
    if not 0 < value <= INT32_MAX:
        raise EngineArgsError("OutOfRange", f"{flag} must be in [1, {INT32_MAX}], got {value}")
    spellings = _spellings(flag)
    refuse_shell(line, flag)
    _check_not_in_one_element(line.argv, spellings)
    # A flag as the last element of `command` takes its value from the first of `args`.
    if line.command and _matches(line.command[-1], spellings) == (True, False) and line.args:
        args = [str(value), *line.args[1:]]
        command, _ = _replace_in(line.command[:-1], spellings, value)
        rest, _ = _replace_in(args[1:], spellings, value)
        return CommandLine((*command, line.command[-1]), (args[0], *rest))
    command, in_command = _replace_in(line.command, spellings, value)
    args, in_args = _replace_in(line.args, spellings, value)
    if not (in_command or in_args):
        args += [flag, str(value)]
    return CommandLine(tuple(command), tuple(args))
