"""Progress as plain lines, for a log or a pipe where a live bar would be noise.

`tailsim run` with stderr not a terminal says, per policy, each time another tenth of its
requests has arrived, and at least every `every_s` seconds while it moves: a minutes-long run
in a log or under CI is never silent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

#: Seconds after which a policy that has moved gets a line even before its next tenth.
EVERY_S = 30.0


class ProgressLines:
    """A `progress(policy, k)` callback that writes lines like
    `run: race 40% (80,000 of 200,000 requests, 35 s)` through `write`."""

    def __init__(
        self,
        names: Sequence[str],
        n: int,
        write: Callable[[str], None],
        every_s: float = EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.n, self.write, self.every_s, self.clock = n, write, every_s, clock
        self.started = clock()
        self.done = dict.fromkeys(names, 0)
        self.said = dict.fromkeys(names, 0)  # requests done at each policy's last line
        self.said_at = dict.fromkeys(names, self.started)

    def __call__(self, name: str, k: int) -> None:
        done = self.done[name] = self.done.get(name, 0) + k
        said = self.said.get(name, 0)
        if done < said:  # started again (its vectorized chunks dropped for the event engine)
            self.said[name] = said = 0
        now = self.clock()
        tenth = done * 10 // self.n
        late = now - self.said_at.get(name, self.started) >= self.every_s and done > said
        if tenth > said * 10 // self.n or late:
            self.said[name], self.said_at[name] = done, now
            self.write(
                f"run: {name} {done * 100 // self.n}% ({done:,} of {self.n:,} requests, "
                f"{now - self.started:.0f} s)"
            )
