"""Engine flags in container args: read, set, and everything else left exactly as it was."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slascaler.engine_args import CommandLine, EngineArgsError, read_flag, shell_script, with_flag

FLAG = "--max-num-seqs"
VLLM = CommandLine(
    ("vllm", "serve"),
    ("meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "64", "--max-num-batched-tokens=2048"),
)


def test_reads_both_spellings_and_forms() -> None:
    assert read_flag(VLLM, FLAG) == 64
    assert read_flag(VLLM, "--max-num-batched-tokens") == 2048
    assert read_flag(CommandLine(args=("--max_num_seqs=8",)), FLAG) == 8
    assert read_flag(CommandLine(args=("--port", "8000")), FLAG) is None


def test_last_occurrence_wins_as_argparse() -> None:
    line = CommandLine(args=("--max-num-seqs", "8", "--max-num-seqs=16"))
    assert read_flag(line, FLAG) == 16
    assert read_flag(with_flag(line, FLAG, 32), FLAG) == 32
    assert with_flag(line, FLAG, 32).args == ("--max-num-seqs", "32", "--max-num-seqs=32")


def test_set_keeps_every_other_element_and_form() -> None:
    out = with_flag(VLLM, FLAG, 128)
    assert out.command == VLLM.command
    assert out.args == (
        "meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "128", "--max-num-batched-tokens=2048"
    )  # fmt: skip
    chunk = with_flag(VLLM, "--max-num-batched-tokens", 4096)
    assert chunk.args[-1] == "--max-num-batched-tokens=4096"


def test_absent_flag_is_appended_to_args() -> None:
    out = with_flag(CommandLine(("vllm", "serve", "m"), ()), FLAG, 32)
    assert out == CommandLine(("vllm", "serve", "m"), (FLAG, "32"))


def test_flag_in_command_is_edited_there() -> None:
    line = CommandLine(("vllm", "serve", "m", "--max-num-seqs", "8"), ("--port", "8000"))
    out = with_flag(line, FLAG, 16)
    assert out == CommandLine(("vllm", "serve", "m", "--max-num-seqs", "16"), ("--port", "8000"))
    split = CommandLine(("vllm", "--max-num-seqs"), ("8", "--port", "1"))
    assert read_flag(split, FLAG) == 8
    assert with_flag(split, FLAG, 4) == CommandLine(
        ("vllm", "--max-num-seqs"), ("4", "--port", "1")
    )


SCRIPT = "vllm serve m --max-num-seqs 8"


@pytest.mark.parametrize(
    ("line", "reason", "message"),
    [
        (CommandLine(("sh", "-c"), (SCRIPT,)), "ShellScript", "is inside it"),
        (CommandLine(("/bin/bash", "-lc", SCRIPT)), "ShellScript", "is inside it"),
        (CommandLine(("env", "A=1", "sh", "-ec"), (SCRIPT,)), "ShellScript", "inside it"),
        (CommandLine((), ("-c", SCRIPT)), "ShellScript", "inside it"),  # entrypoint: a shell
        (CommandLine(args=("--max-num-seqs 8",)), "ShellScript", "one argument with spaces"),
        (CommandLine(args=("--max-num-seqs", "lots")), "InvalidValue", "not a whole number"),
        (CommandLine(args=("--max-num-seqs=abc",)), "InvalidValue", "--max-num-seqs=abc is not"),
        (CommandLine(args=("--max-num-seqs", "0")), "InvalidValue", "not a positive number"),
        (CommandLine(args=("--max-num-seqs",)), "MissingValue", "no value"),
        (
            CommandLine(args=("--max-num-seqs", "--port", "8000")),
            "MissingValue",
            r"no value \(it is followed by --port\)",
        ),
        (CommandLine(args=("--max-num-seqs", "2147483648")), "OutOfRange", "beyond 2147483647"),
        (CommandLine(args=("--max-num-seqs=99999999999999999999",)), "OutOfRange", "int32"),
    ],
)
def test_unusable_command_lines_are_refused_naming_the_value_and_the_fix(
    line: CommandLine, reason: str, message: str
) -> None:
    with pytest.raises(EngineArgsError, match=message) as refused:
        read_flag(line, FLAG)
    assert refused.value.reason == reason


def test_largest_int32_is_read() -> None:
    assert read_flag(CommandLine(args=("--max-num-seqs", "2147483647")), FLAG) == 2**31 - 1


@pytest.mark.parametrize(
    "line",
    [
        CommandLine(("sh", "-c"), ("exec vllm serve m --port 8000",)),  # the flag is absent
        CommandLine(("bash", "-c", "vllm serve m"), ()),
        CommandLine((), ("-c", "vllm serve m")),
    ],
)
def test_nothing_is_appended_after_a_shell_script(line: CommandLine) -> None:
    """sh would take an argument after the script as $0 and ignore it: refused, not appended."""
    with pytest.raises(EngineArgsError, match="would go after it") as refused:
        with_flag(line, FLAG, 64)
    assert refused.value.reason == "ShellScript"
    with pytest.raises(EngineArgsError):
        read_flag(line, FLAG)


def test_a_shell_that_runs_no_script_string_is_not_mistaken_for_one() -> None:
    assert shell_script(CommandLine(("vllm", "serve"), ("-c", "cfg"))) is None
    assert (
        shell_script(CommandLine(("python3", "-m", "vllm.entrypoints.openai.api_server"))) is None
    )
    assert shell_script(CommandLine(("sh", "-e", "-c", "x"))) == "x"


TOKENS = st.sampled_from(
    ["vllm", "serve", "--port", "8000", "--max-num-seqs", "--max_num_seqs", "32", "m",
     "--max-num-seqs=4", "--enable-prefix-caching", "--max-num-batched-tokens", "1024"]
)  # fmt: skip


@given(st.lists(TOKENS, max_size=10), st.lists(TOKENS, max_size=10), st.integers(1, 10**6))
def test_set_then_read_gives_the_value_and_only_the_flag_changes(
    command: list[str], args: list[str], value: int
) -> None:
    line = CommandLine(tuple(command), tuple(args))
    try:
        read_flag(line, FLAG)
        other = read_flag(line, "--max-num-batched-tokens")
    except EngineArgsError:
        return  # a flag without a value: the engine itself would refuse this command line
    out = with_flag(line, FLAG, value)
    assert read_flag(out, FLAG) == value
    assert read_flag(out, "--max-num-batched-tokens") == other
    before, after = (*line.command, *line.args), (*out.command, *out.args)
    if len(after) == len(before):
        changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
        for i in changed:  # only the flag's own value (inline or next element) changed
            assert after[i].startswith(("--max-num-seqs=", "--max_num_seqs=")) or after[i] == str(
                value
            )
    else:
        assert after == (*before, FLAG, str(value))
