"""Engine flags in container args: read, set, and everything else left exactly as it was."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slascaler.engine_args import CommandLine, EngineArgsError, read_flag, with_flag

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


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (CommandLine(("sh", "-c"), ("vllm serve m --max-num-seqs 8",)), "shell string"),
        (CommandLine(args=("--max-num-seqs", "lots")), "not a whole number"),
        (CommandLine(args=("--max-num-seqs", "0")), "not a positive number"),
        (CommandLine(args=("--max-num-seqs",)), "no value"),
    ],
)
def test_unusable_command_lines_are_refused_with_the_reason(
    line: CommandLine, message: str
) -> None:
    with pytest.raises(EngineArgsError, match=message):
        read_flag(line, FLAG)


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
