"""The error types for unusable input: where (source and key path) and what is allowed.

`FieldError` is raised inside the format's validators (problems at key paths below the model
that raised them); `ScenarioError` is what a caller sees (the source and every problem).
"""

from __future__ import annotations

from collections.abc import Iterable

#: A key path into a scenario: ('providers', 'direct', 'serves', 'big', 'ttft_s').
Path = tuple[str | int, ...]


class FieldError(ValueError):
    """Validation problems, each at a key path below the model that raised them."""

    def __init__(self, path: Path, message: str, *more: tuple[Path, str]) -> None:
        super().__init__(message)
        self.problems: list[tuple[Path, str]] = [(path, message), *more]


class ScenarioError(Exception):
    """A scenario that cannot be used: the source, and each problem with its key path."""

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(self.render())

    def __reduce__(self) -> tuple[type[ScenarioError], tuple[str, list[tuple[str, str]]]]:
        """Pickled by its parts, so it crosses to and from worker processes whole."""
        return (type(self), (self.source, self.problems))

    def render(self) -> str:
        """A readable, multi-line message for people."""
        if len(self.problems) == 1 and not self.problems[0][0]:
            return f"{self.source}: {self.problems[0][1]}"
        count = len(self.problems)
        lines = [f"{self.source}: {count} problem{'s' if count > 1 else ''}:"]
        lines += [f"  {path or '(top level)'}: {message}" for path, message in self.problems]
        return "\n".join(lines)


def format_path(path: Iterable[str | int]) -> str:
    """('a', 'b', 3, 'c') -> 'a.b[3].c'."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
