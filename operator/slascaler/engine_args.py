"""Engine flags in a container's command line: read one, or set one keeping everything else.

An engine's max batch and chunk size are command-line flags (`--max-num-seqs 64` or
`--max-num-seqs=64`, and for vLLM also the underscore spelling `--max_num_seqs`). The
process's argv is the container's `command` followed by its `args`; a flag may sit in
either. Reading takes the last occurrence (as argparse does); writing replaces the value of
every occurrence in place, or appends `--flag value` to `args` when the flag is absent. Every
other element is kept as it was. Flags buried in a shell string (`sh -c "vllm serve ..."`)
cannot be edited safely: both functions refuse them with `EngineArgsError`.

Pure (no I/O). Called by the operator's fleet reader and actuation, and by the e2e engines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class EngineArgsError(ValueError):
    """The container's command line cannot be read or edited for this flag."""


@dataclass(frozen=True)
class CommandLine:
    """A container's `command` and `args` (either may be empty)."""

    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()


def _spellings(flag: str) -> tuple[str, ...]:
    underscored = "--" + flag.removeprefix("--").replace("-", "_")
    return (flag,) if underscored == flag else (flag, underscored)


def _matches(element: str, spellings: Sequence[str]) -> tuple[bool, bool]:
    """(is this flag, value inline after '=')."""
    for spelling in spellings:
        if element == spelling:
            return True, False
        if element.startswith(spelling + "="):
            return True, True
    return False, False


def _check_not_in_shell_string(parts: Sequence[str], spellings: Sequence[str]) -> None:
    for element in parts:
        if " " in element.strip() and any(s in element for s in spellings):
            raise EngineArgsError(
                f"{spellings[0]} is inside a shell string ({element[:60]!r}...); put the engine's "
                "flags in the container's args, one element each, so they can be read and set"
            )


def _parse_value(flag: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise EngineArgsError(f"{flag} has the value {text!r}, not a whole number") from None
    if value <= 0:
        raise EngineArgsError(f"{flag} has the value {value}, not a positive number")
    return value


def read_flag(line: CommandLine, flag: str) -> int | None:
    """The flag's value (the last occurrence wins), or None when it is not set."""
    spellings = _spellings(flag)
    parts = (*line.command, *line.args)
    _check_not_in_shell_string(parts, spellings)
    value: int | None = None
    for index, element in enumerate(parts):
        found, inline = _matches(element, spellings)
        if not found:
            continue
        if inline:
            value = _parse_value(flag, element.split("=", 1)[1])
        elif index + 1 < len(parts):
            value = _parse_value(flag, parts[index + 1])
        else:
            raise EngineArgsError(f"{flag} is the last argument and has no value")
    return value


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
            raise EngineArgsError(f"{spellings[0]} is the last element and has no value")
    return out, found_any


def with_flag(line: CommandLine, flag: str, value: int) -> CommandLine:
    """The command line with the flag set to `value`; everything else unchanged."""
    if value <= 0:
        raise EngineArgsError(f"{flag} must be positive, got {value}")
    spellings = _spellings(flag)
    _check_not_in_shell_string((*line.command, *line.args), spellings)
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
