"""The engine's container in a pod template, and where each engine flag's value lives in it.

- `find_engine_container`: the container named by `spec.targetRef.container`; else the only
  one; else the one whose command line runs the engine's launcher (`vllm serve`,
  `python -m sglang.launch_server`, `text-generation-launcher`), else the one whose image is
  the engine's; else a refusal that says to name it (`EngineContainerUnknown`), never a guess
  (a sidecar that happens to come first must not get the engine's flags).
- `read_setting`: one flag's value and where it lives, in the engine's own precedence:
  the command line (`args`); else TGI's environment variable (`MAX_BATCH_SIZE`, a literal
  value: one from a ConfigMap or Secret is refused as not editable); else, when the engine
  reads `--config FILE` (vLLM, SGLang: command line > file > defaults), a refusal, since the
  value may be in the file, which slascaler does not edit; else the engine's default (the
  caller resolves it with the GPU, `engines.engine_default`).
- `set_setting`: the change that gives the flag a value where it lives: a new command line,
  or a new value of its environment variable.

Every refusal is an `EngineArgsError` with a CamelCase reason and a message naming the value
and the fix. Pure (no I/O). Called by `kube.fleet` and `kube.actuation`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from slascaler.engine_args import (
    CommandLine,
    EngineArgsError,
    flag_text,
    has_flag,
    parse_value,
    read_flag,
    refuse_shell,
    with_flag,
)
from slascaler.engines import EngineFlavour

Where = Literal["args", "env", "default"]


class ContainerMissing(Exception):
    """The container named by spec.targetRef.container is not in the pod template."""


@dataclass(frozen=True)
class EngineContainer:
    """What slascaler reads of one container: name, image, command line, literal env.

    `env` maps each variable to its literal value, or to None when it comes from elsewhere
    (`valueFrom`: a ConfigMap, a Secret, a field), which slascaler cannot edit.
    """

    name: str
    image: str = ""
    line: CommandLine = field(default_factory=CommandLine)
    env: tuple[tuple[str, str | None], ...] = ()

    @classmethod
    def from_json(cls, container: Mapping[str, Any]) -> EngineContainer:
        env = tuple(
            (str(item["name"]), None if "valueFrom" in item else str(item.get("value", "")))
            for item in container.get("env") or ()
        )
        return cls(
            name=str(container["name"]),
            image=str(container.get("image", "")),
            line=CommandLine(
                tuple(container.get("command") or ()), tuple(container.get("args") or ())
            ),
            env=env,
        )

    def env_value(self, variable: str) -> tuple[bool, str | None]:
        """(is the variable set, its literal value or None); the last entry wins, as in a pod."""
        found: tuple[bool, str | None] = (False, None)
        for name, value in self.env:
            if name == variable:
                found = (True, value)
        return found


def _runs(flavour: EngineFlavour, container: EngineContainer) -> bool:
    return bool(flavour.launcher.search(" ".join(container.line.argv)))


def find_engine_container(
    flavour: EngineFlavour, containers: Sequence[Mapping[str, Any]], named: str | None
) -> EngineContainer:
    """The engine's container; `ContainerMissing` for a name that is not there, and an
    `EngineArgsError` (`EngineContainerUnknown`) when several could be it."""
    parsed = [EngineContainer.from_json(c) for c in containers]
    names = ", ".join(c.name for c in parsed)
    if named is not None:
        for container in parsed:
            if container.name == named:
                return container
        raise ContainerMissing(
            f"the Deployment has no container named {named!r} (it has {names}); "
            "fix spec.targetRef.container"
        )
    if len(parsed) == 1:
        return parsed[0]
    for test, how in ((_runs, "command"), (lambda f, c: bool(f.image.search(c.image)), "image")):
        matching = [c for c in parsed if test(flavour, c)]
        if len(matching) == 1:
            return matching[0]
        if len(matching) > 1:
            raise EngineArgsError(
                "EngineContainerUnknown",
                f"containers {', '.join(c.name for c in matching)} all look like {flavour.name} "
                f"(by their {how}); name the engine's in spec.targetRef.container",
            )
    raise EngineArgsError(
        "EngineContainerUnknown",
        f"the pod has several containers ({names}) and none runs {flavour.launcher_text} or "
        f"{flavour.name}'s image; name the engine's in spec.targetRef.container",
    )


@dataclass(frozen=True)
class Setting:
    """One flag's value and where it lives. `value` None: absent (the engine's default)."""

    flag: str
    value: int | None
    where: Where
    env: str | None = None  # the variable, when where == "env"

    def describe(self) -> str:
        if self.where == "env":
            return f"{self.env}={self.value} (env)"
        return f"{self.flag} {self.value}"


def read_setting(flavour: EngineFlavour, container: EngineContainer, flag: str) -> Setting:
    """The flag's value and where it lives; `EngineArgsError` when it cannot be tuned there."""
    line = container.line
    refuse_shell(line, flag)
    try:
        value = read_flag(line, flag)
    except EngineArgsError as error:
        raise _explained(flavour, flag, error) from None
    if value is not None:
        return Setting(flag, value, "args")
    variable = flavour.flag_env.get(flag)
    if variable is not None:
        present, text = container.env_value(variable)
        if present and text is None:
            raise EngineArgsError(
                "ValueFromReference",
                f"{flavour.name} reads {flag} from the environment variable {variable}, which "
                "takes its value from a ConfigMap, Secret or field (valueFrom) that slascaler "
                f"does not edit; set {flag} in args or give {variable} a literal value",
            )
        if present and text is not None:
            try:
                number = parse_value(flag, text, f"{variable}={text!r}")
            except EngineArgsError as error:
                raise _explained(flavour, flag, error) from None
            return Setting(flag, number, "env", variable)
    if flavour.config_flag is not None and has_flag(line, flavour.config_flag):
        path = flag_text(line, flavour.config_flag) or "(no file)"
        raise EngineArgsError(
            "InConfigFile",
            f"{flag} is not on the command line and {flavour.name} reads "
            f"{flavour.config_flag} {path}, where it may be set (the command line wins over "
            f"the file): slascaler does not edit that file; put {flag} in args to let it tune "
            "the value there",
        )
    return Setting(flag, None, "default")


def _explained(flavour: EngineFlavour, flag: str, error: EngineArgsError) -> EngineArgsError:
    """SGLang's `--chunked-prefill-size -1` is valid (chunking off): say so, not "invalid"."""
    if flavour.name == "SGLang" and flag == flavour.chunk_flag and "-1 is not" in str(error):
        return EngineArgsError(
            "ChunkingOff",
            f"{flag} -1 turns SGLang's chunked prefill off, so there is no chunk size to tune; "
            f"set {flag} to a positive size (e.g. 8192) to let slascaler tune chunkSize",
        )
    return error


@dataclass(frozen=True)
class SettingChange:
    """How one new value is written: a new command line, or an env variable's new value."""

    line: CommandLine | None = None
    env: tuple[str, str] | None = None


def set_setting(line: CommandLine, setting: Setting, value: int) -> SettingChange:
    """The write that gives `setting`'s flag `value` where it lives (args when absent)."""
    if setting.where == "env":
        assert setting.env is not None
        return SettingChange(env=(setting.env, str(value)))
    return SettingChange(line=with_flag(line, setting.flag, value))
